"""The ranked-plans table of ``recommend``, at any width without cutting a number.

rich shrinks columns that do not fit and cuts their text. Here no cell is
ever cut: the table is measured at its natural width; when that is wider
than the console, the layers-per-stage text wraps at its commas, then whole
low-priority columns are dropped (named once in the footnote), and when even
the essential columns do not fit the plans are printed stacked, one block
of ``name value`` items per plan, wrapped between items.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from pptune.costmodel.keys import Precision
from pptune.costmodel.search import DP_INNER, Plan, SearchResult
from pptune.report.fit import natural_width, wrap_commas, wrap_items
from pptune.report.fmt import compact_split, fmt_bytes, fmt_pct, fmt_seconds

TITLE = "pptune recommend: ranked pipeline plans"
# columns dropped first when the console is too narrow (lowest first); the
# others (#, pp×dp×tp, schedule, v, mbs, m, layers/stage, bubble, step, mem/GPU) stay:
# a table without room for them is printed stacked
DROP_ORDER = ("free", "tok/s", "rank order", "MFU", "eff", "GPU-h", "days")
LAYER_WRAPS = (24, 16, 12)  # widths tried for the layers/stage text before dropping
NARROW_LAYERS_WRAP = 8  # with the narrow cells, last before a column is dropped
RECOMPUTE_SHORT = {"none": "none", "selective": "sel", "full": "full", "modules": "mod"}


def recompute_short(plan: Plan) -> str:
    """The recomputation column: "stage" when full recomputation is per stage."""
    return "stage" if plan.recompute_layers is not None else RECOMPUTE_SHORT[plan.recompute.value]


@dataclass(frozen=True)
class Column:
    name: str
    right: bool
    cells: list[str]


def fmt_rate(tokens_per_s: float) -> str:
    for factor, unit in ((1e6, "M"), (1e3, "k")):
        if tokens_per_s >= factor:
            return f"{tokens_per_s / factor:.1f}{unit}"
    return f"{tokens_per_s:.0f}"


def training_cost(plan: Plan, tokens_per_step: float, train_tokens: float) -> tuple[float, float]:
    """(days, GPU-hours) to train on ``train_tokens`` at this plan's step time."""
    seconds = train_tokens / tokens_per_step * plan.step_time_s
    return seconds / 86400, seconds * plan.world / 3600


Peaks = float | Mapping[Precision, float] | None


def mfu(plan: Plan, model_flops_per_step: float | None, peak_flops: Peaks) -> float | None:
    """Model FLOPs utilisation: model FLOPs per step / (step x GPUs x peak FLOP/s), the
    peak of the plan's GEMM precision (as NVIDIA reports FP8 runs) where ``peak_flops``
    maps precisions to peaks."""
    peak = peak_flops.get(plan.precision) if isinstance(peak_flops, Mapping) else peak_flops
    if not model_flops_per_step or not peak or plan.step_time_s <= 0:
        return None
    return model_flops_per_step / (plan.step_time_s * plan.world * peak)


