"""check-config: rules over a training config and their findings."""
