"""Link bandwidth: point-to-point, all-reduce and all-to-all sweeps between processes.

Measured the way NVIDIA nccl-tests measures (sendrecv_perf, all_reduce_perf, alltoall_perf):
message sizes doubling from 1 KiB to ``max_bytes``, warm-up iterations, then
timed iterations; time per operation, algorithm bandwidth ``algbw = bytes /
time`` and bus bandwidth (nccl-tests doc/PERFORMANCE.md): ``busbw = algbw *
2(n-1)/n`` for all-reduce over n ranks, ``busbw = algbw`` for send/recv,
``busbw = algbw * (n-1)/n`` for all-to-all (each rank's ``bytes`` split into n
equal blocks, one to each rank, as alltoall_perf sends them).

- p2p: the two ranks of a pair send to and receive from each other at once
  (sendrecv_perf's exchange with 2 ranks); the time is rank 0's.
- all-reduce: a sum over a group, in place.
- all-to-all (``all_to_all_single``, the expert dispatch and combine of a
  mixture of experts): over the same groups as the all-reduce; NCCL on GPUs,
  gloo on CPU (torch 2.13's gloo backend runs it). A backend that refuses it
  is skipped with a stated reason in ``not_measured``.
Each timed repeat is a barrier, then ``iters`` back-to-back operations
(enough for ~1 MiB of traffic, like nccl-tests' aggregated iterations, so the
clock resolution and the barrier skew do not dominate small messages), then a
device synchronize; the sample is the elapsed time over ``iters``. A size's
figure is the median over repeats.

Processes:
- standalone, the probe spawns one process per local device (2 on CPU,
  gloo, 1 torch thread each: 2 ranks on 2 cores, docs/measured.md) with
  ``MASTER_ADDR=127.0.0.1`` and a free port; inter-node is not measured;
- under ``torchrun`` (RANK, WORLD_SIZE, LOCAL_RANK set) it joins that job:
  ranks report their host, rank 0 pairs with a rank on its own host
  (intra-node) and one on another host (inter-node), all-reduce runs over
  the ranks of rank 0's host and over the whole job.
A rank that hangs is bounded by ``timeout_s``: the process group times out
inside the ranks, and the parent stops waiting after ``timeout_s`` without
a word from any rank (``pptune.launch.ranks``).
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pptune.errors import BadInput
from pptune.launch import ranks
from pptune.launch.deps import import_torch
from pptune.launch.stats import median, spread

MIN_BYTES = 1024
# busbw / algbw per op over n ranks (nccl-tests doc/PERFORMANCE.md)
BUS_FACTOR: dict[str, Callable[[int], float]] = {
    "p2p": lambda n: 1.0, "allreduce": lambda n: 2.0 * (n - 1) / n,
    "alltoall": lambda n: (n - 1) / n}
AGGREGATE_BYTES = 1 << 20  # iterations per timed repeat: enough to move ~1 MiB
MAX_ITERS = 20
DTYPE_BYTES = 4  # float32 buffers, as nccl-tests' default -d float


def message_sizes(max_bytes: int, min_bytes: int = MIN_BYTES) -> list[int]:
    """Sizes doubling from ``min_bytes`` up to ``max_bytes`` (nccl-tests ``-f 2``)."""
    if max_bytes < min_bytes:
        raise BadInput(f"--max-bytes {max_bytes} is below the smallest message ({min_bytes} bytes)")
    sizes = []
    size = min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= 2
    return sizes


def iters_for(size: int) -> int:
    return max(1, min(MAX_ITERS, AGGREGATE_BYTES // size))


@dataclass(frozen=True)
class Measurement:
    scope: str  # "intra_node" or "inter_node"
    op: str  # "p2p" or "allreduce"
    ranks: tuple[int, ...]


def plan_measurements(hosts: list[str]) -> tuple[list[Measurement], list[str]]:
    """What to measure given each rank's host (pure); also the reasons for what cannot be."""
    world = len(hosts)
    home = hosts[0]
    local = tuple(r for r in range(world) if hosts[r] == home)
    remote = [r for r in range(world) if hosts[r] != home]
    todo: list[Measurement] = []
    missing: list[str] = []
    if len(local) >= 2:
        todo.append(Measurement("intra_node", "p2p", (0, local[1])))
        todo.append(Measurement("intra_node", "allreduce", local))
        todo.append(Measurement("intra_node", "alltoall", local))
    else:
        missing.append("intra_node: one rank on rank 0's host, no intra-node pair to measure")
    if remote:
        todo.append(Measurement("inter_node", "p2p", (0, remote[0])))
        todo.append(Measurement("inter_node", "allreduce", tuple(range(world))))
        todo.append(Measurement("inter_node", "alltoall", tuple(range(world))))
    else:
        missing.append("inter_node: every rank on one host, no inter-node link to measure")
    return todo, missing


