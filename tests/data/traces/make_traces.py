"""Write the trace fixtures in this folder: ``python tests/data/traces/make_traces.py``.

Small traces shaped like torch 2.x ``export_chrome_trace`` output, with busy
times chosen so the expected shares are exact (times below in microseconds
from the first event; the files hold Kineto-style absolute ``ts``).

gpu_rank0.json / gpu_rank1.json: 2-rank pipeline on NCCL, one file per rank
(``distributedInfo.rank``), window [0, 2000] us, ProfilerStep#1 [0, 1000] and
#2 [1000, 2000] on both ranks. Rank 1's ``baseTimeNanoseconds`` is 1 s later,
so its raw ``ts`` are 1e6 smaller for the same instant. Per step:

- rank 0: compute kernels on streams 7 and 13 [100, 400] + [300, 500]
  (union 400), ``ncclDevKernel_SendRecv`` [500, 600], compute [700, 950]
  -> busy 650, comm 100; a memcpy [960, 990] counts as neither.
- rank 1: ``ncclDevKernel_SendRecv`` waiting [50, 600], compute [600, 800]
  -> busy 200, comm 550.

Whole window: rank 0 busy 1300 / 2000 = 0.65, rank 1 400 / 2000 = 0.2.
The profiler's own span (``cat`` ``Trace``) runs [-400, 2600] and must not
widen the window.

cpu_merged.json: one merged file, no ``distributedInfo``, two CPU processes
(pids 5001 -> rank 0, 5002 -> rank 1) on gloo, window [0, 1000]:

- rank 0: ``Forward 0`` annotation [0, 1000] (a marker, not compute);
  ``aten::linear`` [0, 300] holding nested ``aten::addmm``; ``c10d::send``
  [300, 350] holding ``record_param_comms``; on the autograd thread
  ``autograd::engine::evaluate_function: AddmmBackward0`` [250, 700] -> busy
  union [0, 300] + [250, 700] = 700; comm: c10d::send [300, 350] and
  ``gloo:send`` annotation on a gloo thread [310, 360] -> 60.
- rank 1: ``c10d::recv_`` [100, 600] (waiting, comm), ``aten::linear``
  [600, 900] -> busy 300, comm 500.

bare_list.json: a bare list of events, one CPU process, ops [0, 100] and
[100, 250] -> busy 250 / 250 = 1.0.
"""

from __future__ import annotations

import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
BASE_NS = 1_790_857_026_000_000_000
T0_US = 5_092_807_120_000.0  # rank 0's first event, as Kineto writes it


def meta(pid: int, name: str, labels: str | None = None) -> list[dict]:
    out = [
        {"ph": "M", "name": "process_name", "ts": T0_US, "pid": pid, "tid": 0,
         "args": {"name": name}},
    ]
    if labels:
        out.append({"ph": "M", "name": "process_labels", "ts": T0_US, "pid": pid, "tid": 0,
                    "args": {"labels": labels}})
    return out


def x(name: str, cat: str, start: float, end: float, pid: object, tid: object,
      shift: float = 0.0, **args: object) -> dict:
    e = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid,
         "ts": round(T0_US + start - shift, 3), "dur": round(end - start, 3)}
    if args:
        e["args"] = args
    return e


