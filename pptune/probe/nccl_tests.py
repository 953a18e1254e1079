"""Read NVIDIA nccl-tests output (all_reduce_perf, sendrecv_perf) instead of measuring.

Pure Python: no torch. The tables look like this (nccl-tests 2.13 and later)::

    #                                                   out-of-place                       in-place
    #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
         1048576        262144     float     sum      -1    203.2    5.16    9.68      0    207.2    5.06    9.49      0

Older releases print ``error`` (a float such as ``2e-07``, or ``N/A``) where
newer ones print ``#wrong`` (a count), and some have no ``root`` column; the
columns are therefore found by name from the header line, never by position.
Units as nccl-tests prints them: size in bytes, time in microseconds, algbw
and busbw in GB/s (1e9 bytes/s). Bus bandwidth follows nccl-tests'
doc/PERFORMANCE.md: all-reduce busbw = algbw * 2(n-1)/n, sendrecv busbw = algbw.

Which test produced a table is read, in this order, from the ``# Collective
test starting: NAME`` line (newer releases), from a ``NAME_perf`` mention
before the table (the command line, often pasted above the output), from the
file name, and last from the columns themselves (reduction op, root, and the
busbw / algbw ratio against the rank count). Log lines that MPI or NCCL
interleave with the table are skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from pptune.errors import BadInput
from pptune.files import read_limited
from pptune.launch.stats import median

SUPPORTED = ("all_reduce", "sendrecv")
KNOWN_TESTS = (
    "all_reduce", "all_gather", "alltoall", "broadcast", "gather", "hypercube",
    "reduce_scatter", "reduce", "scatter", "sendrecv",
)
REDUCTIONS = {"sum", "prod", "min", "max", "avg", "premulsum"}

_STARTING = re.compile(r"Collective test starting:\s*([A-Za-z_]+?)(?:_perf)?(?:_mpi)?\s*$")
_MENTION = re.compile(r"\b(" + "|".join(KNOWN_TESTS) + r")_perf")
_FILE_NAME = re.compile(r"(" + "|".join(KNOWN_TESTS) + r")")
_RANK = re.compile(
    r"^#\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?Pid\s+\d+\s+on\s+(\S+)\s+device\s+(\d+)"
    r"\s+\[[^\]]*\]\s*(.*)$"
)


@dataclass(frozen=True)
class NcclRow:
    """One message size, out-of-place figures (the in-place ones kept beside)."""

    size_bytes: int
    count: int
    dtype: str
    redop: str
    root: int | None
    time_s: float
    algbw_bytes_per_s: float
    busbw_bytes_per_s: float
    check: str  # the #wrong count or the older error value, as printed
    inplace_time_s: float | None


@dataclass
class NcclTable:
    """One result table of one nccl-tests run."""

    source: str
    test: str | None  # all_reduce, sendrecv, ... ; None when it cannot be told
    layout: str  # "#wrong" (current) or "error" (older)
    ranks: int | None  # from the "# Using devices" list, when present
    hosts: list[str] = field(default_factory=list)
    devices: list[str] = field(default_factory=list)
    rows: list[NcclRow] = field(default_factory=list)

    @property
    def scope(self) -> str:
        """intra_node unless the rank list names more than one host."""
        return "inter_node" if len(set(self.hosts)) > 1 else "intra_node"

    def bus_factor(self) -> float:
        """busbw / algbw: 2(n-1)/n for all-reduce, 1 for sendrecv (nccl-tests PERFORMANCE.md)."""
        if self.test == "sendrecv":
            return 1.0
        if self.ranks is not None and self.ranks >= 2:
            return 2.0 * (self.ranks - 1) / self.ranks
        ratio = _data_ratio(self.rows)
        return ratio if ratio is not None else 1.0

    def to_raw(self) -> dict[str, object]:
        return {
            "source": self.source,
            "test": self.test,
            "layout": self.layout,
            "ranks": self.ranks,
            "hosts": sorted(set(self.hosts)),
            "devices": sorted(set(self.devices)),
            "rows": [
                {
                    "bytes": r.size_bytes,
                    "time_s": r.time_s,
                    "algbw_bytes_per_s": r.algbw_bytes_per_s,
                    "busbw_bytes_per_s": r.busbw_bytes_per_s,
                    "check": r.check,
                }
                for r in self.rows
            ],
        }


def _data_ratio(rows: list[NcclRow]) -> float | None:
    """busbw / algbw from the rows printed with enough digits (algbw >= 1 GB/s)."""
    ratios = [r.busbw_bytes_per_s / r.algbw_bytes_per_s for r in rows if r.algbw_bytes_per_s >= 1e9]
    return median(ratios) if ratios else None


def _header_columns(line: str) -> list[str] | None:
    stripped = line.strip()
    if not stripped.startswith("#"):
        return None
    cols = stripped.lstrip("#").split()
    if len(cols) < 6 or cols[0] != "size" or "count" not in cols or cols.count("time") < 1:
        return None
    return ["check" if c in ("#wrong", "wrong", "error") else c for c in cols]


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _parse_row(cols: list[str], tokens: list[str]) -> NcclRow | None:
    if len(tokens) != len(cols) or not tokens[0].isdigit():
        return None
    first = cols.index("time")
    if cols[first + 1 : first + 3] != ["algbw", "busbw"]:
        return None
    time_us = _float(tokens[first])
    algbw = _float(tokens[first + 1])
    busbw = _float(tokens[first + 2])
    if time_us is None or algbw is None or busbw is None or time_us <= 0:
        return None
    count = tokens[cols.index("count")]
    inplace: float | None = None
    later = [i for i, c in enumerate(cols) if c == "time" and i > first]
    if later:
        inplace_us = _float(tokens[later[0]])
        inplace = inplace_us / 1e6 if inplace_us is not None else None
    root_text = tokens[cols.index("root")] if "root" in cols else None
    return NcclRow(
        size_bytes=int(tokens[0]),
        count=int(count) if count.isdigit() else 0,
        dtype=tokens[cols.index("type")] if "type" in cols else "",
        redop=tokens[cols.index("redop")] if "redop" in cols else "",
        root=int(root_text) if root_text is not None and _float(root_text) is not None else None,
        time_s=time_us / 1e6,
        algbw_bytes_per_s=algbw * 1e9,
        busbw_bytes_per_s=busbw * 1e9,
        check=tokens[first + 3] if first + 3 < len(tokens) and cols[first + 3] == "check" else "",
        inplace_time_s=inplace,
    )


def _guess_from_columns(table: NcclTable) -> str | None:
    rows = table.rows
    redops = {r.redop for r in rows}
    roots = {r.root for r in rows}
    ratio = _data_ratio(rows)
    if roots - {-1, None}:
        return None  # rooted: broadcast, reduce, gather, scatter
    if redops and redops <= REDUCTIONS:
        # all-reduce busbw >= algbw (2(n-1)/n), reduce-scatter below ((n-1)/n)
        if ratio is None:
            return None
        return "all_reduce" if ratio >= 0.99 else "reduce_scatter"
    if redops <= {"none", ""}:
        if ratio is None:
            return None
        return "sendrecv" if abs(ratio - 1.0) < 0.03 else "all_gather"
    return None


def parse_nccl_tests(text: str, source: str = "<text>") -> list[NcclTable]:
    """Every result table in ``text``; BadInput when there is none."""
    tables: list[NcclTable] = []
    hint: str | None = None
    hint_strength = 0  # 2: "Collective test starting", 1: a NAME_perf mention
    hosts: list[str] = []
    devices: list[str] = []
    ranks: set[int] = set()
    current: NcclTable | None = None
    cols: list[str] = []
    name_hint = _FILE_NAME.search(
        Path(source).name.lower().replace("-", "_").replace("allreduce", "all_reduce")
    )

    def close() -> None:
        nonlocal current
        if current is not None and current.rows:
            tables.append(current)
        current = None

    for line in text.splitlines():
        started = _STARTING.search(line)
        if started:
            close()
            hint, hint_strength = started.group(1), 2
            hosts, devices, ranks = [], [], set()
            continue
        header = _header_columns(line)
        if header is not None:
            close()
            cols = header
            test = hint
            if test is None and name_hint:
                test = name_hint.group(1)
            current = NcclTable(
                source=source,
                test=test,
                layout="#wrong" if "#wrong" in line else "error",
                ranks=len(ranks) or None,
                hosts=list(hosts),
                devices=list(devices),
            )
            hint, hint_strength = None, 0
            hosts, devices, ranks = [], [], set()
            continue
        rank = _RANK.match(line.strip())
        if rank:
            if current is not None and current.rows:
                close()
            ranks.add(int(rank.group(1)))
            hosts.append(rank.group(2))
            devices.append(rank.group(4).strip())
            continue
        if current is not None:
            row = _parse_row(cols, line.split())
            if row is not None:
                current.rows.append(row)
                continue
            if line.strip().startswith("# Out of bounds") or line.strip().startswith("# Avg bus"):
                close()
                continue
        if hint_strength < 2 and "concluded" not in line:
            mention = _MENTION.search(line)
            if mention:
                hint, hint_strength = mention.group(1), 1
    close()

    if not tables:
        raise BadInput(
            f"--nccl-tests {source}: no nccl-tests result table found (expected the "
            "'#  size  count  type  redop ...  time  algbw  busbw' header and rows that "
            "all_reduce_perf or sendrecv_perf print)"
        )
    for table in tables:
        if table.test is None:
            table.test = _guess_from_columns(table)
    return tables


def load_nccl_tests(path: Path) -> list[NcclTable]:
    """Read one output file; every problem is a one-line BadInput naming the file."""
    path = Path(path)
    if not path.exists():
        raise BadInput(f"--nccl-tests: file not found: {path}")
    # an nccl-tests log is a few KiB per run; 16 MiB holds thousands of them
    text = read_limited(path, "--nccl-tests file", 16 << 20).decode("utf-8", errors="replace")
    tables = parse_nccl_tests(text, source=str(path))
    for table in tables:
        if table.test is None:
            raise BadInput(
                f"--nccl-tests {path}: cannot tell which nccl-tests binary printed this table; "
                "keep the '# Collective test starting' line or name the file after the test "
                "(e.g. all_reduce_perf.txt, sendrecv_perf.txt)"
            )
        if table.test not in SUPPORTED:
            raise BadInput(
                f"--nccl-tests {path}: holds {table.test}_perf output; pptune reads "
                "all_reduce_perf and sendrecv_perf"
            )
        if table.test == "all_reduce" and table.ranks == 1:
            raise BadInput(
                f"--nccl-tests {path}: all_reduce_perf ran on 1 rank, which measures no link; "
                "run it on 2 or more GPUs (-g 2, or one MPI rank per GPU)"
            )
    return tables
