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


def presets_tables() -> list[Table]:
    models = Table(title="model presets (--model)", title_justify="left")
    for col in ["name", "params", "blocks", "hidden", "heads", "kv", "ffn", "vocab", "seq",
                "global batch", "source"]:
        models.add_column(col, justify="left" if col in ("name", "source") else "right",
                          overflow="fold" if col == "source" else "ellipsis")
    for m in presets.MODELS.values():
        models.add_row(
            m.name, f"{_params(m) / 1e9:.2f}B", str(m.num_blocks), str(m.hidden), str(m.heads),
            str(m.kv_heads), str(m.ffn), str(m.vocab), str(m.seq_len), str(m.global_batch),
            m.source,
        )
    gpus = Table(title="GPU presets (--gpu)", title_justify="left")
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
