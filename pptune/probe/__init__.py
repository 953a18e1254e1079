"""`pptune probe`: measure this machine's cards and write a profile.

torch and pynvml are imported only inside the functions that need them
(``pptune.launch.deps``): ``import pptune.probe`` works on a laptop without
torch.

Modules:
- ``fit``        alpha-beta (latency + bytes / bandwidth) least-squares fit (pure)
- ``nccl_tests`` parser for NVIDIA nccl-tests output (pure)
- ``inventory``  devices, memory, driver and GPU-pair links through NVML
- ``models``     torch layer lists from a preset, a config.json or user code
- ``layers``     per-layer forward / input-grad / weight-grad timing and bytes
- ``comm``       p2p and all-reduce sweeps between processes (gloo, NCCL)
- ``build``      runs the probe and assembles the ``Profile``
- ``summary``    rich tables of a profile (returned, never printed)
- ``units``      byte sizes as typed (64M) and shown (64 MiB)
- ``_torch_layers`` the GPT / Llama decoder layers presets and config.json build
"""