def _columns(result: SearchResult, tokens_per_step: float, train_tokens: float | None,
             flops: float | None, peak: Peaks) -> list[Column]:
    plans = result.plans
    cols = [Column("#", True, [str(i) for i in range(1, len(plans) + 1)])]
    if any(p.cp > 1 for p in plans):
        cols.append(Column("pp×dp×tp×cp", False,
                           [f"{p.pp}×{p.dp}×{p.tp}×{p.cp}" for p in plans]))
    else:
        cols.append(Column("pp×dp×tp", False, [f"{p.pp}×{p.dp}×{p.tp}" for p in plans]))
    if any(p.ep > 1 or p.etp > 1 for p in plans):
        cols.append(Column("ep", True, [f"{p.ep}" + (f"/{p.etp}" if p.etp > 1 else "")
                                        for p in plans]))
    if any(p.precision.value != "bf16" for p in plans):
        cols.append(Column("prec", False, [p.precision.value for p in plans]))
    if any(p.rank_order != DP_INNER for p in plans):
        cols.append(Column("rank order", False, [p.rank_order.value for p in plans]))
    cols += [
        Column("schedule", False, [p.schedule.value + ("+a2a" if p.a2a_overlap else "")
                                   for p in plans]),
        Column("v", True, [str(p.virtual_stages) for p in plans]),
        Column("shard/rc", False, [f"{p.sharding.value}/{recompute_short(p)}" for p in plans]),
        Column("mbs", True, [str(p.micro_batch_size) for p in plans]),
        Column("m", True, [f"{p.num_microbatches}" + ("" if p.aligned else "*") for p in plans]),
        Column("layers/stage", False, [compact_split(p.stage_layers) for p in plans]),
        Column("bubble", True, [fmt_pct(p.bubble_rate) for p in plans]),
        Column("step", True, [fmt_seconds(p.step_time_s) for p in plans]),
        Column("tok/s", True, [fmt_rate(p.tokens_per_s) for p in plans]),
        Column("mem/GPU", True, [fmt_bytes(max(p.peak_memory_bytes)) for p in plans]),
        Column("free", True, [fmt_bytes(p.headroom_bytes) for p in plans]),
        Column("eff", True, [fmt_pct(p.efficiency) for p in plans]),
    ]
    mfus = [mfu(p, flops, peak) for p in plans]
    if any(x is not None for x in mfus):
        cols.append(Column("MFU", True, ["-" if x is None else fmt_pct(x) for x in mfus]))
    if train_tokens:
        costs = [training_cost(p, tokens_per_step, train_tokens) for p in plans]
        cols.append(Column("days", True, [f"{d:.1f}" for d, _ in costs]))
        cols.append(Column("GPU-h", True, [f"{h:,.0f}" for _, h in costs]))
    return cols


def _shows_recompute(cols: list[Column], short: str) -> bool:
    """Whether a plan of the table recomputes as ``short`` (``stage``, ``mod``)."""
    return any(v.endswith("/" + short) for c in cols if c.name == "shard/rc" for v in c.cells)


def _footnote(cols: list[Column], dropped: list[str], width: int | None) -> str:
    names = {c.name for c in cols}
    schedules = " ".join(c for col in cols if col.name == "schedule" for c in col.cells)
    chunks = ("interleaved, zbv and dualpipev: of each chunk; dualpipe: of each of its pp "
              "chunks, each run by two GPUs" if "dualpipe" in schedules
              else "interleaved and zbv: of each chunk")
    parts = []
    if "pp×dp×tp×cp" in names:
        parts.append("pp×dp×tp×cp = pipeline x data x tensor x context-parallel sizes")
    if "ep" in names:
        parts.append("ep = expert-parallel size (/N: expert tensor-parallel N)")
    if "prec" in names:
        parts.append("prec = GEMM precision")
    parts += [
        "v = virtual stages (model chunks per GPU); mbs = micro-batch size (sequences)",
        "m = micro-batches = gradient-accumulation steps (* not a multiple of pp)",
        "layers/stage = layers of each stage in pipeline order, embedding and head included "
        f"({chunks}); 5x4 = four stages of 5 layers",
    ]
    if "+a2a" in schedules:
        parts.append("+a2a = the expert all-to-all hidden behind another micro-batch's compute "
                     "(the DualPipes' F&B pairs; Megatron-LM --overlap-moe-expert-parallel-comm)")
    if "shard/rc" in names:
        parts.append("shard/rc = training-state sharding over dp / activation recomputation "
                     "(sel = selective: every N-th block recomputed whole, torchtitan's" + ("; stage = full where memory binds, blocks per stage "
                                           "in --json" if _shows_recompute(cols, "stage") else "")
                     + ("; mod = Megatron-LM's recomputed modules, named in --json"
                        if _shows_recompute(cols, "mod") else "") + ")")
    if "eff" in names:
        parts.append("eff = ideal step (busy time / GPUs) / step")
    if "MFU" in names:
        parts.append("MFU = model FLOPs per step / (step x GPUs x peak FLOP/s of the plan's "
                     "precision), model FLOPs = "
                     "6 x active parameters (embedding table excluded) + 3 x layers x heads "
                     "x (q/k + v head widths) x sequence (causal attention; 6 x layers x "
                     "hidden x sequence for plain heads) per token (Kaplan et al. 2020; PaLM, "
                     "Chowdhery et al. 2022, app. B); a prediction: published runs have mostly "
                     "measured below it (docs/accuracy.md)")
    if "rank order" in names:
        parts.append("rank order tp-dp-pp = Megatron-LM's default, tp-pp-dp = a pipeline's "
                     "stages on neighbouring ranks (--use-tp-pp-dp-mapping)")
    if dropped:
        parts.append(f"not shown at {width} columns: {', '.join(dropped)} (widen the terminal "
                     "or use --json)")
    return "; ".join(parts)


