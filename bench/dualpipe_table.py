"""When DualPipeV wins and when it loses: a table from the simulator (docs/dualpipe.md).

Every schedule runs on the same 4 devices with the same work per device and
micro-batch (the textbook mode of ``pptune simulate``: a forward F = 1, an
input-gradient backward B = 1, a weight-gradient W = W/F, split into the
schedule's chunks), for rows that vary the one thing each field report
turns on:

- the expert all-to-all (MoE): ``a2a`` = its time per micro-batch and device
  as a share of F, the same again in the backward, on the communication
  stream (a plain op waits for it; DualPipe's F&B pairs and Megatron-LM's
  combined 1F1B hide it behind the other micro-batch's compute);
- the weight-gradient share W/F (Zero Bubble paper, Table 9: 0.50-0.74 on
  real GPUs): the DualPipes and zero-bubble schedules fill their bubbles
  with W;
- full recomputation: the backward reruns the forward (B += F) and its
  all-to-alls; torchtitan 0.2.2 refuses DualPipeV's expert overlap with
  activation checkpointing and megatron-core the combined order with full
  recomputation, so those rows price the pairs without the overlap;
- the micro-batch count m.

Each cell is the schedule's step time over 1F1B's in the same row (below 1:
faster); the fastest of a row is in bold. A second table gives the peak
activations each schedule holds on its fullest device and the parameters
per device. ``python -m bench.dualpipe_table`` prints the page;
``make docs`` writes it (bench/docs.py) and tests/cli/test_docs.py fails
when it is stale.
"""

from __future__ import annotations

from dataclasses import dataclass

from pptune.costmodel.schedules import (
    Schedule,
    chunks_per_device,
    model_chunks,
    param_share_per_device,
)
from pptune.costmodel.simulate import SimResult, simulate, uniform_stages

P = 4  # devices

# (label, schedule, v, the Megatron-LM combined order)
COLUMNS: tuple[tuple[str, Schedule, int, bool], ...] = (
    ("1f1b", Schedule.ONE_F_ONE_B, 1, False),
    ("interleaved v=2", Schedule.INTERLEAVED, 2, False),
    ("interleaved v=4", Schedule.INTERLEAVED, 4, False),
    ("interleaved v=2 +a2a", Schedule.INTERLEAVED, 2, True),
    ("zb-h1", Schedule.ZB_H1, 1, False),
    ("zbv", Schedule.ZBV, 2, False),
    ("dualpipev", Schedule.DUALPIPEV, 2, False),
    ("dualpipe", Schedule.DUALPIPE, 2, False),
)


@dataclass(frozen=True)
class Row:
    label: str
    a2a: float  # all-to-all per micro-batch and device, forward and again backward, / F
    w_over_f: float
    recompute: bool
    m: int


ROWS = (
    Row("dense", 0.0, 1.0, False, 8),
    Row("dense", 0.0, 0.5, False, 8),
    Row("dense", 0.0, 0.5, False, 32),
    Row("MoE", 0.25, 0.5, False, 16),
    Row("MoE", 0.5, 0.5, False, 16),
    Row("MoE", 1.0, 0.5, False, 16),
    Row("dense, full recompute", 0.0, 0.5, True, 16),
    Row("MoE, full recompute", 0.5, 0.5, True, 16),
)


def run(row: Row, schedule: Schedule, v: int, combined: bool) -> SimResult | None:
    """One cell's simulation; None where the runtime refuses the combination."""
    if combined and row.recompute:
        return None  # megatron-core: "disable full recomputation when enabling ..."
    visits = model_chunks(schedule, P, v) // P  # a micro-batch's passes over a device
    f, b, w = 1.0 / visits, 1.0 / visits, row.w_over_f / visits
    a2a_f = a2a_b = row.a2a / visits
    if row.recompute:
        b += f
        a2a_b += a2a_f
    # without an overlap (recomputation under the DualPipes) the pairs run their
    # halves one after the other: the all-to-all is the ops' own time
    hidden = combined or (schedule in (Schedule.DUALPIPE, Schedule.DUALPIPEV)
                          and not row.recompute)
    stages = uniform_stages(
        P * chunks_per_device(schedule, v), f + (0.0 if hidden else a2a_f),
        b + (0.0 if hidden else a2a_b), w, act_bytes=1.0 / visits,
        fwd_comm_s=a2a_f if hidden else 0.0, bwd_comm_s=a2a_b if hidden else 0.0)
    return simulate(schedule, P, row.m, stages, v=v, keep_events=False, combined=combined)


