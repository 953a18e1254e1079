"""One adapter per framework (pptune's own config, DeepSpeed, Megatron-LM,
torchtitan): its reader, its rules per release, the closest plan its files
can state and its writer, in its own folder, listed once in ``registry``.

``read.read_config`` reads any supported config; ``common/`` holds what the
adapters share (bounded source reading, the bash-subset parser for
Megatron-LM scripts, field helpers, releases, the closest-plan steps).
Nothing is imported here, so that importing one adapter never loads them all.
"""
