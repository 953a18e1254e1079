"""``read_log``: a training job's log, read by the adapter of the job's framework.

The config says whose job it is (``read_config``); that framework's adapter
reads the log (``Adapter.read_log``). A log with none of its lines is
refused, naming the framework whose lines it does have when another adapter
recognises them (a torchtitan log given with a Megatron-LM script), or, for a
NeMo log, which pptune does not read (NeMo's configs are Python), with the
``--step-s`` its lines give: NeMo 2's progress lines print the step's seconds
(``train_step_timing in s: 6.08``, Lightning's logged ``train_step_timing``).
A log of several runs (relaunches, restarts) is cut to its last, with a note
(``logruns.last_run``).
"""

from __future__ import annotations

import gzip
import io
import re
import statistics
from dataclasses import replace
from pathlib import Path

from pptune.errors import BadInput
from pptune.files import read_limited
from pptune.frameworks.common.joblog import JobLog
from pptune.frameworks.common.logruns import last_run
from pptune.frameworks.registry import ADAPTERS, Framework

GZIP_MAGIC = b"\x1f\x8b"  # RFC 1952's ID1 ID2
MAX_LOG_BYTES = 256 << 20  # weeks of iteration lines; give the tail of a bigger log
NEMO_STEP = re.compile(r"train_step_timing in s:\s*(\d{1,12}(?:\.\d{0,12})?(?:[eE][+-]?\d{1,3})?)",
                       re.ASCII)


def read_log(path: Path, framework: Framework | str) -> JobLog:
    """The log at ``path`` as ``framework`` prints it; BadInput (one line) otherwise."""
    fmt = Framework(framework)
    adapter = ADAPTERS[fmt]
    data = _gunzipped(Path(path), read_limited(Path(path), "log file", MAX_LOG_BYTES))
    text = data.decode("utf-8", errors="replace")
    whole, cut = _whole_lines(text)
    log = adapter.read_log(whole)
    if log is not None and cut:
        log = replace(log, notes=(*log.notes, cut))
    nemo = _nemo_hint(text) if log is None or not log.steps else ""
    if nemo:
        raise BadInput(f"--log {path} is a NeMo log ({nemo}); pptune reads no NeMo log: give "
                       "the job's seconds per step with --step-s instead of --log")
    if log is None:
        raise BadInput(f"--log {path}: pptune reads no log format of {adapter.title} configs; "
                       "give the job's seconds per step with --step-s")
    if log.steps:
        return last_run(log)
    others = [a for f, a in ADAPTERS.items() if f is not fmt and a.log_lines(text)]
    if others:
        raise BadInput(f"--log {path} is a {others[0].title} log (its iteration lines), but "
                       f"the config is {adapter.title}'s; give the log of the job the config "
                       "describes")
    nul = data.find(b"\x00")
    if nul >= 0:  # a crash may leave a few NULs in a text log: said only where none was read
        raise BadInput(f"--log {path} looks like a binary file (NUL byte at offset {nul}) "
                       f"and has no {adapter.title} iteration lines; give the job's text log, "
                       "or its seconds per step with --step-s instead of --log")
    said = f" ({log.missing})" if log.missing else ""
    raise BadInput(f"--log {path} has no {adapter.title} iteration lines{said}; give the job's "
                   "own log (stdout of its rank that prints them), or its seconds per step "
                   "with --step-s instead of --log")


def _gunzipped(path: Path, data: bytes) -> bytes:
    """A gzip'd log (``train.log.gz``, as log rotation keeps them) uncompressed, up to
    MAX_LOG_BYTES; other bytes as they are. BadInput for a damaged or oversized one."""
    if not data.startswith(GZIP_MAGIC):
        return data
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as fh:
            out = fh.read(MAX_LOG_BYTES + 1)
    except (OSError, EOFError) as exc:
        raise BadInput(f"--log {path} is gzip-compressed but cannot be uncompressed ({exc}); "
                       "give the log uncompressed") from None
    if len(out) > MAX_LOG_BYTES:
        raise BadInput(f"--log {path} uncompresses to more than {MAX_LOG_BYTES >> 20} MiB; "
                       "give its tail (the last run's lines)")
    return out


def _whole_lines(text: str) -> tuple[str, str]:
    """The log without a last line the job had not finished writing (a log copied from a
    running job: ``elapsed time per iteration (ms): 1`` cut from ``1234.5``), and a note
    saying so; "" where the log ends with a line break."""
    if not text or text.endswith(("\n", "\r")):
        return text, ""
    head, _, tail = text.rpartition("\n")
    if not tail.strip():
        return text, ""
    return head + "\n" if head else "", ("its last line has no line break (a job still "
                                          "writing it): left out")


def _nemo_hint(text: str) -> str:
    """What a NeMo log's step lines say (empty: none): their median after the first."""
    times = [float(m.group(1)) for m in NEMO_STEP.finditer(text)]
    if not times:
        return ""
    after = " after the first" if len(times) > 1 else ""
    return (f"{len(times)} train_step_timing line(s), median{after} "
            f"{statistics.median(times[1:] or times):.4g} s")
