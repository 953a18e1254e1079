"""Megatron-LM: launch scripts and argument files (adapter.py ties the pieces together)."""