@dataclass
class CommPlan:
    """Everything a rank needs to run the sweeps (picklable for spawn)."""

    backend: str  # "gloo" or "nccl"
    device: str  # "cpu" or "cuda"
    sizes: list[int]
    repeats: int
    warmup: int
    timeout_s: float
    threads: int = 1


@dataclass
class Sweep:
    scope: str
    op: str
    ranks: list[int]
    rows: list[dict[str, Any]] = field(default_factory=list)


def _row(size: int, samples: list[float], bus_factor: float) -> dict[str, Any]:
    t = median(samples)
    algbw = size / t if t > 0 else 0.0
    return {
        "bytes": size,
        "time_s": t,
        "algbw_bytes_per_s": algbw,
        "busbw_bytes_per_s": algbw * bus_factor,
        "spread": spread(samples),
        "samples_s": samples,
    }


def _sweep(
    torch: Any,
    dist: Any,
    plan: CommPlan,
    m: Measurement,
    group: Any,
    rank: int,
    device: Any,
    report: Callable[[str, int], None],
) -> Sweep:
    n_elems = max(plan.sizes) // DTYPE_BYTES
    send = torch.ones(n_elems, dtype=torch.float32, device=device)
    recv = torch.zeros(n_elems, dtype=torch.float32, device=device)
    cuda = plan.device == "cuda"
    peer = m.ranks[1] if rank == m.ranks[0] else m.ranks[0]
    n = len(m.ranks)
    bus_factor = BUS_FACTOR[m.op](n)

    def once(count: int) -> None:
        if m.op == "allreduce":
            dist.all_reduce(send[:count], group=group)
            return
        if m.op == "alltoall":  # n equal blocks, one to each rank
            count -= count % n
            dist.all_to_all_single(recv[:count], send[:count], group=group)
            return
        s, r = send[:count], recv[:count]
        if plan.backend == "nccl":
            ops = [dist.P2POp(dist.isend, s, peer, group), dist.P2POp(dist.irecv, r, peer, group)]
            reqs = dist.batch_isend_irecv(ops)
        else:
            reqs = [dist.isend(s, peer, group=group), dist.irecv(r, peer, group=group)]
        for req in reqs:
            req.wait()

    result = Sweep(m.scope, m.op, list(m.ranks))
    # connection set-up and first-touch of the buffers happen here, not in the
    # first size's warm-up (the first gloo message of a pair costs milliseconds)
    for _ in range(10):
        once(plan.sizes[0] // DTYPE_BYTES)
    once(plan.sizes[-1] // DTYPE_BYTES)
    for size in plan.sizes:
        count = size // DTYPE_BYTES
        iters = iters_for(size)
        for _ in range(plan.warmup):
            once(count)
        samples = []
        for _ in range(plan.repeats):
            dist.barrier(group=group)
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter_ns()
            for _ in range(iters):
                once(count)
            if cuda:
                torch.cuda.synchronize()
            samples.append((time.perf_counter_ns() - t0) / 1e9 / iters)
        result.rows.append(_row(size, samples, bus_factor))
        report(f"{m.scope} {m.op}", size)
    return result


def rank_main(
    rank: int, world: int, local_rank: int, plan: CommPlan, report: Callable[[str, int], None]
) -> dict[str, Any] | None:
    """One rank's part, the process group already initialised; rank 0 returns the sweeps."""
    torch = import_torch("probe")
    dist = torch.distributed
    device: Any = "cpu"
    if plan.device == "cuda":
        device = torch.device("cuda", local_rank)
    hosts: list[Any] = [None] * world
    dist.all_gather_object(hosts, ranks.node_key())
    todo, missing = plan_measurements([str(h) for h in hosts])
    sweeps = []
    for m in todo:
        # every rank takes part in creating every group (torch.distributed rule)
        group = None if len(m.ranks) == world else dist.new_group(list(m.ranks))
        if rank in m.ranks:
            try:
                sweep = _sweep(torch, dist, plan, m, group, rank, device, report)
            except RuntimeError as exc:  # the backend does not run this collective
                if m.op != "alltoall":
                    raise
                missing.append(f"{m.scope} alltoall: the {plan.backend} backend of torch "
                               f"{torch.__version__} refused all_to_all_single "
                               f"({ranks.one_line(exc)[:120]})")
            else:
                sweeps.append(sweep)
        dist.barrier()
    if rank != 0:
        return None
    return {
        "backend": plan.backend,
        "world_size": world,
        "hosts": sorted({str(h) for h in hosts}),
        "sizes": plan.sizes,
        "repeats": plan.repeats,
        "warmup": plan.warmup,
        "threads_per_rank": plan.threads if plan.device == "cpu" else None,
        "not_measured": missing,
        "sweeps": [
            {"scope": s.scope, "op": s.op, "ranks": s.ranks, "rows": s.rows} for s in sweeps
        ],
    }


def comm_entry(rank: int, world: int, port: int, q: Any, plan: CommPlan) -> None:
    """Spawned rank: the launch layer's child skeleton around the sweeps."""

    def work(torch: Any, progress: Callable[[Any], None]) -> dict[str, Any] | None:
        def report(label: str, size: int) -> None:
            if rank == 0:
                progress((label, size))

        return rank_main(rank, world, rank, plan, report)

    ranks.child_main(rank, world, port, q, plan, "probe", work)


_PROBE_TEXTS = ranks.SpawnTexts(
    died=lambda r, world, code: (
        f"comm probe: rank {r} of {world} exited with code {code} without a result; rerun, "
        "or skip the bandwidth probe with --no-comm"
    ),
    silent=lambda world, started, finished, timeout_s: (
        f"comm probe: rank(s) {', '.join(map(str, sorted(set(range(world)) - finished)))} of "
        f"{world} gave no word for {timeout_s:g} s (--timeout {timeout_s:g}); a rank hangs or "
        "the sweep is slower than that: raise --timeout, lower --max-bytes, or use --no-comm"
    ),
    failed=lambda rank, world, text: f"comm probe failed on rank {rank} of {world}: {text}",
)


def spawn_ranks(
    entry: Callable[..., None],
    args: tuple[Any, ...],
    world: int,
    timeout_s: float,
    on_progress: Callable[[Any], None] = lambda payload: None,
) -> Any:
    """Run ``entry(rank, world, port, queue, *args)`` in ``world`` spawned processes
    (``pptune.launch.ranks.spawn_ranks`` with the probe's messages); rank 0's result."""
    return ranks.spawn_ranks(
        entry, args, world, timeout_s, _PROBE_TEXTS, lambda _rank, payload: on_progress(payload)
    )


_JOIN_TEXTS = ranks.JoinTexts(
    no_group=lambda rank, world, text: (
        f"torchrun rank {rank}: cannot join the process group: {text}"
    ),
    failed=lambda rank, world, text: f"comm probe failed on torchrun rank {rank} of {world}: {text}",
)


def run_joined(
    plan: CommPlan, env: dict[str, int], on_progress: Callable[[Any], None]
) -> dict[str, Any] | None:
    """Join the torchrun job (env:// rendezvous); rank 0 gets the sweeps, others None."""
    torch = import_torch("probe")
    rank, world, local = env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]
    if world < 2:
        return {
            "backend": plan.backend,
            "world_size": world,
            "hosts": [socket.gethostname()],
            "not_measured": ["torchrun job of one rank: no link to measure"],
            "sweeps": [],
        }
    with ranks.joined_group(torch, plan, env, _JOIN_TEXTS):
        return rank_main(rank, world, local, plan, lambda label, size: on_progress((label, size)))