def _narrow(name: str, cell: str) -> str:
    """A cell of a narrow table: long names break after '-' or '/'."""
    if name == "schedule" and len(cell) > 8 and "-" in cell:
        head, tail = cell.split("-", 1)
        return f"{head}-\n{tail}"
    if name == "shard/rc":
        return cell.replace("/", "/\n", 1)
    return cell


def _table(cols: list[Column], caption: str | None, layers_wrap: int | None,
           narrow: bool = False) -> Table:
    """``narrow``: schedule and shard/rc break inside their cells, layers/stage's header
    takes two lines, so memory keeps its column on an 80-column terminal."""
    table = Table(title=TITLE, title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False,
                  padding=(0, 0), caption=caption, caption_justify="left")
    for col in cols:
        header = "layers/\nstage" if narrow and col.name == "layers/stage" else col.name
        table.add_column(header, justify="right" if col.right else "left", no_wrap=True)
    for i in range(len(cols[0].cells)):
        table.add_row(*(
            wrap_commas(c.cells[i], layers_wrap)
            if c.name == "layers/stage" and layers_wrap
            else _narrow(c.name, c.cells[i]) if narrow else c.cells[i] for c in cols
        ))
    return table


def plans_table(
    result: SearchResult, tokens_per_step: float = 0.0, train_tokens: float | None = None,
    width: int | None = None, model_flops_per_step: float | None = None,
    peak_flops: Peaks = None,
) -> RenderableType:
    """Ranked plans that fit in ``width`` columns (None: any width) without a cut number."""
    cols = _columns(result, tokens_per_step, train_tokens, model_flops_per_step, peak_flops)
    dropped: list[str] = []
    while True:
        for wrap, narrow in ((None, False), *((w, False) for w in LAYER_WRAPS),
                             (NARROW_LAYERS_WRAP, True)):
            if width is None or natural_width(_table(cols, None, wrap, narrow)) <= width:
                return _table(cols, _footnote(cols, dropped, width), wrap, narrow)
        droppable = [n for n in DROP_ORDER if any(c.name == n for c in cols)]
        if not droppable:
            break
        dropped.append(droppable[0])
        cols = [c for c in cols if c.name != droppable[0]]
    full = _columns(result, tokens_per_step, train_tokens, model_flops_per_step, peak_flops)
    return stacked(full, width or 0)


def stacked(cols: list[Column], width: int) -> RenderableType:
    """One block per plan, ``name value`` items wrapped between items: for narrow consoles."""
    lines = [TITLE, ""]
    for i in range(len(cols[0].cells)):
        items = [f"{c.name} {c.cells[i]}" for c in cols[1:]]
        lines += wrap_items(f"plan {cols[0].cells[i]}:", items, width)
    lines += ["", *wrap_items("", _footnote(cols, [], None).split("; "), width, sep="; ")]
    return Group(*(Text(line, no_wrap=True, overflow="ignore") for line in lines))


