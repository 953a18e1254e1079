"""`pptune validate`: run a plan for real and compare it with the simulator's prediction.

No torch at import time: ``import pptune.validate`` works without it; the
modules that need torch import it inside their functions.

Modules:
- ``spec``     what to run (``RunSpec``) and the checks made before any process starts (pure)
- ``measure``  op stamps -> step time, per-device busy / idle, bubble, measured timeline (pure)
- ``runner``   the ranks: stages, torch schedule, timing hooks; spawned or under torchrun
- ``timing``   op stamps, the loss timed alone, contention between ranks
- ``torch_hooks`` the one adapter to torch's private pipelining API (version-checked)
- ``compare``  the simulator's prediction for the plan and the comparison
- ``session``  the command from request to outcome
- ``render``   rich tables of the outcome (returned, never printed)
"""
