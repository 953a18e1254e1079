"""torchtitan 0.2.2 judges a TOML job file with its own code: ConfigManager
(TOML and defaults), ParallelDims (world and degrees), the Trainer's batch
assertions, and ``pipeline_llm`` on the model built on the meta device
(stage count, module names per stage, torch's schedule constructor with
its micro-batch rules).

Stand-ins:
- torchtitan/models/moe/kernels.py imports Triton (a GPU library) at module
  level; the harness registers a module of the same name whose
  ``generate_permute_indices`` raises (MoE routing is never run here).
- Trainer.__init__'s batch checks, and its refusal to pipeline a model whose
  TrainSpec has no ``pipelining_fn``, are inline in the Trainer, which also
  builds the tokenizer and data loader; they are re-stated here from
  torchtitan/train.py (same expressions and messages).
- The per-stage ``parallelize_fn`` (FSDP, TP, activation checkpointing) is
  not applied: it wraps modules but changes neither the stages nor the
  schedule.
- A model torchtitan has no TrainSpec for (pptune's gpt3 presets) is built
  as torchtitan's llama3 with that model's depth, width, heads and vocabulary
  (``model_stand_in`` in the verdict): the stage and schedule rules depend on
  the layer count only.

Besides the verdict, the stages it built are listed; a stage set without
the LM head (``output``) or the embedding cannot train (the last stage would
hand hidden states to the loss), reported as ``modules_dropped``.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from bench.peers.common import init_fake_world, main, verdict


def _stand_in_kernels() -> None:
    kernels = types.ModuleType("torchtitan.models.moe.kernels")

    def generate_permute_indices(*_args: Any, **_kwargs: Any) -> Any:
        raise RuntimeError("Triton kernel stand-in: MoE routing is not run by the peer harness")

    kernels.generate_permute_indices = generate_permute_indices  # type: ignore[attr-defined]
    sys.modules["torchtitan.models.moe.kernels"] = kernels


def judge(case: dict[str, Any]) -> dict[str, Any]:
    _stand_in_kernels()
    import torch
    from torchtitan.config import ConfigManager
    from torchtitan.distributed import ParallelDims
    from torchtitan.protocols.train_spec import get_train_spec

    job = ConfigManager().parse_args(["--job.config_file", case["file"]])
    p, world = job.parallelism, case["gpus"]
    init_fake_world(world, case.get("rank", 0))
    dims = ParallelDims(dp_replicate=p.data_parallel_replicate_degree,
                        dp_shard=p.data_parallel_shard_degree, cp=p.context_parallel_degree,
                        tp=p.tensor_parallel_degree, pp=p.pipeline_parallel_degree,
                        ep=p.expert_parallel_degree, etp=p.expert_tensor_parallel_degree,
                        world_size=world)
    dims.build_mesh()
    # torchtitan/models/llama3/infra/parallelize.py (run by parallelize_fn, not applied here)
    assert job.training.seq_len % dims.seq_len_divisor == 0, (
        f"Sequence length {job.training.seq_len} must be divisible by the product of TP degree "
        f"({dims.tp}) and 2 * CP degree ({dims.cp}).")
    batch_degree = dims.dp_replicate * dims.dp_shard if dims.dp_enabled else 1
    global_batch = job.training.global_batch_size
    if global_batch < 0:
        global_batch = job.training.local_batch_size * batch_degree
    assert global_batch % (job.training.local_batch_size * batch_degree) == 0, (
        f"global batch size must be multiple of local batch size times data-parallel degree "
        f"({global_batch} % ({job.training.local_batch_size} * {batch_degree}) != 0)")
    accum = global_batch // (job.training.local_batch_size * batch_degree)
    spec, args, stand_in = _model(job, case, get_train_spec)
    args.update_from_config(job)
    with torch.device("meta"):
        model = spec.model_cls(args)
    facts: dict[str, Any] = {"grad_accum_runs": accum, "dp": batch_degree,
                             "model_stand_in": stand_in,
                             "ac_mode": job.activation_checkpoint.mode,
                             "ac_option": job.activation_checkpoint.selective_ac_option}
    if not dims.pp_enabled:
        return verdict(True, **facts)
    if not spec.pipelining_fn:  # Trainer.__init__, re-stated from torchtitan/train.py
        raise RuntimeError(f"Pipeline Parallel is enabled but {job.model.name} does not "
                           "support pipelining")
    loss_fn = spec.build_loss_fn(job, parallel_dims=dims) if _takes_dims(spec) else (
        spec.build_loss_fn(job))
    schedule, parts, _first, _last = spec.pipelining_fn(
        model, dims, job, torch.device("cpu"), args, lambda m, *_a, **_k: m, loss_fn)
    modules = [_modules(part) for part in parts]
    held = {name for part in modules for name in part}
    edge = [name for name, there in (("tok_embeddings", _first), ("output", _last)) if there]
    facts["modules_dropped"] = [name for name in edge if name not in held]
    return verdict(True, stage_modules=modules,
                   stages_per_rank=len(parts), schedule=type(schedule).__name__,
                   microbatches=getattr(schedule, "_n_microbatches", None), **facts)


def _model(job: Any, case: dict[str, Any], get_train_spec: Any) -> tuple[Any, Any, bool]:
    try:
        spec = get_train_spec(job.model.name)
    except ValueError:
        shape = case.get("model_shape")
        if not shape:
            raise
        from torchtitan.models.llama3.model.args import TransformerModelArgs

        args = TransformerModelArgs(dim=shape["hidden"], n_layers=shape["layers"],
                                    n_heads=shape["heads"], n_kv_heads=shape["kv_heads"],
                                    vocab_size=shape["vocab"])
        return get_train_spec("llama3"), args, True
    return spec, spec.model_args[job.model.flavor], False


def _takes_dims(spec: Any) -> bool:
    import inspect

    return "parallel_dims" in inspect.signature(spec.build_loss_fn).parameters


def _modules(part: Any) -> list[str]:
    """Top-level modules a stage keeps (torchtitan deletes or sets to None the others)."""
    names = []
    for name, child in part.named_children():
        if name == "layers":
            names += [f"layers.{k}" for k in child._modules if child._modules[k] is not None]
        elif child is not None:
            names.append(name)
    return names


if __name__ == "__main__":
    main(judge)
