"""The launch layer shared by ``probe`` and ``validate`` (no torch at import).

Modules:
- ``ranks``  local process launch and torchrun: node keys, rendezvous, process-group
  init, the spawned-child skeleton, timeouts, one-line rank errors
- ``deps``   lazy torch / pynvml imports with the install hint
- ``stats``  medians and spreads of repeated timings (pure Python)
"""
