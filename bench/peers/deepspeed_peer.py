"""DeepSpeed 0.19.8 judges a DeepSpeed JSON config: ``deepspeed.initialize`` with a
``PipelineModule`` (the PipelineEngine's own checks, DeepSpeedConfig's batch
derivation and assertions) and the stage boundaries PipelineModule builds
over the model's layer list (embedding, blocks, head) with the config's
partition method.

Stand-in: DeepSpeed's CPU accelerator reports fp16 unsupported, which would
refuse every fp16 config for a reason that is not a DeepSpeed rule; the
harness tells it fp16 is supported (``is_fp16_supported``) since only the
rules are checked. The layer list's parameter counts are divided by their
greatest common divisor (exact: partition_balanced compares sums of
integers, which a common factor does not reorder) so an 8B model fits in
memory.

Expert parallelism (AutoEP, ``"expert_parallel"``): DeepSpeed's own
``parse_autoep_config``, ``validate_autoep_config`` (the folding rules over the
world, pipeline and AutoTP sizes) and ``validate_autoep_post_detection`` (the
experts of each MoE layer over ``autoep_size``) run on the model's experts as
the case names them (stand-in for the detection of a Hugging Face MoE model's
layers); the section is then taken out of the config given to
``deepspeed.initialize``, whose stand-in model has no MoE layer to replace.

AutoTP (``"tensor_parallel"`` without a pipeline): the stand-in model is a
two-block model named and laid out as a Llama model is (``_hf_like``), since
AutoTP finds its sharding policy from a Hugging Face model's class and layer
names.
"""

from __future__ import annotations

import math
from typing import Any

from bench.peers.common import init_fake_world, main, verdict


