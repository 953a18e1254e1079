"""Trials through the engine users already run: ``tune --launcher TEMPLATE`` (a cluster).

Without a launcher tune spawns each trial's ranks on this host. With one, each
trial is ``pptune validate`` of the candidate's pipeline, started by the
user's launcher (torchrun across nodes, srun around torchrun, ...): the
template is a command line whose placeholders tune fills per trial:

==================  ==========================================================
``{nproc}``         the trial's ranks (its pipeline depth)
``{nodes}``         nodes it spans at ``--gpus-per-node`` ranks a node
``{nproc_per_node}`` ranks per node (``ceil(nproc / nodes)``)
``{command}``       ``PYTHON -m pptune validate ... --json``: the trial itself
``{module}``        ``-m pptune validate ... --json``, for ``torchrun ... {module}``
``{python}``        this Python interpreter
==================  ==========================================================

e.g. ``torchrun --nnodes {nodes} --nproc-per-node {nproc_per_node}
--rdzv-backend c10d --rdzv-endpoint head:29500 {module}`` or ``srun -N {nodes}
--ntasks-per-node 1 torchrun --nnodes {nodes} --nproc-per-node
{nproc_per_node} --rdzv-backend c10d --rdzv-endpoint $HEAD:29500 {module}``.
validate joins the job under torchrun's environment, gathers every rank's
timings to rank 0 and rank 0 prints the comparison as JSON on stdout
(``pptune validate --json``); tune reads the trial from it
(``validate_json``) and journals it, so ``--resume`` works as on one host.
Each trial prices with the tune's own profile (``--profile``, saved in the
``-o`` folder, which must be on a filesystem the nodes share), so no rank
probes. The command line is split as a shell would split it (no shell runs;
``$HEAD`` stays as written unless the launcher expands it).
"""

from __future__ import annotations

import json
import math
import os
import shlex
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pptune.errors import BadInput, RunFailed, TimeLimit
from pptune.schemas import Profile
from pptune.tune.model import Trial
from pptune.tune.validate_json import trial_from
from pptune.validate.spec import RunSpec

PLACEHOLDERS = ("nproc", "nodes", "nproc_per_node", "command", "module", "python")
LAUNCH_GRACE_S = 120.0  # the launcher's own start-up (rendezvous, imports on every node)
TAIL_LINES = 3  # of the launcher's stderr, in a failed trial's message
END_GRACE_S = 10.0  # from SIGTERM to SIGKILL for a launcher stopped at its limit


@dataclass(frozen=True)
class Launcher:
    template: str
    gpus_per_node: int
    profile_path: Path  # the costs every trial's validate prices with
    device: str = "auto"  # --device as given: the ranks pick on their own nodes

    def check(self) -> None:
        """BadInput for a template tune cannot fill (before any trial runs)."""
        if "{command}" not in self.template and "{module}" not in self.template:
            raise BadInput(f"--launcher {self.template!r} has neither {{command}} nor {{module}}: "
                           "tune must tell the launcher what to run")
        try:
            self.template.format(**{k: "x" for k in PLACEHOLDERS})
        except (KeyError, IndexError, ValueError) as exc:
            raise BadInput(f"--launcher {self.template!r}: {exc!r} is not a placeholder; use "
                           + ", ".join("{" + p + "}" for p in PLACEHOLDERS)) from None

    def validate_args(self, spec: RunSpec) -> list[str]:
        """``pptune validate`` of one pipeline of the candidate, as flags."""
        src = spec.source
        args = ["validate", "--pp", str(spec.pp), "--microbatches", str(spec.microbatches),
                "--schedule", spec.schedule.value,
                "--split", ",".join(map(str, spec.stage_layers)),
                "--micro-batch-size", str(spec.micro_batch_size),
                "--virtual-stages", str(spec.virtual_stages)]
        if src.hf_config is not None:
            args += ["--hf-config", src.hf_config]
        elif src.module is not None:
            args += ["--module", src.module]
        else:
            args += ["--model", src.model or "gpt-small"]
        if src.seq_len is not None:
            args += ["--seq-len", str(src.seq_len)]
        args += ["--dtype", src.dtype, "--warmup", str(spec.warmup), "--steps", str(spec.steps),
                 "--timeout", f"{spec.timeout_s:g}", "--device", self.device,
                 "--profile", str(self.profile_path), "--json"]
        return args

    def argv(self, spec: RunSpec) -> list[str]:
        nodes = max(1, math.ceil(spec.pp / self.gpus_per_node))
        module = shlex.join(["-m", "pptune", *self.validate_args(spec)])
        values = {"nproc": str(spec.pp), "nodes": str(nodes),
                  "nproc_per_node": str(math.ceil(spec.pp / nodes)),
                  "python": shlex.quote(sys.executable), "module": module,
                  "command": f"{shlex.quote(sys.executable)} {module}"}
        return shlex.split(self.template.format(**values))

    def measure(self, key: str, spec: RunSpec, profile: Profile,
                budget_s: float | None = None) -> Trial:
        """Run the trial through the launcher; RunFailed with its stderr's tail when it fails,
        TimeLimit when it is not done within ``budget_s`` seconds (tune's --budget left)."""
        argv = self.argv(spec)
        limit = spec.timeout_s * (spec.warmup + spec.steps + 2) + LAUNCH_GRACE_S
        budgeted = budget_s is not None and budget_s < limit
        if budget_s is not None:
            limit = max(0.0, min(limit, budget_s))
        try:
            proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    text=True, start_new_session=True)
        except OSError as exc:
            raise BadInput(f"--launcher: cannot start {argv[0]!r}: {exc.strerror or exc}") from None
        try:
            out, err = proc.communicate(timeout=limit)
        except subprocess.TimeoutExpired:
            _end_session(proc)
            if budgeted:
                raise TimeLimit(f"the launcher's session was ended at {limit:.0f} s") from None
            raise RunFailed(f"trial {key}: the launcher ran past {limit:.0f} s; stopped") from None
        if proc.returncode != 0:
            raise RunFailed(f"trial {key}: the launcher exited with code {proc.returncode}: "
                            + _tail(err))
        doc = result_of(out)
        if doc is None:
            raise RunFailed(f"trial {key}: no validate result on the launcher's stdout (rank 0 "
                            f"prints it): {_tail(err)}")
        return trial_from(doc, key, profile)


def _end_session(proc: subprocess.Popen[str]) -> None:
    """End the launcher this tune started and everything in its session (its ranks):
    SIGTERM, then SIGKILL for what is left after ``END_GRACE_S``."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:  # the session is gone
            break
        try:
            proc.communicate(timeout=END_GRACE_S)
            break
        except subprocess.TimeoutExpired:
            continue


def result_of(stdout: str) -> dict[str, Any] | None:
    """The JSON object rank 0 printed (the first that parses, from a line that opens it)."""
    decoder = json.JSONDecoder()
    lines = stdout.splitlines(keepends=True)
    offset = 0
    for line in lines:
        if line.startswith("{"):
            try:
                doc, _ = decoder.raw_decode(stdout[offset:])
            except (ValueError, RecursionError):  # not the result: read on
                pass
            else:
                if isinstance(doc, dict):
                    return doc
        offset += len(line)
    return None


def _tail(text: str) -> str:
    lines = [x.strip() for x in text.strip().splitlines() if x.strip()]
    return " | ".join(lines[-TAIL_LINES:]) or "(nothing on stderr)"
