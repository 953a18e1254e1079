"""``read_log``: a training job's log, read by the adapter of the job's framework.

The config says whose job it is (``read_config``); that framework's adapter
reads the log (``Adapter.read_log``). A log with none of its lines is
refused, naming the framework whose lines it does have when another adapter
recognises them (a torchtitan log given with a Megatron-LM script).
"""

from __future__ import annotations

from pathlib import Path

from pptune.errors import BadInput
from pptune.files import read_limited
from pptune.frameworks.common.joblog import JobLog
from pptune.frameworks.registry import ADAPTERS, Framework

MAX_LOG_BYTES = 256 << 20  # weeks of iteration lines; give the tail of a bigger log


def read_log(path: Path, framework: Framework | str) -> JobLog:
    """The log at ``path`` as ``framework`` prints it; BadInput (one line) otherwise."""
    fmt = Framework(framework)
    adapter = ADAPTERS[fmt]
    data = read_limited(Path(path), "log file", MAX_LOG_BYTES)
    text = data.decode("utf-8", errors="replace")
    log = adapter.read_log(text)
    if log is None:
        raise BadInput(f"--log {path}: pptune reads no log format of {adapter.title} configs; "
                       "give the job's seconds per step with --step-s")
    if log.steps:
        return log
    others = [a for f, a in ADAPTERS.items() if f is not fmt and a.log_lines(text)]
    if others:
        raise BadInput(f"--log {path} is a {others[0].title} log (its iteration lines), but "
                       f"the config is {adapter.title}'s; give the log of the job the config "
                       "describes")
    raise BadInput(f"--log {path} has no {adapter.title} iteration lines; give the job's own "
                   "log (stdout of its rank that prints them) or --step-s")
