"""torchtitan: TOML job files (adapter.py ties the pieces together)."""
