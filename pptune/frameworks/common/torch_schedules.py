"""torch.distributed.pipelining's micro-batch rules, per torch release.

torchtitan and pptune's own runs build torch's schedule classes, so both
adapters judge a config with these (torch 2.13
``torch/distributed/pipelining/schedules.py`` unless ``--framework-version
torch=...`` names another): ``Schedule1F1B`` needs m >= stages (from 2.7,
PR #144702); ``ScheduleInterleaved1F1B`` and ``ScheduleInterleavedZeroBubble``
need m a multiple of their round count max(1, m // pp) (from 2.6; before, a
multiple of pp); ``ScheduleGPipe`` has no rule; ZBV runs exactly two stages
per rank (checked by check-config itself).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from pptune.costmodel.schedules import Schedule
from pptune.frameworks.common.adapter import Add
from pptune.frameworks.common.fields import Semantics
from pptune.frameworks.common.versions import TORCH, Versions
from pptune.schemas import TrainingConfig


def interleaved_rounds(versions: Versions) -> bool:
    """torch >= 2.6: ScheduleInterleaved1F1B needs m a multiple of its round count
    max(1, m // pp); before, a multiple of pp (torch/distributed/pipelining/schedules.py)."""
    return versions.at_least(TORCH, 2, 6)


def refused_rounds(m: int, p: int) -> int | None:
    """The round count max(1, m // pp) of torch >= 2.6's ScheduleInterleaved1F1B and
    ScheduleInterleavedZeroBubble where it does not divide ``m``, which they refuse
    ("Interleaved 1F1B requires the number of microbatches to be a multiple of the
    number of rounds", __init__); None where they run ``m`` micro-batches on ``p`` ranks."""
    rounds = max(1, m // p)
    return rounds if m % rounds else None


def one_f_one_b_needs_m_ge_stages(versions: Versions) -> bool:
    """Schedule1F1B refuses m < stages from torch 2.7 (PR #144702); earlier it ran."""
    return versions.at_least(TORCH, 2, 7)


def divisors(n: int) -> list[int]:
    """Every divisor of ``n`` (>= 1), ascending, in O(sqrt n)."""
    low = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return low + [n // d for d in reversed(low) if d * d != n]


def nearest_count(m: int, fallback: int, ok: Callable[[int], bool],
                  per_step: int | None) -> int:
    """The micro-batch count a fix names: where ``per_step`` (the micro-batches a rank runs
    per optimizer step, over one or more pipeline runs) must stay, the divisor of it that
    ``ok`` accepts nearest ``m`` (the larger on a tie), so the global batch is kept;
    otherwise, or where none is accepted, ``fallback``."""
    kept = [n for n in divisors(per_step) if ok(n)] if per_step is not None else []
    return min(kept, key=lambda n: (abs(n - m), -n)) if kept else fallback


def microbatch_rules(cfg: TrainingConfig, m: int, semantics: Semantics, add: Add, *,
                     zb_h1_rounds: bool, how: Callable[[int], str] = str,
                     per_step: int | None = None) -> None:
    """Error findings for micro-batch counts torch's schedule classes refuse.

    ``zb_h1_rounds``: zb-h1 runs as ScheduleInterleavedZeroBubble (torchtitan),
    which has the interleaved round rule; pptune's own zb-h1 runs one stage per
    rank and has none. ``how``: the micro-batch count a fix names, in the framework's
    settings. ``per_step``: the micro-batches per optimizer step a fix must keep
    (``nearest_count``; None: the count alone changes, and the global batch with it).
    """
    p, versions = cfg.pp, semantics.versions
    where = f"(torch {versions.of(TORCH)} torch/distributed/pipelining/schedules.py"
    if cfg.schedule is Schedule.ONE_F_ONE_B and m < p and one_f_one_b_needs_m_ge_stages(versions):
        good = nearest_count(m, p, lambda n: n >= p, per_step)
        add("1f1b-m-lt-pp", "error",
            f"1f1b with fewer micro-batches than stages ({m} < {p}): torch's Schedule1F1B raises "
            f"'Number of microbatches ({m}) must be greater than or equal to the number of "
            f"stages ({p})' {where}, Schedule1F1B.__init__); raise the micro-batches to >= "
            + (how(p) if good == p else f"{p}: {how(good)}"), microbatches=m, pp=p)
    if cfg.schedule not in (Schedule.INTERLEAVED, Schedule.ZB_H1) or p < 2:
        return
    if cfg.schedule is Schedule.ZB_H1 and not zb_h1_rounds:
        return
    name = ("ScheduleInterleaved1F1B" if cfg.schedule is Schedule.INTERLEAVED
            else "ScheduleInterleavedZeroBubble")
    if interleaved_rounds(versions):
        rounds = refused_rounds(m, p)
        if rounds:
            good = nearest_count(m, _next_valid(m, p), lambda n: not refused_rounds(n, p),
                                 per_step)
            add("interleaved-rounds", "error",
                f"{m} micro-batches on pp {p}: torch's {name} needs a multiple of its round "
                f"count max(1, m // pp) = {rounds} ('Interleaved 1F1B requires the number of "
                f"microbatches to be a multiple of the number of rounds') {where}); use {how(good)}",
                microbatches=m, pp=p, rounds=rounds)
    elif m % p:
        add("interleaved-m-not-multiple", "error",
            f"{m} micro-batches on pp {p}: torch {versions.of(TORCH)}'s {name} requires a "
            f"multiple of the number of pipeline ranks {where}); use "
            f"{how(nearest_count(m, m + p - m % p, lambda n: n % p == 0, per_step))}",
            microbatches=m, pp=p)


def _next_valid(m: int, p: int) -> int:
    """The smallest count above m that torch's round rule accepts."""
    n = m + 1
    while n % max(1, n // p):
        n += 1
    return n