def ratios() -> list[list[float | None]]:
    """Per row, each column's step time over 1F1B's (None: refused)."""
    out = []
    for row in ROWS:
        base = run(row, Schedule.ONE_F_ONE_B, 1, False)
        assert base is not None
        cells = []
        for _label, schedule, v, combined in COLUMNS:
            r = run(row, schedule, v, combined)
            cells.append(None if r is None else r.step_time_s / base.step_time_s)
        out.append(cells)
    return out


def step_table(table: list[list[float | None]]) -> list[str]:
    head = "| case | a2a / F | W / F | m | " + " | ".join(c[0] for c in COLUMNS) + " |"
    lines = [head, "|" + "---|" * (4 + len(COLUMNS))]
    for row, cells in zip(ROWS, table, strict=True):
        best = min(x for x in cells if x is not None)
        shown = ["-" if x is None else (f"**{x:.2f}**" if x == best else f"{x:.2f}")
                 for x in cells]
        lines.append(f"| {row.label} | {row.a2a:g} | {row.w_over_f:g} | {row.m} | "
                     + " | ".join(shown) + " |")
    return lines


def _winner(cells: list[float | None]) -> str:
    best = min(x for x in cells if x is not None)
    return COLUMNS[cells.index(best)][0]


def reading(table: list[list[float | None]]) -> list[str]:
    """What the table says, row group by row group, with its own numbers."""
    col = {c[0]: i for i, c in enumerate(COLUMNS)}

    def at(r: int, name: str) -> str:
        x = table[r][col[name]]
        return "-" if x is None else f"{x:.2f}"

    plain = [i for i, c in enumerate(COLUMNS) if not c[3] and c[1] not in (
        Schedule.DUALPIPE, Schedule.DUALPIPEV)]
    best_plain = [min(x for i, x in enumerate(table[r]) if i in plain and x is not None)
                  for r in range(len(ROWS))]
    spread = max(x for x in table[2] if x is not None) - min(x for x in table[2]
                                                             if x is not None)
    gap = max(abs((table[r][col["dualpipev"]] or 0.0)
                  - (table[r][col["interleaved v=2 +a2a"]] or 0.0)) for r in (3, 4, 5))
    return [
        "How to read it:",
        "",
        f"- dense models ({ROWS[1].label}, W/F {ROWS[1].w_over_f:g}, m {ROWS[1].m}): "
        f"{_winner(table[1])} is fastest ({at(1, 'zbv')}); DualPipeV ({at(1, 'dualpipev')}) "
        f"trails it and interleaved 1F1B with 4 virtual stages ({at(1, 'interleaved v=4')}): "
        "with no all-to-all its pairs hide nothing, and its bubble is larger than that of "
        "interleaved 1F1B past 3 virtual stages; with m = "
        f"{ROWS[2].m} every schedule is within {spread:.2f} of the others;",
        f"- MoE models: a schedule without an overlap waits for the all-to-all in every "
        f"op; the ones whose pairs hide it pull ahead as it grows: DualPipeV "
        f"{at(3, 'dualpipev')}, {at(4, 'dualpipev')}, {at(5, 'dualpipev')} and Megatron-LM's "
        f"combined interleaved order {at(3, 'interleaved v=2 +a2a')}, "
        f"{at(4, 'interleaved v=2 +a2a')}, {at(5, 'interleaved v=2 +a2a')} at an "
        f"all-to-all of {ROWS[3].a2a:g}, {ROWS[4].a2a:g} and {ROWS[5].a2a:g} x F, against "
        f"{best_plain[3]:.2f}, {best_plain[4]:.2f}, {best_plain[5]:.2f} for the best "
        f"schedule without an overlap. The combined order is within {gap:.2f} of DualPipeV "
        "on step time and holds more activations (the memory table): where a plan can "
        "run interleaved 1F1B on Megatron-LM, it is DualPipeV's rival;",
        f"- recomputation: the backward grows by a forward, the weight-gradient work that "
        f"fills the zero-bubble and DualPipe bubbles is a smaller share of it, and without "
        f"the overlap the pairs hide nothing: on the MoE row DualPipeV goes from "
        f"{at(4, 'dualpipev')} to {at(7, 'dualpipev')}, and {_winner(table[7])} wins "
        f"({at(7, _winner(table[7]))}).",
    ]


