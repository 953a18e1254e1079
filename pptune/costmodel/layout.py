"""The parallel layout of a plan: the size of every dimension, where its ranks
sit, and which link each collective and each pipeline hop uses.

One world of ``pp x tp x cp x dp`` ranks is read two ways, as megatron-core's
``RankGenerator`` derives them (megatron/core/parallel_state.py,
``initialize_model_parallel``): dense layers group ranks by ``tp-cp-dp-pp``
(tensor fastest, ``order="tp-cp-ep-dp-pp"``, the default), expert layers by
``etp-ep-edp-pp`` over the same ranks, with ``edp = tp x cp x dp / (etp x ep)``
the expert data-parallel size. ``--use-tp-pp-dp-mapping`` puts the pipeline
before data parallelism (``tp-cp-pp-dp``, experts ``etp-ep-pp-edp``). The
JSON names of the two orders stay ``tp-dp-pp`` and ``tp-pp-dp``.

Ranks ``0 .. gpus_per_node - 1`` share a node (an NVLink domain: 8 GPUs on a
DGX/HGX, 72 on a GB200 NVL72). A group of ranks communicates inside the node
when all its members share one; across nodes its members per node set how many
NICs carry its traffic (collectives.py). Everything here is arithmetic on
integers: which ranks share a node, computed in this module and nowhere else.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TypeVar

L = TypeVar("L")


class RankOrder(str, Enum):
    """Global rank order, fastest-varying first (context and expert
    dimensions sit between tensor and data parallelism in both)."""

    DP_INNER = "tp-dp-pp"  # a stage's data-parallel replicas sit side by side
    PP_INNER = "tp-pp-dp"  # a pipeline's stages sit side by side


DP_INNER = RankOrder.DP_INNER
PP_INNER = RankOrder.PP_INNER
RANK_ORDERS = tuple(RankOrder)


class Dim(str, Enum):
    """A dimension of the layout; dense layers use TP CP DP PP, experts ETP EP EDP PP."""

    TP = "tp"
    CP = "cp"
    DP = "dp"
    PP = "pp"
    ETP = "etp"
    EP = "ep"
    EDP = "edp"


DENSE_DIMS = frozenset({Dim.TP, Dim.CP, Dim.DP, Dim.PP})
EXPERT_DIMS = frozenset({Dim.ETP, Dim.EP, Dim.EDP, Dim.PP})


@dataclass(frozen=True)
class Group:
    """How the ranks of one communication group sit on nodes (the worst group
    of its kind: all groups of a dimension are alike when sizes divide evenly)."""

    size: int
    per_node: int  # fewest members of one group on any node it uses
    nodes: int  # most nodes one group spans

    @property
    def intra(self) -> bool:
        return self.nodes == 1


class LayoutError(ValueError):
    """Dimension sizes that do not make one world of ranks."""


@dataclass(frozen=True)
class Layout:
    """Sizes of every parallel dimension, the node size and the rank order."""

    pp: int
    dp: int
    tp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int = 1
    gpus_per_node: int = 8
    order: RankOrder = DP_INNER

    def __post_init__(self) -> None:
        for name in ("pp", "dp", "tp", "cp", "ep", "etp", "gpus_per_node"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise LayoutError(f"{name} must be a positive integer (got {value!r})")
        if (self.tp * self.cp * self.dp) % (self.etp * self.ep):
            raise LayoutError(
                f"ep x etp = {self.ep} x {self.etp} must divide tp x cp x dp = "
                f"{self.tp} x {self.cp} x {self.dp} (the ranks of one pipeline stage)"
            )
        if self.order is PP_INNER and self.ep > 1 and self.ep * self.etp != self.tp * self.cp:
            # megatron-core: "Pipeline parallel groups are expected to be the same for
            # Non-Expert and Expert part" (parallel_state.initialize_model_parallel)
            raise LayoutError(
                f"with the pipeline inside data parallelism (tp-pp-dp) the expert groups "
                f"ep x etp = {self.ep * self.etp} must span tp x cp = {self.tp * self.cp} ranks "
                "so that dense and expert layers share their pipelines"
            )

    @property
    def world(self) -> int:
        return self.pp * self.tp * self.cp * self.dp

    @property
    def edp(self) -> int:
        """Expert data-parallel size: the stage's ranks over ep x etp."""
        return self.tp * self.cp * self.dp // (self.etp * self.ep)

    def size(self, dim: Dim) -> int:
        return self.edp if dim is Dim.EDP else int(getattr(self, dim.value))

    def dims(self, dim: Dim) -> tuple[Dim, ...]:
        """The rank order of the grouping ``dim`` belongs to, fastest first."""
        if dim in DENSE_DIMS:  # the pipeline's placement is the dense layers' own
            inner: tuple[Dim, ...] = (Dim.TP, Dim.CP)
            outer = (Dim.DP, Dim.PP) if self.order is DP_INNER else (Dim.PP, Dim.DP)
        else:
            inner = (Dim.ETP, Dim.EP)
            outer = (Dim.EDP, Dim.PP) if self.order is DP_INNER else (Dim.PP, Dim.EDP)
        return inner + outer

    def stride(self, dim: Dim) -> int:
        """Rank distance between neighbours along ``dim``."""
        out = 1
        for d in self.dims(dim):
            if d is dim:
                return out
            out *= self.size(d)
        raise AssertionError(dim)  # every dim is in its own order

    def group(self, *dims: Dim) -> Group:
        """The group of ranks that differ only along ``dims`` (one grouping: dense or
        expert dims, e.g. ``group(Dim.CP, Dim.DP)`` for Megatron's gradient reduction)."""
        return _layout_group(self, dims)

    def _key(self, dims: tuple[Dim, ...]) -> tuple[tuple[tuple[int, bool], ...], int]:
        if not dims:
            raise ValueError("a group needs at least one dimension")
        order = self.dims(dims[0])
        if any(d not in order for d in dims):
            raise ValueError(f"{', '.join(d.value for d in dims)} are not one grouping")
        return tuple((self.size(d), d in dims) for d in order), self.gpus_per_node

    def rank(self, stage: int, replica: int, t: int, c: int = 0) -> int:
        """Global rank of tensor rank t, context rank c, data replica and pipeline stage."""
        coords = {Dim.TP: t, Dim.CP: c, Dim.DP: replica, Dim.PP: stage}
        return sum(coords[d] * self.stride(d) for d in self.dims(Dim.TP))

    def node(self, rank: int) -> int:
        return rank // self.gpus_per_node

    def same_node(self, a: int, b: int) -> bool:
        """Every pipeline hop from stage a to stage b stays inside a node."""
        return _same_node(self, a, b)

    def link(self, intra: L, inter: L) -> Callable[[int, int], L]:
        """The point-to-point link between two pipeline ranks."""

        @functools.cache
        def between(a: int, z: int) -> L:
            return intra if self.same_node(a, z) else inter

        return between


