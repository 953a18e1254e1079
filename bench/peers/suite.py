"""The configurations the peers judge: the repository's test configs, configs
written like real ones around each framework rule, and every file
``recommend --emit`` writes for a set of recommendations.

Each case: the file, its framework, the flags check-config needs (DeepSpeed
JSON states neither the GPU count nor the model) and the world size.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA = REPO / "tests" / "data" / "configs"
SKIPPED = {
    "ds_config_hf_auto.json": "\"auto\" batch sizes are filled in by the Hugging Face Trainer, "
    "not DeepSpeed",
    "torchtitan_llama3_70b_legacy.toml": "written for torchtitan before 0.2 ([experimental] "
    "pipeline keys), which torchtitan 0.2.2 does not read",
}


@dataclass
class Case:
    name: str
    framework: str  # deepspeed | megatron | torchtitan
    file: Path
    gpus: int
    flags: list[str] = field(default_factory=list)  # for check-config
    pp: int = 1
    tp: int = 1
    model: str = "llama3-8b"


MODEL = ["--model", "llama3-8b", "--gpu", "h100-sxm"]

DEEPSPEED: dict[str, tuple[dict, int, int]] = {  # name: (config, gpus, pp)
    "ds-batch-only": ({"train_batch_size": 32}, 8, 2),
    "ds-ga-below-pp": ({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 2},
                      4, 4),
    "ds-bf16-fp16": ({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 8,
                      "bf16": {"enabled": True}, "fp16": {"enabled": True}}, 4, 4),
    "ds-zero1-pp": ({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 8,
                     "zero_optimization": {"stage": 1}}, 8, 4),
    "ds-zero2-pp": ({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 8,
                     "zero_optimization": {"stage": 2}}, 8, 4),
    "ds-zero3-pp": ({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 8,
                     "zero_optimization": {"stage": 3}}, 8, 4),
    "ds-uniform": ({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 8,
                    "pipeline": {"stages": 4, "partition": "uniform"}}, 4, 4),
    "ds-uniform-6": ({"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 12,
                      "pipeline": {"stages": 6, "partition": "uniform"}}, 12, 6),
    "ds-parameters": ({"train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 8,
                       "pipeline": {"stages": 4, "partition": "parameters"}}, 8, 4),
    "ds-unknown-partition": ({"train_micro_batch_size_per_gpu": 1,
                              "gradient_accumulation_steps": 8,
                              "pipeline": {"stages": 4, "partition": "profile"}}, 4, 4),
    "ds-no-batch": ({"gradient_accumulation_steps": 8}, 4, 4),
    "ds-inconsistent": ({"train_batch_size": 100, "train_micro_batch_size_per_gpu": 2,
                         "gradient_accumulation_steps": 8}, 8, 2),
    "ds-batch-and-ga": ({"train_batch_size": 64, "gradient_accumulation_steps": 4}, 8, 2),
    "ds-micro-only": ({"train_micro_batch_size_per_gpu": 4}, 8, 4),
}

MEGATRON_BASE = ("--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --ffn-hidden-size "
                 "14336 --group-query-attention --num-query-groups 8 --swiglu --seq-length 8192 "
                 "--micro-batch-size 1 --bf16")
MEGATRON: dict[str, tuple[str, int]] = {  # name: (extra flags, gpus)
    "mg-even": ("--pipeline-model-parallel-size 4 --global-batch-size 64", 8),
    "mg-uneven": ("--pipeline-model-parallel-size 4 --global-batch-size 64 "
                  "--decoder-first-pipeline-num-layers 6 --decoder-last-pipeline-num-layers 6", 8),
    "mg-uneven-vpp-rank": ("--pipeline-model-parallel-size 4 --global-batch-size 64 "
                           "--decoder-first-pipeline-num-layers 6 "
                           "--decoder-last-pipeline-num-layers 6 "
                           "--num-virtual-stages-per-pipeline-rank 2", 8),
    "mg-uneven-vpp-layers": ("--pipeline-model-parallel-size 4 --global-batch-size 64 "
                             "--decoder-first-pipeline-num-layers 6 "
                             "--num-layers-per-virtual-pipeline-stage 2", 8),
    "mg-account": ("--pipeline-model-parallel-size 2 --global-batch-size 64 "
                   "--account-for-embedding-in-pipeline-split "
                   "--account-for-loss-in-pipeline-split", 4),
    "mg-account-indivisible": ("--pipeline-model-parallel-size 4 --global-batch-size 64 "
                               "--account-for-embedding-in-pipeline-split", 4),
    "mg-m-below-pp": ("--pipeline-model-parallel-size 4 --global-batch-size 4", 8),
    "mg-interleaved": ("--pipeline-model-parallel-size 4 --global-batch-size 16 "
                       "--num-layers-per-virtual-pipeline-stage 4", 4),
    "mg-interleaved-m6": ("--pipeline-model-parallel-size 4 --global-batch-size 6 "
                          "--num-layers-per-virtual-pipeline-stage 4", 4),
    "mg-group-too-big": ("--pipeline-model-parallel-size 4 --global-batch-size 8 "
                         "--num-layers-per-virtual-pipeline-stage 4 "
                         "--microbatch-group-size-per-virtual-pipeline-stage 16", 4),
    "mg-group-8": ("--pipeline-model-parallel-size 4 --global-batch-size 16 "
                   "--num-layers-per-virtual-pipeline-stage 4 "
                   "--microbatch-group-size-per-virtual-pipeline-stage 8", 4),
    "mg-no-gbs": ("--pipeline-model-parallel-size 4", 8),
    "mg-layers-indivisible": ("--pipeline-model-parallel-size 5 --global-batch-size 10", 5),
    "mg-bf16-fp16": ("--pipeline-model-parallel-size 4 --global-batch-size 8 --fp16", 4),
    "mg-two-vpp-flags": ("--pipeline-model-parallel-size 4 --global-batch-size 8 "
                         "--num-layers-per-virtual-pipeline-stage 4 "
                         "--num-virtual-stages-per-pipeline-rank 2", 4),
    "mg-selective-method": ("--pipeline-model-parallel-size 4 --global-batch-size 8 "
                            "--recompute-activations --recompute-method uniform", 4),
    "mg-interleaved-pp2-no-overlap": ("--pipeline-model-parallel-size 2 --global-batch-size 8 "
                                      "--num-virtual-stages-per-pipeline-rank 2 "
                                      "--no-overlap-p2p-communication", 2),
    "mg-world-mismatch": ("--pipeline-model-parallel-size 4 --global-batch-size 8", 6),
    "mg-batch-indivisible": ("--pipeline-model-parallel-size 4 --global-batch-size 9", 8),
    # context parallelism and FP8 (NVIDIA's Llama 3.1 8B recipe: CP2, FP8 hybrid)
    "mg-cp2-fp8": ("--context-parallel-size 2 --global-batch-size 64 --fp8-format hybrid "
                   "--fp8-recipe tensorwise --fp8-param-gather --use-distributed-optimizer", 8),
    "mg-cp-seq": ("--context-parallel-size 4 --global-batch-size 64 --seq-length 8196", 8),
    "mg-cp-a2a": ("--context-parallel-size 2 --global-batch-size 64 --cp-comm-type a2a", 8),
    "mg-cp-hier-no-sizes": ("--context-parallel-size 4 --global-batch-size 64 "
                            "--cp-comm-type a2a+p2p", 8),
    "mg-cp-hier": ("--context-parallel-size 4 --global-batch-size 64 --cp-comm-type a2a+p2p "
                   "--hierarchical-context-parallel-sizes 2 2", 8),
    "mg-cp-hier-product": ("--context-parallel-size 4 --global-batch-size 64 "
                           "--cp-comm-type a2a+p2p --hierarchical-context-parallel-sizes 2 4", 8),
    "mg-cp-comm-per-layer-short": ("--context-parallel-size 2 --global-batch-size 64 "
                                   "--cp-comm-type p2p a2a", 8),
    "mg-fp8-param-no-dist-opt": ("--global-batch-size 64 --fp8-format hybrid "
                                 "--fp8-param-gather", 8),
    "mg-fp8-param-no-format": ("--global-batch-size 64 --fp8-param-gather "
                               "--use-distributed-optimizer", 8),
}

TITAN = """[model]
name = "llama3"
flavor = "8B"

