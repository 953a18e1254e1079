"""Readers for the training configs users already have (pptune, DeepSpeed,
Megatron-LM, torchtitan), each producing pptune's TrainingConfig."""

from pptune.configs.read import ConfigFormat, ReadResult, read_config

__all__ = ["ConfigFormat", "ReadResult", "read_config"]
