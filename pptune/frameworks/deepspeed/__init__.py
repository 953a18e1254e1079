"""DeepSpeed: JSON or YAML configs (adapter.py ties the pieces together)."""