[training]
local_batch_size = {local}
seq_len = 8192
{training}
[parallelism]
data_parallel_shard_degree = {shard}
pipeline_parallel_degree = 4
pipeline_parallel_schedule = "{schedule}"
{parallel}
"""
TORCHTITAN: dict[str, tuple[dict, int]] = {  # name: (fields, gpus)
    "tt-1f1b": ({"local": 8}, 4),
    "tt-1f1b-m-below-pp": ({"local": 2}, 4),
    "tt-gpipe-m-below-pp": ({"local": 2, "schedule": "GPipe"}, 4),
    "tt-interleaved-m6": ({"local": 6, "schedule": "Interleaved1F1B"}, 4),
    "tt-interleaved-m9": ({"local": 9, "schedule": "Interleaved1F1B"}, 4),
    "tt-interleaved-m8": ({"local": 8, "schedule": "Interleaved1F1B"}, 4),
    "tt-layers-per-stage-bad": ({"local": 8, "schedule": "Interleaved1F1B",
                                 "parallel": "pipeline_parallel_layers_per_stage = 7"}, 4),
    "tt-layers-per-stage-ok": ({"local": 8, "schedule": "Interleaved1F1B",
                                "parallel": "pipeline_parallel_layers_per_stage = 3"}, 4),
    "tt-single-stage-per-stage-bad": ({"local": 8,
                                       "parallel": "pipeline_parallel_layers_per_stage = 3"}, 4),
    "tt-single-stage-per-stage-ok": ({"local": 8,
                                      "parallel": "pipeline_parallel_layers_per_stage = 9"}, 4),
    "tt-zbv": ({"local": 8, "schedule": "ZBVZeroBubble"}, 4),
    "tt-unknown-schedule": ({"local": 8, "schedule": "Fancy1F1B"}, 4),
    "tt-global-indivisible": ({"local": 8, "training": "global_batch_size = 20", "shard": 2}, 8),
    "tt-microbatch-indivisible": ({"local": 8, "parallel":
                                   "pipeline_parallel_microbatch_size = 3"}, 4),
    "tt-fsdp-rest": ({"local": 8, "shard": -1}, 8),
    "tt-cp2": ({"local": 8, "parallel": "context_parallel_degree = 2\n"
                "context_parallel_rotate_method = \"alltoall\""}, 8),
    "tt-cp-seq": ({"local": 8, "parallel": "context_parallel_degree = 3"}, 12),  # 8192 % 6
    "tt-lm-head-name": ({"local": 8, "parallel": "module_fqns_per_model_part = [" + ", ".join(
        json.dumps(part) for part in (
            ["tok_embeddings"] + [f"layers.{i}" for i in range(8)],
            [f"layers.{i}" for i in range(8, 16)], [f"layers.{i}" for i in range(16, 24)],
            [f"layers.{i}" for i in range(24, 32)] + ["norm", "lm_head"])) + "]"}, 4),
}

RECOMMEND = [  # recommend runs whose emitted files the peers judge
    ["--gpus", "4"], ["--gpus", "8"], ["--gpus", "12"], ["--gpus", "16"],
    ["--gpus", "32", "--model", "gpt3-13b", "--gpu", "a100-80gb", "--tp", "2",
     "--sharded-optimizer"],
    ["--gpus", "16", "--seq-len", "16384", "--tp", "1", "--cp", "2", "--precision", "fp8",
     "--fp8-param-gather"],
]


def repo_cases() -> list[Case]:
    return [
        Case("repo/ds_config.json", "deepspeed", DATA / "ds_config.json", 8,
             ["--gpus", "8", *MODEL], pp=2),
        Case("repo/megatron_args.txt", "megatron", DATA / "megatron_args.txt", 8, ["--gpus", "8"],
             pp=4),
        Case("repo/megatron_gpt3_175b.sh", "megatron", DATA / "megatron_gpt3_175b.sh", 0, []),
        Case("repo/megatron_llama3_8b.sh", "megatron", DATA / "megatron_llama3_8b.sh", 0, []),
        Case("repo/torchtitan_llama3_8b.toml", "torchtitan", DATA / "torchtitan_llama3_8b.toml",
             8, ["--gpus", "8"]),
    ]


def written_cases(folder: Path) -> list[Case]:
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name, (config, gpus, pp) in DEEPSPEED.items():
        path = folder / f"{name}.json"
        path.write_text(json.dumps(config, indent=2) + "\n")
        out.append(Case(name, "deepspeed", path, gpus, ["--gpus", str(gpus), "--pp", str(pp),
                                                        *MODEL], pp=pp))
    for name, (extra, gpus) in MEGATRON.items():
        path = folder / f"{name}.sh"
        path.write_text(f"torchrun --nproc_per_node {gpus} pretrain_gpt.py {MEGATRON_BASE} "
                        f"{extra}\n")
        out.append(Case(name, "megatron", path, gpus, ["--gpu", "h100-sxm"]))
    for name, (fields, gpus) in TORCHTITAN.items():
        values = {"local": 8, "schedule": "1F1B", "shard": 1, "training": "", "parallel": "",
                  **fields}
        path = folder / f"{name}.toml"
        path.write_text(TITAN.format(**values))
        out.append(Case(name, "torchtitan", path, gpus, ["--gpus", str(gpus), "--gpu",
                                                        "h100-sxm"]))
    return out


def emitted_cases(folder: Path) -> list[Case]:
    """Run ``recommend --emit`` for each framework and each recommendation above."""
    from typer.testing import CliRunner

    from pptune.cli.app import app

    runner = CliRunner()
    out = []
    for args in RECOMMEND:
        tag = "recommend" + "".join(a.replace("--", "-") for a in args)
        gpus = int(args[1])
        tp = int(args[args.index("--tp") + 1]) if "--tp" in args else 1
        model = args[args.index("--model") + 1] if "--model" in args else "llama3-8b"
        gpu = args[args.index("--gpu") + 1] if "--gpu" in args else "h100-sxm"
        for framework, name in (("deepspeed", "ds_config.json"),
                                ("megatron", "pretrain_megatron.sh"),
                                ("torchtitan", "torchtitan.toml")):
            if framework == "deepspeed" and "--cp" in args:
                continue  # its JSON states neither cp nor FP8: emit has nothing to write
            target = folder / tag / framework
            r = runner.invoke(app, ["recommend", *args, "--emit", framework, "-o", str(target),
                                    "--force"])
            if r.exit_code != 0:
                raise RuntimeError(f"recommend {' '.join(args)} --emit {framework}: {r.stderr}")
            pp = json.loads((target / name).read_text()).get("pipeline", {}).get(
                "stages", 1) if framework == "deepspeed" else 1
            flags = (["--gpus", str(gpus), "--tp", str(tp), "--model", model, "--gpu", gpu]
                     if framework == "deepspeed" else ["--gpus", str(gpus), "--gpu", gpu])
            out.append(Case(f"{tag}/{name}", framework, target / name, gpus, flags, pp=pp,
                            tp=tp, model=model))
    return out