def memory_table() -> list[str]:
    row = Row("dense", 0.0, 0.5, False, 16)
    lines = ["| | " + " | ".join(c[0] for c in COLUMNS) + " |",
             "|---|" + "---|" * len(COLUMNS)]
    acts, params = [], []
    for _label, schedule, v, combined in COLUMNS:
        r = run(row, schedule, v, combined)
        assert r is not None
        acts.append(f"{max(d.peak_activation_bytes for d in r.devices):g}")
        params.append(f"{float(param_share_per_device(schedule, P, v) * P):g}x")
    lines.append("| peak activations, fullest device | " + " | ".join(acts) + " |")
    lines.append("| parameters per device | " + " | ".join(params) + " |")
    return lines


INTRO = """# When DualPipeV wins and when it loses

DualPipe (DeepSeek-AI 2024, "DeepSeek-V3 Technical Report", sec. 3.2.1) and
its cut-in-half form DualPipeV (torch's `ScheduleDualPipeV`) run a forward of
one micro-batch and a backward of another as one overlapped pair (F&B), so
that each hides the other's expert all-to-all, and fill the pipeline's
bubbles with weight-gradient work, as zero-bubble schedules do. Whether that
wins depends on the costs: `pptune recommend` searches both (and Megatron-LM's
all-to-all overlap inside interleaved 1F1B) and says which wins for yours;
`pptune simulate --schedule dualpipev` draws it.

Field reports go both ways. DeepSeek credits DualPipe with hiding the
all-to-all of DeepSeek-V3's training behind compute (its report, sec. 3.2.1).
Interleaved 1F1B with more than 3 virtual stages per device has a smaller
bubble than DualPipe on the same number of stages
([deepseek-ai/DualPipe#15](https://github.com/deepseek-ai/DualPipe/issues/15)).
Zero-bubble schedules with activation checkpointing ran at 13 tokens/s
against 1F1B's 100 in one torchtitan benchmark on 512 GPUs
([pytorch/torchtitan#773](https://github.com/pytorch/torchtitan/issues/773):
"slower TPS when used with AC, but without AC the TPS is fine"); that is a
runtime effect the simulator does not model, but the recomputation rows
below show the part it does: recomputation lengthens every backward and,
where the runtime then refuses the all-to-all overlap, the pairs hide
nothing.

## Step time against 1F1B

The same 4 devices and the same work per device for every schedule: a
forward F = 1, an input-gradient backward B = 1 and a weight-gradient
W = W/F per micro-batch, cut into each schedule's chunks; the MoE rows add an
all-to-all of a2a x F per micro-batch in the forward and again in the
backward, on the communication stream. Each cell is the step time over
1F1B's in its row (below 1: faster; the fastest in bold); "+a2a" is
Megatron-LM's `--overlap-moe-expert-parallel-comm` order, which megatron-core
refuses with full recomputation (-). Under full recomputation the DualPipes
run without their all-to-all overlap, as torchtitan 0.2.2 requires.
"""

MEMORY = """
## Memory

Peak activations on the fullest device, in units of one micro-batch's
activations of one device's share of the layers (the dense W/F = 0.5, m = 16
row), and parameters per device against 1F1B on the same devices.
DualPipe holds every chunk twice (DeepSeek's README: "2x" parameters);
DualPipeV holds one copy on half the devices DualPipe needs for the same
number of stages.
"""

FOOT = """
Regenerate with `make docs`; the rows and columns are in
`bench/dualpipe_table.py` (`python -m bench.dualpipe_table` prints this page).
"""


def page(generated: str = "") -> str:
    """docs/dualpipe.md as it should read, with ``generated`` (bench/docs.py's
    banner) under its title."""
    table = ratios()
    lines = [INTRO.split("\n", 1)[0], "", generated,
             INTRO.split("\n", 1)[1].rstrip("\n"), "", *step_table(table), "",
             *reading(table), MEMORY.rstrip("\n"), "", *memory_table(), FOOT.rstrip("\n")]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(page(), end="")
