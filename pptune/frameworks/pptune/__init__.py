"""pptune's own YAML, TOML or JSON config (adapter.py ties the pieces together)."""
