"""``make peers``: every case judged by pptune and by the framework's own code.

Writes bench/results/peers.json: per file, pptune's verdict (exit code, the
framework-rule errors it found, its split), the framework's verdict (accepted
or the exception it raised, the split it built) and whether they agree. A
prediction (memory, bubble, slowdown) is not a framework rule and does not
count as a refusal.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import subprocess
import sys
import time
from typing import Any

from bench.peers.suite import (
    REPO,
    SKIPPED,
    Case,
    emitted_cases,
    moe_emitted_cases,
    repo_cases,
    written_cases,
)

RESULTS = REPO / "bench" / "results" / "peers.json"
WORK = REPO / "build" / "peers"
# A stage set that drops the embedding or the head cannot train: counted as the
# framework refusing it (the verdict lists modules_dropped).
PREDICTIONS = {"memory-overflow", "bubble-over-limit", "slower-than-best", "costs-unavailable",
               "too-large-to-simulate", "prediction-skipped"}
PEERS = {"deepspeed": "bench.peers.deepspeed_peer", "megatron": "bench.peers.megatron_peer",
         "torchtitan": "bench.peers.torchtitan_peer"}
STAND_INS = [
    "DeepSpeed: the CPU accelerator is told fp16 is supported (it reports it unsupported, "
    "which is not a DeepSpeed rule); layer parameter counts divided by their gcd (exact); "
    "with AutoTP and no pipeline the model is a two-block stand-in named and laid out as "
    "a Hugging Face Llama model (AutoTP finds its policy from those names)",
    "Megatron-LM: validate_args (megatron/training/arguments.py) is re-stated from source: it "
    "is not in megatron-core and imports Triton / Transformer Engine at module level; the "
    "schedule's one torch.zeros(device='cuda') is made on the CPU; with a layout the split is "
    "asked of the layout for each rank (get_num_layers_to_build ignores pp_rank then and "
    "answers for the process's own rank); Transformer Engine (not installed) is reported "
    "as 2.9.0, the lowest megatron-core 0.16.1's dev extra accepts, to the version checks "
    "TransformerConfig makes for MoE with FP8; the a2a-overlap schedule (combined_1f1b) is "
    "given placeholder streams and stops where it asks the model for its schedule plan; "
    "its Megatron-FSDP rules, spread over validate_args, run together "
    "(megatron_fsdp_peer.py)",
    "torchtitan: torchtitan/models/moe/kernels.py (imports Triton) replaced by a module whose "
    "function raises; the Trainer's inline batch assertions re-stated from torchtitan/train.py; "
    "per-stage parallelize_fn (FSDP/TP/AC wrapping) not applied; a model torchtitan has no "
    "TrainSpec for is built as llama3 with that model's depth, width, heads and vocabulary",
    "all: torch's single-process 'fake' process group sized to the config's world, rank 0 "
    "(torchtitan pipelines also at the last rank)",
]


def pptune_verdict(case: Case) -> dict[str, Any]:
    from typer.testing import CliRunner

    from pptune.cli.app import app

    r = CliRunner().invoke(app, ["check-config", str(case.file), "--output", "json",
                                 "--no-compare", *case.flags])
    if r.exit_code == 2:
        return {"exit_code": 2, "refuses": True, "refusals": ["unreadable"],
                "error": r.stderr.strip()[:300]}
    doc = json.loads(r.stdout)
    errors = [f["id"] for f in doc["findings"]
              if f["severity"] == "error" and f["id"] not in PREDICTIONS]
    return {"exit_code": r.exit_code, "refuses": bool(errors), "refusals": errors,
            "stage_layers": doc["derived"].get("stage_layers"), "config": doc["config"]}


def layer_params(case: Case) -> list[int] | None:
    """Parameters per layer (embedding, blocks, head) of the model check-config uses."""
    from pptune.costs.names import model_preset
    from pptune.costs.profiles import analytic_profile

    if "--model" not in case.flags:
        return None
    model = case.flags[case.flags.index("--model") + 1]
    gpu = case.flags[case.flags.index("--gpu") + 1]
    # DeepSpeed's PipelineModule builds no multi-token-prediction module (its reader
    # drops a preset's MTP layers, as the model code has none)
    shape = dataclasses.replace(model_preset(model), mtp_layers=0)
    prof = analytic_profile(shape, gpu, [1], tp=case.tp)
    return [round(layer.param_bytes / prof.param_dtype_bytes) for layer in prof.layers]


def model_experts(case: Case) -> list[int] | None:
    """[routed experts, top-k] of the model --model names (None: dense)."""
    from pptune.costmodel.presets import MODELS

    m = MODELS.get(case.flags[case.flags.index("--model") + 1]) if "--model" in case.flags else None
    return [m.experts, m.top_k] if m is not None and m.moe else None


def model_shape(case: Case) -> dict[str, int] | None:
    """The shape of the model an emitted torchtitan file names (for models torchtitan
    has no TrainSpec for)."""
    from pptune.costmodel.presets import MODELS

    name = case.model
    if name not in MODELS:
        return None
    m = MODELS[name]
    return {"layers": m.num_blocks, "hidden": m.hidden, "heads": m.heads,
            "kv_heads": m.kv_heads, "vocab": m.vocab}


def peer(case: Case, **extra: Any) -> dict[str, Any]:
    payload = {"file": str(case.file), "gpus": case.gpus, "pp": case.pp, "tp": case.tp, **extra}
    try:
        done = subprocess.run([sys.executable, "-m", PEERS[case.framework], json.dumps(payload)],
                              capture_output=True, text=True, timeout=600, cwd=REPO)
    except subprocess.TimeoutExpired:
        return {"accepted": None, "error": "timeout (600 s)"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        return {"accepted": None, "error": f"peer crashed: {done.stderr.strip()[-300:]}"}
    return json.loads(lines[-1])


def split_agrees(case: Case, ours: dict[str, Any], theirs: dict[str, Any]) -> bool | None:
    """Whether pptune's split is the framework's (None when one of them has none)."""
    if not theirs.get("accepted") or ours.get("refuses"):
        return None
    cfg = ours.get("config") or {}
    if case.framework == "deepspeed":
        return None if theirs.get("stage_layers") is None or ours.get("stage_layers") is None \
            else theirs["stage_layers"] == ours["stage_layers"]
    blocks = _blocks(cfg)
    if blocks is None:
        return None
    if case.framework == "megatron":
        return theirs["stage_layers"] == blocks
    return _titan_agrees(cfg, blocks, theirs)


def _blocks(cfg: dict[str, Any]) -> list[int] | None:
    if cfg.get("stage_layers"):
        return list(cfg["stage_layers"])
    layers, stages = cfg.get("num_layers"), cfg["pp"] * cfg["virtual_stages"]
    if layers is None and cfg.get("model") == "llama3-8b":
        layers = 32
    if layers is None or layers % stages:
        return None
    return [layers // stages] * stages


def _titan_agrees(cfg: dict[str, Any], blocks: list[int], theirs: dict[str, Any]) -> bool | None:
    modules = theirs.get("stage_modules")
    if modules is None:
        return None
    pp, rank_pp = cfg["pp"], theirs.get("pp_rank", 0)
    per_rank = len(modules)
    if cfg["schedule"] in ("zbv", "dualpipev"):  # V-shaped: torch's "v" stage-to-rank style
        stages = [rank_pp, 2 * pp - 1 - rank_pp]
    else:
        stages = [rank_pp + k * pp for k in range(per_rank)]
    counts = [sum(1 for n in part if n.startswith("layers.")) for part in modules]
    if len(stages) != len(counts) or max(stages) >= len(blocks):
        return False
    ok = counts == [blocks[s] for s in stages]
    for s, part in zip(stages, modules, strict=True):
        if s == 0:
            ok = ok and "tok_embeddings" in part
        if s == len(blocks) - 1:
            ok = ok and "norm" in part and "output" in part
    return ok


def judge(case: Case) -> dict[str, Any]:
    ours = pptune_verdict(case)
    extra: dict[str, Any] = {}
    if case.framework == "deepspeed":
        extra["layer_params"] = layer_params(case)
        extra["experts"] = model_experts(case)
    if case.framework == "torchtitan":
        extra["model_shape"] = model_shape(case)
    theirs = peer(case, **extra)
    splits = [split_agrees(case, ours, theirs)]
    if case.framework == "torchtitan" and theirs.get("stage_modules") and case.gpus > 1:
        last = peer(case, rank=case.gpus - 1, model_shape=extra.get("model_shape"))
        last["pp_rank"] = (ours.get("config") or {}).get("pp", 1) - 1
        theirs["last_rank"] = last
        splits.append(split_agrees(case, ours, last))
    refused = theirs.get("accepted") is False or bool(theirs.get("modules_dropped")) or bool(
        theirs.get("last_rank", {}).get("modules_dropped"))
    verdict_ok = None if theirs.get("accepted") is None else ours["refuses"] == refused
    split_ok = None if all(s is None for s in splits) else all(s is not False for s in splits)
    ours.pop("config", None)
    return {"file": case.name, "framework": case.framework, "pptune": ours,
            "framework_verdict": theirs, "verdict_agrees": verdict_ok, "split_agrees": split_ok,
            "agrees": verdict_ok is not False and split_ok is not False}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", metavar="CASE",
                    help="judge these cases again and update peers.json (the other cases, "
                    "the layouts and the run time are kept)")
    args = ap.parse_args(argv)
    if args.only:
        return _rejudge(args.only)
    started = time.time()
    cases = (repo_cases() + written_cases(WORK / "written") + emitted_cases(WORK / "emitted")
             + moe_emitted_cases(WORK / "emitted"))
    results = []
    for k, case in enumerate(cases, 1):
        row = judge(case)
        results.append(row)
        mark = "ok " if row["agrees"] else "DIFF"
        print(f"[{k}/{len(cases)}] {mark} {case.name}", file=sys.stderr, flush=True)
    layouts = layout_parsers()
    summary = summarize(results, layouts, math.ceil(time.time() - started))
    doc = {"versions": _versions(), "stand_ins": STAND_INS, "skipped": SKIPPED,
           "summary": summary, "cases": results, "layouts": layouts}
    RESULTS.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(summary), file=sys.stderr)


def _rejudge(names: list[str]) -> None:
    doc = json.loads(RESULTS.read_text())
    found = repo_cases() + written_cases(WORK / "written")
    if any(n.startswith("recommend") for n in names):  # written again by this tree's emit
        found += emitted_cases(WORK / "emitted")
    if any(n.startswith("moe-") for n in names):
        found += moe_emitted_cases(WORK / "emitted")
    cases = {c.name: c for c in found}
    unknown = [n for n in names if n not in cases]
    if unknown:
        raise SystemExit(f"--only: no case {', '.join(unknown)}")
    rows = {r["file"]: r for r in doc["cases"]}
    for name in names:
        rows[name] = judge(cases[name])
        print(f"{'ok ' if rows[name]['agrees'] else 'DIFF'} {name}", file=sys.stderr)
    doc["cases"] = list(rows.values())
    doc["stand_ins"] = STAND_INS
    doc["summary"] = summarize(doc["cases"], doc.get("layouts", {}), doc["summary"]["seconds"])
    RESULTS.write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps(doc["summary"]), file=sys.stderr)


def summarize(results: list[dict[str, Any]], layouts: dict[str, Any],
              seconds: int) -> dict[str, Any]:
    judged = [r for r in results if r["verdict_agrees"] is not None]
    emitted = [r for r in results if "/" in r["file"]
               and r["file"].startswith(("recommend", "moe-"))]
    found = layouts.get("summary", {})
    return {
        "cases": len(results),
        "agree": sum(r["agrees"] for r in results),
        "verdicts_compared": len(judged),
        "verdicts_agree": sum(bool(r["verdict_agrees"]) for r in judged),
        "splits_compared": sum(r["split_agrees"] is not None for r in results),
        "splits_agree": sum(bool(r["split_agrees"]) for r in results),
        "emitted_files": len(emitted),
        "emitted_accepted": sum(bool(r["framework_verdict"].get("accepted")) for r in emitted),
        "emitted_split_identical": sum(bool(r["split_agrees"]) for r in emitted),
        "layout_strings": sum(v["strings"] for v in found.values()),
        "layout_strings_agree": sum(v["agree"] for v in found.values()),
        "seconds": seconds,
    }


def layout_parsers() -> dict[str, Any]:
    """megatron-core's layout parser against pptune's (layout_peer.py), in one process."""
    done = subprocess.run([sys.executable, "-m", "bench.peers.layout_peer"], capture_output=True,
                          text=True, timeout=600, cwd=REPO)
    if done.returncode != 0 or not done.stdout.startswith("{"):
        return {"error": f"layout peer failed: {done.stderr.strip()[-300:]}"}
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def _versions() -> dict[str, str]:
    from importlib.metadata import version

    return {name: version(name) for name in ("torch", "deepspeed", "megatron-core", "torchtitan")}


if __name__ == "__main__":
    main()
