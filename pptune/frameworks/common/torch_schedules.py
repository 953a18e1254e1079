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


def microbatch_rules(cfg: TrainingConfig, m: int, semantics: Semantics, add: Add, *,
                     zb_h1_rounds: bool, how: Callable[[int], str] = str) -> None:
    """Error findings for micro-batch counts torch's schedule classes refuse.

    ``zb_h1_rounds``: zb-h1 runs as ScheduleInterleavedZeroBubble (torchtitan),
    which has the interleaved round rule; pptune's own zb-h1 runs one stage per
    rank and has none. ``how``: the micro-batch count a fix names, in the framework's
    settings.
    """
    p, versions = cfg.pp, semantics.versions
    where = f"(torch {versions.of(TORCH)} torch/distributed/pipelining/schedules.py"
    if cfg.schedule is Schedule.ONE_F_ONE_B and m < p and one_f_one_b_needs_m_ge_stages(versions):
        add("1f1b-m-lt-pp", "error",
            f"1f1b with fewer micro-batches than stages ({m} < {p}): torch's Schedule1F1B raises "
            f"'Number of microbatches ({m}) must be greater than or equal to the number of "
            f"stages ({p})' {where}, Schedule1F1B.__init__); raise the micro-batches to >= {how(p)}",
            microbatches=m, pp=p)
    if cfg.schedule not in (Schedule.INTERLEAVED, Schedule.ZB_H1) or p < 2:
        return
    if cfg.schedule is Schedule.ZB_H1 and not zb_h1_rounds:
        return
    name = ("ScheduleInterleaved1F1B" if cfg.schedule is Schedule.INTERLEAVED
            else "ScheduleInterleavedZeroBubble")
    if interleaved_rounds(versions):
        rounds = refused_rounds(m, p)
        if rounds:
            good = _next_valid(m, p)
            add("interleaved-rounds", "error",
                f"{m} micro-batches on pp {p}: torch's {name} needs a multiple of its round "
                f"count max(1, m // pp) = {rounds} ('Interleaved 1F1B requires the number of "
                f"microbatches to be a multiple of the number of rounds') {where}); use {how(good)}",
                microbatches=m, pp=p, rounds=rounds)
    elif m % p:
        add("interleaved-m-not-multiple", "error",
            f"{m} micro-batches on pp {p}: torch {versions.of(TORCH)}'s {name} requires a "
            f"multiple of the number of pipeline ranks {where}); use {how(m + p - m % p)}",
            microbatches=m, pp=p)


def _next_valid(m: int, p: int) -> int:
    """The smallest count above m that torch's round rule accepts."""
    n = m + 1
    while n % max(1, n // p):
        n += 1
    return n