@functools.lru_cache(maxsize=4096)
def contiguous_group(size: int, gpus_per_node: int) -> Group:
    """The worst group of ``size`` consecutive ranks on nodes of ``gpus_per_node`` (the
    tensor-parallel group: TP is innermost in every rank order), over every offset a
    group may start at."""
    return _group((((size, True), (gpus_per_node, False)), gpus_per_node))


@functools.lru_cache(maxsize=65536)  # pure; asked for every plan a search lays out
def _layout_group(lay: Layout, dims: tuple[Dim, ...]) -> Group:
    return _group(lay._key(dims))


@functools.lru_cache(maxsize=65536)
def _same_node(lay: Layout, a: int, b: int) -> bool:
    return _hop_intra(lay._key((Dim.PP,)), lay.stride(Dim.PP), a, b)


# A layout's shape for the arithmetic below: the sizes of its grouping in rank
# order, each flagged when it belongs to the group, and the node size.
_Shape = tuple[tuple[tuple[int, bool], ...], int]


@functools.lru_cache(maxsize=4096)
def _group(shape: _Shape) -> Group:
    sizes, gpn = shape
    size = math.prod(n for n, inside in sizes if inside)
    fast = _adjacent(sizes)
    if fast is not None:
        stride, n = fast
        span = stride * n
        if span <= gpn and gpn % span == 0:
            return Group(size, size, 1)
        if stride % gpn == 0:
            return Group(size, 1, size)
        if gpn % stride == 0 and span % gpn == 0:
            per = gpn // stride
            return Group(size, per, size // per)
    # irregular sizes (not dividing the node): every group is one set of offsets from
    # its first rank, and how its members fall on nodes depends only on that rank
    # modulo the node size; a dimension outside the group, stepped c times, moves it
    # by c x stride, whose residues repeat within gpn steps
    stride, offsets, bases = 1, [0], {0}
    for n, inside in sizes:
        if inside:
            offsets = [o + c * stride for c in range(n) for o in offsets]
        else:
            bases = {(b + c * stride) % gpn for b in bases for c in range(min(n, gpn))}
        stride *= n
    fewest, widest = size, 0
    for base in bases:
        on_node = Counter((base + o) // gpn for o in offsets)
        fewest = min(fewest, min(on_node.values()))
        widest = max(widest, len(on_node))
    return Group(size, fewest, widest)


def _adjacent(sizes: tuple[tuple[int, bool], ...]) -> tuple[int, int] | None:
    """(stride, size) when the group's dimensions are adjacent in the rank order."""
    flags = [inside for _, inside in sizes]
    first = flags.index(True)
    last = len(flags) - 1 - flags[::-1].index(True)
    if not all(flags[first:last + 1]):
        return None
    return (math.prod(n for n, _ in sizes[:first]),
            math.prod(n for n, _ in sizes[first:last + 1]))


@functools.lru_cache(maxsize=65536)
def _hop_intra(shape: _Shape, stride: int, a: int, b: int) -> bool:
    sizes, gpn = shape
    if a == b:
        return True
    pp = next(n for n, inside in sizes if inside)
    if stride * pp <= gpn and gpn % (stride * pp) == 0:
        return True
    if stride % gpn == 0:
        return False
    # a rank r = q * gpn + rest sits on node q + (rest + a * stride) // gpn, so
    # only the offsets' residues modulo the node size matter
    period = stride * pp
    copies = math.prod(n for n, _ in sizes) // period  # pipelines side by side
    rests = {(i + k * period) % gpn for i in range(min(stride, gpn))
             for k in range(min(copies, gpn))}
    if stride > gpn:
        rests = set(range(gpn))
    return all((r + a * stride) // gpn == (r + b * stride) // gpn for r in rests)