def gpu_rank(rank: int) -> dict:
    shift = 1e6 * rank  # this rank's clock base is `rank` seconds later
    os_pid = 41001 + rank
    dev = rank  # torch gives a GPU's events its device index as pid
    ev: list[dict] = [*meta(os_pid, "python"), *meta(dev, "python", f"GPU {dev}")]
    corr = 100
    for step in (1, 2):
        o = 1000.0 * (step - 1)
        ev.append(x(f"ProfilerStep#{step}", "user_annotation", o, o + 1000, os_pid, os_pid,
                    shift, **{"External id": step}))
        ev.append(x(f"ProfilerStep#{step}", "gpu_user_annotation", o + 5, o + 995, dev, 7,
                    shift))
        if rank == 0:
            kernels = [
                ("ampere_sgemm_128x64_tn", 7, 100, 400),
                ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>",
                 13, 300, 500),
                ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", 20, 500, 600),
                ("ampere_sgemm_64x64_nn", 7, 700, 950),
            ]
            ev.append(x("Memcpy DtoH (Device -> Pinned)", "gpu_memcpy", o + 960, o + 990, dev, 7,
                        shift, device=dev, stream=7, bytes=4096))
        else:
            kernels = [
                ("ncclDevKernel_SendRecv(ncclDevKernelArgsStorage<4096ul>)", 20, 50, 600),
                ("ampere_sgemm_128x64_tn", 7, 600, 800),
            ]
        for name, stream, a, b in kernels:
            corr += 1
            # the CPU launches each kernel a little before it runs
            ev.append(x("cudaLaunchKernel", "cuda_runtime", o + a - 8, o + a - 2, os_pid, os_pid,
                        shift, correlation=corr))
            ev.append(x(name, "kernel", o + a, o + b, dev, stream, shift,
                        device=dev, stream=stream, correlation=corr,
                        **{"registers per thread": 128, "grid": [64, 1, 1],
                           "block": [256, 1, 1]}))
        ev.append(x("aten::mm", "cpu_op", o + 80, o + 95, os_pid, os_pid, shift))
        ev.append(x("nccl:send" if rank == 0 else "nccl:recv", "user_annotation",
                    o + 480, o + 490, os_pid, os_pid, shift))
    ev.append({"ph": "i", "cat": "Trace", "name": "Iteration Start: PyTorch Profiler",
               "s": "g", "pid": "Traces", "tid": "PyTorch Profiler", "ts": T0_US - shift})
    ev.append(x("PyTorch Profiler (0)", "Trace", -400, 2600, "Spans", "PyTorch Profiler", shift,
                **{"Op count": 0}))
    return {
        "schemaVersion": 1,
        "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "totalGlobalMem":
                              85_029_158_912, "computeMajor": 9, "computeMinor": 0}],
        "distributedInfo": {"backend": "nccl", "rank": rank, "world_size": 2, "pg_count": 1},
        "baseTimeNanoseconds": BASE_NS + 1_000_000_000 * rank,
        "traceEvents": ev,
        "traceName": f"gpu_rank{rank}.json",
    }


def cpu_merged() -> dict:
    ev: list[dict] = [*meta(5001, "python rank 0"), *meta(5002, "python rank 1")]
    p0, p1 = 5001, 5002
    ev += [
        x("Forward 0", "user_annotation", 0, 1000, p0, p0),
        x("aten::linear", "cpu_op", 0, 300, p0, p0),
        x("aten::addmm", "cpu_op", 20, 290, p0, p0),
        x("c10d::send", "cpu_op", 300, 350, p0, p0),
        x("record_param_comms", "cpu_op", 305, 345, p0, p0),
        x("autograd::engine::evaluate_function: AddmmBackward0", "cpu_op", 250, 700, p0, p0 + 1),
        x("AddmmBackward0", "cpu_op", 260, 690, p0, p0 + 1),
        x("gloo:send", "user_annotation", 310, 360, p0, p0 + 2),
        x("Forward 0", "user_annotation", 50, 1000, p1, p1),
        x("c10d::recv_", "cpu_op", 100, 600, p1, p1),
        x("aten::linear", "cpu_op", 600, 900, p1, p1),
        x("aten::t", "cpu_op", 605, 620, p1, p1),
    ]
    ev.append({"ph": "s", "id": 1, "pid": p0, "tid": p0, "ts": T0_US + 20, "cat": "fwdbwd",
               "name": "fwdbwd"})
    return {"schemaVersion": 1, "traceEvents": ev, "displayTimeUnit": "ms"}


def bare_list() -> list:
    return [
        *meta(7001, "python"),
        x("aten::linear", "cpu_op", 0, 100, 7001, 7001),
        x("aten::relu", "cpu_op", 100, 250, 7001, 7001),
    ]


def dump(name: str, obj: object) -> None:
    """One event per line: small, diffable, still valid JSON."""
    if isinstance(obj, dict):
        head = {k: v for k, v in obj.items() if k != "traceEvents"}
        lines = ",\n".join(json.dumps(e) for e in obj["traceEvents"])
        body = json.dumps(head)[:-1] + ',\n"traceEvents": [\n' + lines + "\n]}\n"
    else:
        body = "[\n" + ",\n".join(json.dumps(e) for e in obj) + "\n]\n"
    json.loads(body)
    (HERE / name).write_text(body, encoding="utf-8")


if __name__ == "__main__":
    dump("gpu_rank0.json", gpu_rank(0))
    dump("gpu_rank1.json", gpu_rank(1))
    dump("cpu_merged.json", cpu_merged())
    dump("bare_list.json", bare_list())
