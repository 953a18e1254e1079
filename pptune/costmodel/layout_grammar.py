"""Megatron-LM's pipeline layout strings (``--pipeline-model-parallel-layout``):
a reader and a writer.

The grammar, as megatron-core 0.16's ``PipelineParallelLayerLayout``
(megatron/core/transformer/pipeline_parallel_layer_layout.py) reads it:

- ``E`` the embedding, ``t`` a transformer (decoder) layer, ``m`` a
  multi-token-prediction layer, ``L`` the loss (output head);
- ``|`` ends a stage; stages are listed in virtual-stage order, so stage
  ``i`` runs on pipeline rank ``i % pp`` as its virtual stage ``i // pp``;
  a stage may be empty (``||``);
- ``x*N`` repeats the symbol before it N times (``t*3`` = ``ttt``,
  ``|*2`` = ``||``); ``(...)*N`` repeats a group (``(tt|)*2`` = ``tt|tt|``);
- commas are cosmetic and dropped first, wherever they stand.

megatron-core expands the string with two regular expressions, groups
first, then single symbols, over the text. pptune reads the same language
with a parser that knows where each symbol came from, and refuses what
megatron-core refuses or reads with a surprising meaning: a count of 0
(megatron-core silently drops what it counts), a second count
(``(tt)*2*3`` is six layers there, not twelve), a count or ``*`` that only
means something once a group is pasted out (``m*2(0)*2`` is 200 MTP layers
there), nested or unclosed parentheses, a group without a count, more than
100,000 symbols, a digit other than ASCII 0-9 (megatron-core's ``\\d`` reads a
fullwidth one; every number pptune reads is ASCII). On every string pptune
accepts, the stages agree with megatron-core's (tests compare both on generated
strings). Every refusal is one line naming the column.

Then megatron-core's ``validate_layer_layout`` rules: the stage count is a
multiple of pp (pp x vp when vp is given); the first layer is ``E`` and the
last ``L``, each exactly once; as many ``t`` as the model's layers and ``m``
as its MTP layers; no ``t`` after an ``m``; every ``m`` in one stage, the last
virtual stage of its rank.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

KNOB = "--pipeline-model-parallel-layout"
MAX_CHARS = 10_000  # a layout string longer than this is not a layout
MAX_SYMBOLS = 100_000  # layers and stage ends after expansion (DeepSeek-V3: 96)
_EXCERPT = 60


class LayerKind(str, Enum):
    EMBEDDING = "E"
    DECODER = "t"
    MTP = "m"
    LOSS = "L"


Stage = tuple[LayerKind, ...]
_SEP = "|"
_DIGITS = "0123456789"
_SYMBOLS = {k.value for k in LayerKind} | {_SEP}


class LayoutError(ValueError):
    """A layout string megatron-core would refuse (or misread); ``column`` is 1-based.
    ``megatron_reads``: megatron-core reads it as meant, pptune does not (a count in
    fullwidth digits)."""

    def __init__(self, text: str, column: int, problem: str,
                 megatron_reads: bool = False) -> None:
        self.text, self.column, self.problem = text, column, problem
        self.megatron_reads = megatron_reads
        super().__init__(f"{KNOB} {_excerpt(text, column)} at column {column}: {problem}")


def _excerpt(text: str, column: int) -> str:
    if len(text) <= _EXCERPT:
        return repr(text)
    start = max(0, min(column - 1 - _EXCERPT // 2, len(text) - _EXCERPT))
    head = "..." if start else ""
    tail = "..." if start + _EXCERPT < len(text) else ""
    return repr(head + text[start:start + _EXCERPT] + tail)


@dataclass(frozen=True)
class Layout:
    """Stages in virtual-stage order (the string's), each a tuple of layer kinds."""

    pp: int
    stages: tuple[Stage, ...]

    @property
    def vp(self) -> int:
        return len(self.stages) // self.pp

    def stage(self, pp_rank: int, vp_stage: int) -> Stage:
        return self.stages[vp_stage * self.pp + pp_rank]

    def by_rank(self) -> tuple[tuple[Stage, ...], ...]:
        """``[pp_rank][vp_stage]``, megatron-core's ``layout`` attribute."""
        return tuple(tuple(self.stage(r, v) for v in range(self.vp)) for r in range(self.pp))

    def count(self, kind: LayerKind) -> int:
        return sum(stage.count(kind) for stage in self.stages)

    def layers_per_stage(self, kind: LayerKind = LayerKind.DECODER) -> list[int]:
        """How many layers of ``kind`` each stage holds, in virtual-stage order."""
        return [stage.count(kind) for stage in self.stages]


# --- reading ---------------------------------------------------------------------

Placed = tuple[str, int]  # a symbol and the column it was written at
_UNKNOWN = ("the layout uses E (embedding), t (transformer layer), m (MTP layer), L (loss), "
            "| (stage end), *N, ( ) and commas")


def is_layout(text: str | None) -> bool:
    """Whether a flag's value is written as a layout (holds E, t, m, L or ``|``), not as
    numbers of layers ("5,4x14,3": simulate --split takes both)."""
    return text is not None and any(ch in _SYMBOLS for ch in text)


def expand(text: str) -> list[list[Placed]]:
    """The stages of ``text``, each symbol with its source column (1-based);
    raises LayoutError on anything megatron-core would not read as written."""
    if len(text) > MAX_CHARS:
        raise LayoutError(text[:MAX_CHARS], MAX_CHARS,
                          f"a layout of {len(text)} characters; pptune reads up to {MAX_CHARS}")
    stages: list[list[Placed]] = [[]]
    for ch, col in _symbols(text):
        if ch == _SEP:
            stages.append([])
        else:
            stages[-1].append((ch, col))
    return stages


def _symbols(text: str) -> list[Placed]:
    toks = [(ch, col) for col, ch in enumerate(text, 1) if ch != ","]  # commas: cosmetic
    return _sequence(text, toks, top=True)


def _sequence(text: str, toks: list[Placed], top: bool) -> list[Placed]:
    """Symbols and counted groups (groups at the top level only), expanded."""
    out: list[Placed] = []
    i = 0
    while i < len(toks):
        ch, col = toks[i]
        if ch in _SYMBOLS:
            items = [(ch, col)]
            n, i = _count(text, toks, i + 1) if _starred(toks, i + 1) else (1, i + 1)
        elif ch == "(":
            close = _closing(text, toks, i)
            items = _sequence(text, toks[i + 1:close], top=False)
            if not _starred(toks, close + 1):
                raise LayoutError(text, col, "a group needs a count after its ')': write "
                                  "(...)*N (megatron-core expands only counted groups)")
            n, i = _count(text, toks, close + 1)
        elif ch == ")":
            raise LayoutError(text, col, "unbalanced parenthesis: this ')' closes nothing")
        elif ch == "*":
            raise LayoutError(text, col, "'*' repeats nothing: put it after a symbol or a ')'")
        elif ch in _DIGITS:
            raise LayoutError(text, col, f"digit {ch!r} outside a count: counts follow '*'")
        elif ch.isdigit():
            raise _foreign_digit(text, ch, col, in_count=False)
        else:
            raise LayoutError(text, col, f"unknown symbol {ch!r}; {_UNKNOWN}")
        if len(out) + len(items) * n > MAX_SYMBOLS:
            raise LayoutError(text, col, f"expands past {MAX_SYMBOLS} layers and stage ends")
        out.extend(items * n)
    return out


def _starred(toks: list[Placed], j: int) -> bool:
    return j < len(toks) and toks[j][0] == "*"


def _foreign_digit(text: str, ch: str, col: int, in_count: bool) -> LayoutError:
    # megatron-core's \d reads a decimal digit of any script in a count; pptune's numbers
    # are ASCII everywhere (options.kinds.NOT_ASCII)
    return LayoutError(text, col, f"non-ASCII digit {ch!r} (U+{ord(ch):04X}): write counts "
                       "with ASCII digits 0-9, as every number pptune reads",
                       megatron_reads=in_count and ch.isdecimal())


def _count(text: str, toks: list[Placed], j: int) -> tuple[int, int]:
    """The count after the '*' at toks[j], and the index after its digits."""
    star_col = toks[j][1]
    k = j + 1
    while k < len(toks) and toks[k][0] in _DIGITS:
        k += 1
    if k < len(toks) and toks[k][0].isdigit():
        raise _foreign_digit(text, *toks[k], in_count=True)
    digits = "".join(ch for ch, _ in toks[j + 1:k])
    if not digits:
        raise LayoutError(text, star_col, "'*' needs a count after it, e.g. t*3")
    if len(digits) > 6 or int(digits) > MAX_SYMBOLS:
        count = digits if len(digits) <= _EXCERPT else f"of {len(digits):,} digits"
        raise LayoutError(text, star_col, f"count {count} is too large "
                          f"(pptune expands up to {MAX_SYMBOLS} symbols)")
    if int(digits) == 0:
        raise LayoutError(text, star_col, "a count of 0 repeats nothing (megatron-core "
                          "silently drops what it counts): remove it or count from 1")
    if _starred(toks, k):
        raise LayoutError(text, toks[k][1], "a second count: write one (megatron-core "
                          "would multiply only the symbol before the last '*')")
    return int(digits), k


def _closing(text: str, toks: list[Placed], i: int) -> int:
    """Index of the ')' closing the '(' at toks[i]."""
    for j in range(i + 1, len(toks)):
        if toks[j][0] == ")":
            if j == i + 1:
                raise LayoutError(text, toks[i][1], "empty parentheses: a group holds at "
                                  "least one symbol")
            return j
        if toks[j][0] == "(":
            raise LayoutError(text, toks[j][1], "nested parentheses: megatron-core expands "
                              "one level of (...)*N only")
    raise LayoutError(text, toks[i][1], "unbalanced parenthesis: this '(' is never closed")


def parse_layout(text: str, pp: int, vp: int | None = None, num_layers: int | None = None,
                 mtp_layers: int | None = None) -> Layout:
    """``text`` read as megatron-core reads it for ``pp`` pipeline ranks (and
    ``vp`` virtual stages each, when given), checked by megatron-core's
    rules; ``num_layers`` / ``mtp_layers``, when given, are the model's
    transformer and MTP layer counts the layout must place."""
    if pp < 1 or (vp is not None and vp < 1):
        raise ValueError(f"pp and vp must be >= 1 (got pp={pp}, vp={vp})")
    placed = expand(text)
    end = len(text) + 1
    want = pp * vp if vp is not None else None
    if (want is not None and len(placed) != want) or len(placed) % pp:
        expected = (f"pp x vp = {pp} x {vp} = {want}" if want is not None
                    else f"a multiple of pp = {pp}")
        column = end
        if want is not None and len(placed) > want:  # at the stage end that one too many
            column = [col for ch, col in _symbols(text) if ch == _SEP][want - 1]
        raise LayoutError(text, column, f"{len(placed)} stages where {expected} are needed "
                          "(one '|' between stages)")
    flat = [(LayerKind(ch), col) for stage in placed for ch, col in stage]
    if not flat or flat[0][0] is not LayerKind.EMBEDDING:
        raise LayoutError(text, flat[0][1] if flat else 1,
                          "the first layer must be the embedding E")
    if flat[-1][0] is not LayerKind.LOSS:
        raise LayoutError(text, flat[-1][1], "the last layer must be the loss L")
    embeddings = [col for k, col in flat if k is LayerKind.EMBEDDING]
    if len(embeddings) > 1:
        raise LayoutError(text, embeddings[1], "a second embedding E: it appears once, first")
    losses = [col for k, col in flat if k is LayerKind.LOSS]
    if len(losses) > 1:
        raise LayoutError(text, losses[0], "a loss L before the last one: it appears once, last")
    layout = Layout(pp, tuple(tuple(LayerKind(ch) for ch, _ in stage) for stage in placed))
    _check_counts(text, flat, num_layers, mtp_layers)
    _check_mtp(text, layout, placed)
    return layout


def _check_counts(text: str, flat: list[tuple[LayerKind, int]], num_layers: int | None,
                  mtp_layers: int | None) -> None:
    for kind, want, what in ((LayerKind.DECODER, num_layers, "transformer layers t"),
                             (LayerKind.MTP, mtp_layers, "MTP layers m")):
        cols = [col for k, col in flat if k is kind]
        if want is not None and len(cols) != want:
            column = cols[want] if len(cols) > want else len(text) + 1
            raise LayoutError(text, column, f"the layout places {len(cols)} {what}; the model "
                              f"has {want}")
    first_m = next((i for i, (k, _) in enumerate(flat) if k is LayerKind.MTP), None)
    if first_m is not None:
        late = [col for k, col in flat[first_m:] if k is LayerKind.DECODER]
        if late:
            raise LayoutError(text, late[0], "a transformer layer t after an MTP layer m: "
                              "decoder layers come first")


def _check_mtp(text: str, layout: Layout, placed: list[list[Placed]]) -> None:
    # megatron-core: every m in one stage, and that stage the last virtual
    # stage of its pipeline rank (so never a non-last stage of rank 0)
    with_m = [i for i, stage in enumerate(layout.stages) if LayerKind.MTP in stage]
    if not with_m:
        return
    col = next(c for ch, c in placed[with_m[-1]] if ch == LayerKind.MTP.value)
    if len(with_m) > 1:
        raise LayoutError(text, col, "MTP layers in more than one stage: they share one stage")
    if with_m[0] // layout.pp != layout.vp - 1:
        raise LayoutError(text, col, "MTP layers outside the last virtual stage of their "
                          "pipeline rank (megatron-core places them there only)")


# --- writing ---------------------------------------------------------------------


def stages_from_counts(decoders: Sequence[int], mtp_layers: int = 0) -> tuple[Stage, ...]:
    """Stages holding ``decoders[i]`` transformer layers each, the embedding
    first on stage 0, the MTP layers and the loss last on the last stage."""
    if not decoders or any(n < 0 for n in decoders) or mtp_layers < 0:
        raise ValueError(f"layer counts must be >= 0, at least one stage (got {list(decoders)}, "
                         f"mtp {mtp_layers})")
    stages = [[LayerKind.DECODER] * n for n in decoders]
    stages[0].insert(0, LayerKind.EMBEDDING)
    stages[-1] += [LayerKind.MTP] * mtp_layers + [LayerKind.LOSS]
    return tuple(tuple(s) for s in stages)


def write_layout(stages: Sequence[Sequence[LayerKind]]) -> str:
    """The shortest string (runs of symbols as x*N, runs of equal stages as
    (S|)*N, whichever is shorter; the literal on a tie) that ``expand`` and
    megatron-core read back as ``stages``."""
    if not stages:
        raise ValueError("a layout has at least one stage")
    texts = [_stage_text(s) for s in stages]
    n = len(texts)
    # best[i]: shortest text for stages i.. (the last stage written plainly);
    # runs of empty stages are left to the stage-end pass below
    best = [""] * (n + 1)
    best[n - 1] = texts[n - 1]
    for i in range(n - 2, -1, -1):
        options = [texts[i] + _SEP + best[i + 1]]
        run = 1
        while texts[i] and i + run < n - 1 and texts[i + run] == texts[i]:
            run += 1
        for r in range(2, run + 1):
            options.append(f"({texts[i]}{_SEP})*{r}" + best[i + r])
        best[i] = min(options, key=len)  # min keeps the first (the literal) on a tie
    # consecutive stage ends (empty stages), counted or not, as one |*N when shorter
    return re.sub(r"(?:\|(?:\*\d+)?){2,}", _stage_ends, best[0])


def _stage_ends(run: re.Match[str]) -> str:
    k = sum(int(c) if c else 1 for c in re.findall(r"\|(?:\*(\d+))?", run.group(0)))
    return _SEP * k if k <= 3 else f"{_SEP}*{k}"


def _stage_text(stage: Sequence[LayerKind]) -> str:
    out, i = [], 0
    while i < len(stage):
        j = i
        while j < len(stage) and stage[j] is stage[i]:
            j += 1
        literal, counted = stage[i].value * (j - i), f"{stage[i].value}*{j - i}"
        out.append(counted if len(counted) < len(literal) else literal)
        i = j
    return "".join(out)
