"""Tables and JSON of the built-in presets (`pptune presets`)."""

from __future__ import annotations

import dataclasses
from typing import Any

from rich.table import Table

from pptune.costmodel import presets
from pptune.costmodel.analytic import model_params
from pptune.report.fmt import fmt_bytes


def _params(m: presets.ModelShape) -> float:
    return model_params(m)


def _experts(m: presets.ModelShape) -> str:
    """``128x768 top-8`` (routed experts x width, per token), ``+shared N``; dense: empty."""
    if not m.experts:
        return ""
    return (f"{m.experts}x{m.expert_ffn} top-{m.top_k}"
            + (f" +shared {m.shared_ffn}" if m.shared_ffn else ""))


def _legend() -> str:
    mtp = [f"{m.name} {model_params(dataclasses.replace(m, mtp_layers=0)) / 1e9:.2f}B without "
           f"its {m.mtp_layers} MTP block{'s' if m.mtp_layers > 1 else ''}"
           for m in presets.MODELS.values() if m.mtp_layers]
    return ("ffn = a dense block's MLP width; experts = routed experts x their FFN width, "
            "top-k = experts a token is routed to, +shared = the shared experts' FFN width"
            + (f"; params include multi-token-prediction blocks: {', '.join(mtp)}" if mtp
               else ""))


def presets_tables() -> list[Table]:
    models = Table(title="model presets (--model)", title_justify="left",
                   caption=_legend(), caption_justify="left")
    for col in ["name", "params", "blocks", "hidden", "heads", "kv", "ffn", "experts", "vocab",
                "seq", "global batch", "source"]:
        models.add_column(col, justify="left" if col in ("name", "source") else "right",
                          overflow="fold" if col == "source" else "ellipsis")
    for m in presets.MODELS.values():
        models.add_row(
            m.name, f"{_params(m) / 1e9:.2f}B", str(m.num_blocks), str(m.hidden), str(m.heads),
            str(m.kv_heads), str(m.ffn), _experts(m), str(m.vocab), str(m.seq_len), str(m.global_batch),
            m.source,
        )
    mesh = [g.name for g in presets.GPUS.values()
            if g.fabric is not None and g.fabric.mesh_link_bytes_per_s is not None]
    gpus = Table(title="GPU presets (--gpu)", title_justify="left", caption=(
        f"NVLink = the scale-up fabric: on {', '.join(mesh)} AMD's xGMI, a switchless mesh "
        "of one link a GPU pair (NVLink GB/s: all of a GPU's links)") if mesh else None,
        caption_justify="left")
    for col in ["name", "bf16 TFLOP/s", "memory", "HBM GB/s", "NVLink GB/s", "IB GB/s",
                "NVLink domain", "source"]:
        gpus.add_column(col, justify="left" if col in ("name", "source") else "right",
                        overflow="fold" if col == "source" else "ellipsis")
    for g in presets.GPUS.values():
        gpus.add_row(
            g.name, f"{g.peak_flops / 1e12:.0f}", fmt_bytes(g.memory_bytes),
            f"{g.hbm_bytes_per_s / 1e9:.0f}", f"{g.nvlink_bytes_per_s / 1e9:.0f}",
            f"{g.ib_bytes_per_s / 1e9:.0f}",
            f"{g.gpus_per_node}" + (f" ({g.gpus_per_host} a host)" if g.gpus_per_host else ""),
            g.source,
        )
    return [models, gpus]


def presets_json() -> dict[str, Any]:
    return {
        "models": [
            {**m.__dict__, "params": _params(m)} for m in presets.MODELS.values()
        ],
        "gpus": [dataclasses.asdict(g) for g in presets.GPUS.values()],
        "defaults": {"model": presets.DEFAULT_MODEL, "gpu": presets.DEFAULT_GPU,
                     "efficiency": presets.DEFAULT_EFFICIENCY,
                     "op_overhead_s": presets.GPUS[presets.DEFAULT_GPU].launch_s,
                     "compute_model": "per-op roofline: GEMM tile/wave quantization x "
                                      "measured large-GEMM fraction; HBM-bound elementwise ops; "
                                      "launch_s per kernel"},
    }
