"""What the adapters share: reading, fields, releases, the closest-plan steps, writing."""