def judge(case: dict[str, Any]) -> dict[str, Any]:
    cfg = _load(case["file"])
    gpus, tp = case["gpus"], case.get("tp", 1)
    section = cfg.get("pipeline") if isinstance(cfg.get("pipeline"), dict) else {}
    pp = section.get("stages") if isinstance(section.get("stages"), int) else case.get("pp", 1)
    init_fake_world(gpus)
    import deepspeed
    import torch
    from deepspeed.accelerator import get_accelerator
    from deepspeed.pipe import LayerSpec, PipelineModule
    from deepspeed.runtime.pipe.topology import (
        PipeDataParallelTopology,
        PipeModelDataParallelTopology,
    )

    deepspeed.init_distributed(dist_backend="fake")
    experts = _autoep(cfg, gpus, pp, tp, case.get("experts"))
    get_accelerator().is_fp16_supported = lambda: True  # stand-in, see the module docstring
    dp = gpus // (pp * tp)

    def topology() -> Any:
        if tp > 1:
            return PipeModelDataParallelTopology(num_pp=pp, num_mp=tp, num_dp=dp)
        return PipeDataParallelTopology(num_pp=pp, num_dp=dp)

    class Block(torch.nn.Module):
        def __init__(self, numel: int) -> None:
            super().__init__()
            self.weight = torch.nn.Parameter(torch.zeros(numel))

        def forward(self, x: Any) -> Any:
            return x

    method = section.get("partition", "parameters")
    method = "parameters" if method == "best" else method
    counts = case.get("layer_params")
    stage_layers = [len(counts)] if counts and pp == 1 else None
    if counts and 1 < pp <= len(counts):
        unit = math.gcd(*counts)
        model = PipelineModule(layers=[LayerSpec(Block, n // unit) for n in counts],
                               num_stages=pp, topology=topology(), partition_method=method)
        stage_layers = [int(b - a) for a, b in zip(model.parts, model.parts[1:], strict=False)]
    if "stages" not in section and pp == 1:  # no pipeline: DeepSpeedEngine on a plain model
        tiny: Any = _hf_like(torch) if _autotp(cfg) > 1 else torch.nn.Sequential(Block(8), Block(8))
    else:
        tiny = PipelineModule(layers=[LayerSpec(Block, 8) for _ in range(pp)], num_stages=pp,
                              topology=topology(), partition_method="uniform")
    # without a PipelineModule DeepSpeed learns tensor parallelism from an mpu (as
    # Megatron-DeepSpeed passes one); the grid of the same topology plays that part
    from deepspeed.runtime.pipe.topology import PipelineParallelGrid

    mpu = PipelineParallelGrid(topology=topology()) if tp > 1 and pp == 1 else None
    engine, *_ = deepspeed.initialize(model=tiny, config=cfg, mpu=mpu,
                                      optimizer=torch.optim.AdamW(tiny.parameters()))
    return verdict(True, stage_layers=stage_layers,
                   micro_batch_size=engine.train_micro_batch_size_per_gpu(),
                   microbatches=engine.gradient_accumulation_steps(),
                   train_batch_size=engine.train_batch_size(), **experts)


def _load(path: str) -> Any:
    """The file as DeepSpeedConfig loads a path (deepspeed/runtime/config.py): hjson with
    dict_raise_error_on_duplicate_keys, which refuses a key repeated in one object."""
    import hjson
    from deepspeed.runtime.config_utils import dict_raise_error_on_duplicate_keys

    with open(path, encoding="utf-8") as fh:
        return hjson.load(fh, object_pairs_hook=dict_raise_error_on_duplicate_keys)


def _autotp(cfg: dict[str, Any]) -> int:
    section = cfg.get("tensor_parallel")
    if not isinstance(section, dict):
        return 1
    size = section.get("autotp_size", section.get("tp_size", 1))
    return size if isinstance(size, int) else 1


def _hf_like(torch: Any) -> Any:
    """Stand-in for the Hugging Face model AutoTP shards: AutoTP finds its policy from
    the model's class name (``...Model``) and the Linear layers of each block in its
    ModuleList (``o_proj`` and ``down_proj`` as the row-parallel ones), as a Llama
    model names them; a plain Sequential has no policy for it to find."""
    nn = torch.nn

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q_proj, self.k_proj = nn.Linear(8, 8, bias=False), nn.Linear(8, 8, bias=False)
            self.v_proj, self.o_proj = nn.Linear(8, 8, bias=False), nn.Linear(8, 8, bias=False)

    class Mlp(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.gate_proj, self.up_proj = nn.Linear(8, 8, bias=False), nn.Linear(8, 8, bias=False)
            self.down_proj = nn.Linear(8, 8, bias=False)

    class DecoderLayer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.self_attn, self.mlp = Attention(), Mlp()

    class StandInModel(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList([DecoderLayer(), DecoderLayer()])

        def forward(self, x: Any) -> Any:
            return x

    return StandInModel()


def _autoep(cfg: dict[str, Any], world: int, pp: int, tp: int,
            experts: list[int] | None) -> dict[str, Any]:
    """AutoEP's own validation (module docstring); the section leaves ``cfg``."""
    section = cfg.pop("expert_parallel", None)
    if not isinstance(section, dict):
        return {}
    from deepspeed.module_inject.auto_ep_config import (
        MoELayerSpec,
        parse_autoep_config,
        validate_autoep_config,
        validate_autoep_post_detection,
    )

    config = parse_autoep_config(section)
    validate_autoep_config(config, world, pp, tp, 1)
    if experts and config.enabled:
        spec = MoELayerSpec(
            moe_module_name="layers.0.mlp", model_family="mixtral", router_name="gate",
            experts_name="experts", expert_storage="module_list", expert_w1_name="w1",
            expert_w2_name="w2", expert_w3_name="w3", num_experts=experts[0], top_k=experts[1],
            hidden_size=8, ffn_hidden_size=8, score_func="softmax", score_apply="post",
            route_norm=True, gate_bias=False, return_router_logits=False,
            router_logits_capture_target="none", router_logits_capture_index=None,
            router_logits_capture_layer_name=None, has_shared_experts=False,
            shared_experts_name="")
        validate_autoep_post_detection(config, [spec])
    return {"autoep_size": config.autoep_size if config.enabled else 1}


if __name__ == "__main__":
    main(judge)
