"""`pptune tune`: measure the candidates that may win, calibrate, keep the fastest.

Modules (torch only inside ``trial``, lazily):
- ``calibrate``  the arithmetic: measured op medians -> per-layer factors, link latency
- ``model``      trials, the calibration they give, predictions over a calibrated profile
- ``candidates`` planned plans as runnable pipelines (or skipped, with the reason); pruning
- ``loop``       measure, calibrate, prune, stop (the runner is given: tests pass a fake)
- ``journal``    tune.jsonl, one line per trial, for --resume
- ``session``    flags, output folder, cost source, search
- ``trial``      the torch side: quick probe, one trial with validate's runner, the run
- ``artifacts``  the calibrated profile, the plan file, the winner's config, --json
- ``validate_json`` a ``pptune validate --json`` result as a trial (``pptune calibrate``)
- ``launcher``   trials through the user's launcher (``tune --launcher``, a cluster)
- ``jobs``       a job you run: its config, measured step, simulated step (``calibrate --run``)
- ``jobfit``     the factors jobs give, refused when unphysical; the calibrated profile
"""
