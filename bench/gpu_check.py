"""Per-op analytic/measured ratios on one real GPU (run by bench/gpu_check.sh).

Times, with CUDA events, the ops of one Llama-like block (llama3-8b widths,
sequence 4096, micro-batch 1, bf16): every GEMM of F, B and W, flash
attention forward and backward (torch SDPA), and the elementwise ops (RMSNorm,
SwiGLU, residual add, rotary, cross-entropy), and prints each op's analytic
time (pptune.costmodel.ops, with its launch cost) over its measured time. Writes
bench/results/gpu_check.json. Refuses to run without CUDA.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pptune.costmodel import presets
from pptune.costmodel.ops import Parallel, Phase, Rates, attention_ops, gemm, memory

SEQ = 4096
WARMUP, ITERS = 5, 20


def _preset(name: str) -> presets.GpuSpec:
    low = name.lower()
    if "h200" in low:
        return presets.GPUS["h200"]
    if "h100" in low or "h800" in low:
        return presets.GPUS["h100-sxm"]
    if "a100" in low or "a800" in low:
        return presets.GPUS["a100-80gb"]
    print(f"gpu_check: {name!r} has no preset; comparing against h100-sxm", file=sys.stderr)
    return presets.GPUS["h100-sxm"]


def _time_ms(torch: Any, fn: Callable[[], Any]) -> float:
    for _ in range(WARMUP):
        fn()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(ITERS):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / ITERS


def main() -> int:
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("gpu_check: torch is not installed; nothing measured", file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("gpu_check: no CUDA device here; nothing measured (run it on a GPU machine)",
              file=sys.stderr)
        return 2
    dev = torch.device("cuda")
    name = torch.cuda.get_device_name(0)
    gpu = _preset(name)
    rates = Rates.of(gpu)
    m = presets.MODELS["llama3-8b"]
    h, f, v, heads, kvh, d = m.hidden, m.ffn, m.vocab, m.heads, m.kv_heads, m.head_dim
    kv, t = kvh * d, SEQ
    shape = presets.ModelShape("check", 1, h, heads, kvh, f, v, SEQ, 1, True, False, "check")
    bf = torch.bfloat16
    rows: list[dict[str, Any]] = []

    def record(op_name: str, op_s: float, fn: Callable[[], Any], kernels: int = 1) -> None:
        analytic_s = op_s + kernels * rates.launch_s  # as the model charges it
        measured = _time_ms(torch, fn)
        rows.append({"op": op_name, "analytic_ms": round(analytic_s * 1e3, 4),
                     "measured_ms": round(measured, 4),
                     "analytic_over_measured": round(analytic_s * 1e3 / measured, 3)})
        print(f"{op_name:22s} analytic {analytic_s * 1e3:8.3f} ms  measured {measured:8.3f} ms  "
              f"ratio {analytic_s * 1e3 / measured:6.3f}", flush=True)

    # GEMMs: forward, data gradient, weight gradient of each weight matrix
    for lname, k, n in [("qkv", h, h + 2 * kv), ("attn_out", h, h), ("mlp_up", h, 2 * f),
                        ("mlp_down", f, h), ("lm_head", h, v)]:
        x = torch.randn(t, k, device=dev, dtype=bf)
        w = torch.randn(k, n, device=dev, dtype=bf)
        dy = torch.randn(t, n, device=dev, dtype=bf)
        record(lname, gemm(lname, Phase.F, t, n, k, rates).time_s, lambda x=x, w=w: x @ w)
        record(lname + ".dgrad", gemm(lname, Phase.B, t, k, n, rates).time_s,
               lambda dy=dy, w=w: dy @ w.t())
        record(lname + ".wgrad", gemm(lname, Phase.W, k, n, t, rates).time_s,
               lambda x=x, dy=dy: x.t() @ dy)
    # flash attention (causal), forward and backward
    fa_f, fa_b = attention_ops(shape, 1, rates, Parallel())
    q = torch.randn(1, heads, t, d, device=dev, dtype=bf, requires_grad=True)
    kk = torch.randn(1, heads, t, d, device=dev, dtype=bf, requires_grad=True)
    vv = torch.randn(1, heads, t, d, device=dev, dtype=bf, requires_grad=True)
    sdpa = F.scaled_dot_product_attention
    record("flash_attn", fa_f.time_s, lambda: sdpa(q, kk, vv, is_causal=True))
    out = sdpa(q, kk, vv, is_causal=True)
    g = torch.randn_like(out)
    record("flash_attn.bwd", fa_b.time_s,
           lambda: torch.autograd.grad(out, (q, kk, vv), g, retain_graph=True), fa_b.kernels)
    # elementwise ops, bytes over the achieved HBM bandwidth
    x = torch.randn(t, h, device=dev, dtype=bf)
    y = torch.randn(t, h, device=dev, dtype=bf)
    wn = torch.ones(h, device=dev, dtype=bf)
    record("rms_norm", memory("norm", Phase.F, 4 * h * t, rates).time_s,
           lambda: F.rms_norm(x, (h,), wn))
    record("residual_add", memory("res", Phase.F, 6 * h * t, rates).time_s, lambda: x + y)
    gate = torch.randn(t, f, device=dev, dtype=bf)
    up = torch.randn(t, f, device=dev, dtype=bf)
    record("swiglu", memory("act", Phase.F, 6 * f * t, rates).time_s,
           lambda: F.silu(gate) * up)
    qk = torch.randn(t, h + kv, device=dev, dtype=bf)
    cos = torch.randn(t, h + kv, device=dev, dtype=bf)
    record("rotary (unfused)", memory("rot", Phase.F, 4 * t * (h + kv), rates).time_s,
           lambda: qk * cos + torch.roll(qk, 1, dims=-1) * cos)
    logits = torch.randn(t, v, device=dev, dtype=bf)
    labels = torch.randint(0, v, (t,), device=dev)
    record("cross_entropy", memory("ce", Phase.F, 6 * t * v, rates).time_s,
           lambda: F.cross_entropy(logits.float(), labels))
    doc = {"benchmark": "gpu_check", "device": name, "preset": gpu.name,
           "date": time.strftime("%Y-%m-%d"), "shape": f"llama3-8b widths, seq {SEQ}, b 1, bf16",
           "torch": torch.__version__, "results": rows}
    path = Path(__file__).parent / "results" / "gpu_check.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
