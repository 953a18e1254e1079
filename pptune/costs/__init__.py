"""Where per-layer costs come from: profile files, presets, HF configs."""
