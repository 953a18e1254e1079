"""Megatron-LM judges a launch script: megatron-core 0.16.1's own code, plus the
pipeline rules of Megatron-LM's ``validate_args`` re-stated from source.

- megatron-core (imported, run): ``parallel_state.initialize_model_parallel``
  on a fake process group of the script's world size, with the script's expert
  parallel sizes (its expert rank generator and their asserts),
  ``TransformerConfig.__post_init__`` (uneven and account-for splits; the MoE,
  MTP and MLA checks, ``MLATransformerConfig`` with --multi-latent-attention),
  the MoE layer pattern as ``get_gpt_decoder_block_spec`` builds it (local
  spec), the router's ``torch.topk`` over the experts, its FP8 format, recipe
  and parameter checks and a per-layer ``cp_comm_type`` of one type a layer,
  the context-parallel and hierarchical context-parallel groups,
  ``get_num_layers_to_build`` for every pipeline rank and virtual stage (the
  split), the micro-batch calculator, and the schedule itself
  (``get_forward_backward_func()``) run until its first forward step, which
  is where its micro-batch checks have passed. Stand-in: the schedule
  allocates a token counter with ``torch.zeros(..., device="cuda")``; the
  harness makes that one allocation on the CPU (there is no GPU here).
- megatron-core's ``MoELayer.forward`` refuses MoE layers under tensor parallelism
  without sequence parallelism in its first training step, past where the schedule
  stops here: that check is re-stated after the schedule runs.
- Megatron-LM ``validate_args`` (megatron/training/arguments.py, core_r0.16)
  lives in the Megatron-LM repository, not in megatron-core, and imports
  Triton and Transformer Engine at module level (GPU libraries), so its
  pipeline rules are re-stated below from that source rather than imported.
- Megatron-FSDP's rules and DistributedDataParallelConfig: megatron_fsdp_peer.py.
- The script's words (shell variables, the torchrun line) are parsed with
  pptune's shell reader; parsing only, the verdict is Megatron's.
"""

from __future__ import annotations

import math
from typing import Any

from bench.peers import megatron_fsdp_peer
from bench.peers.common import init_fake_world, main, verdict


class _Reached(Exception):
    """The schedule called the first forward step: its checks have passed."""


def _args(path: str) -> tuple[dict[str, list[str | None]], dict[str, list[str | None]], dict]:
    from pptune.frameworks.common.fields import Ctx
    from pptune.frameworks.common.shell import interpret
    from pptune.frameworks.megatron.flags import parse_flags
    from pptune.frameworks.megatron.launch import launch_words

    script = interpret(open(path, encoding="utf-8").read())
    launcher, words = launch_words(script, Ctx(name=path))
    return parse_flags(words).values, parse_flags(launcher, bools=()).values, script.scalars


def validate_args(a: dict[str, Any]) -> dict[str, Any]:
    """The pipeline rules of Megatron-LM's validate_args, in its order and words."""
    tp, pp, cp, world = a["tp"], a["pp"], a["cp"], a["world"]
    total = tp * pp * cp
    assert world % total == 0, (
        f"world size ({world}) is not divisible by total_model_size ({total=})")
    dp = world // total
    # num_layers from --encoder-num-layers, then "Check required arguments."
    if a["num_layers"] is not None:
        assert a["encoder_layers"] is None, (
            "cannot have both num-layers and encoder-num-layers specified")
    else:
        assert a["encoder_layers"] is not None, (
            "either num-layers or encoder-num-layers should be specified")
        a["num_layers"] = a["encoder_layers"]
    for name, given in (("hidden_size", a["hidden_given"]),
                        ("num_attention_heads", a["heads_given"]),
                        ("max_position_embeddings", a["max_position"])):
        assert given is not None, f"{name} argument is None"
    vpp_flags = [a["layers_per_virtual"], a["virtual_per_rank"], a["layout"]]
    assert sum(x is not None for x in vpp_flags) <= 1, (
        "No more than one of the following arguments can be set at the same time: "
        "--num-layers-per-virtual-pipeline-stage, --num-virtual-stages-per-pipeline-rank, "
        "--pipeline-model-parallel-layout")
    vpp = a["virtual_per_rank"]
    layers = a["num_layers"] + a["account_embedding"] + a["account_loss"]
    if a["layout"] is not None:
        from megatron.core.transformer.pipeline_parallel_layer_layout import (
            PipelineParallelLayerLayout,
        )

        stages = PipelineParallelLayerLayout.get_num_stages_from_str(a["layout"])
        assert stages % pp == 0, (
            "The length of pipeline_model_parallel_layout must be divisible by "
            "pipeline_model_parallel_size")
        vpp = stages // pp
    elif a["layers_per_virtual"] is not None:
        assert a["first"] is None and a["last"] is None, (
            "please use --num-virtual-stages-per-pipeline-rank to specify virtual pipeline "
            "parallel degree when enable uneven pipeline parallelism")
        assert layers % pp == 0, (
            "number of layers of the model must be divisible pipeline model parallel size")
        assert (layers // pp) % a["layers_per_virtual"] == 0, (
            "number of layers per pipeline stage must be divisible number of layers per "
            "virtual pipeline stage")
        vpp = layers // pp // a["layers_per_virtual"]
    elif vpp is None and a["first"] is None and a["last"] is None and a["layout"] is None:
        assert layers % pp == 0, (
            "Number of layers should be divisible by the pipeline-model-parallel size")
    vpp = None if vpp == 1 else vpp
    if vpp is not None:
        floor = 1 if a["overlap_p2p"] else 2
        assert pp > floor, (
            f"When interleaved schedule is used, pipeline-model-parallel size should be "
            f"greater than {floor}")
    if a["overlap_param"]:
        assert a["dist_opt"] or a["mfsdp"], (
            "--overlap-param-gather only supported with distributed optimizer or megatron fsdp")
        assert a["overlap_grad"], "Must use --overlap-param-gather with --overlap-grad-reduce"
    if a["fp16"]:
        assert not a["bf16"]
    if a["recompute"] == "selective":
        assert a["recompute_method"] is None, (
            "recompute method is not yet supported for selective recomputing granularity")
    experts = a["num_experts"] or None  # "if args.num_experts == 0: args.num_experts = None"
    etp = a["etp"] if a["etp"] is not None else tp
    if a["fsdp2"]:
        assert a["ep"] == 1, '--use-torch-fsdp2 is not supported with expert parallelism'
    if a["ep"] > 1:
        assert experts is not None, (
            "num_experts must be non None to use expert model parallelism")
        assert experts % a["ep"] == 0, (
            "Number of experts should be a multiple of expert model parallel_size.")
    if a["mtp"]:
        assert a["position"] in ("rope", "none"), (
            f"Multi-Token Prediction (MTP) is not supported with {a['position']} position "
            "embedding type.")
    if a["mla"]:
        assert not a["gqa"], (
            "Group query attention is mutually exclusive with multi latent attention.")
    # context parallelism and FP8 (validate_args, core_r0.16)
    if a["hierarchical"]:
        assert cp == math.prod(a["hierarchical"])
    if "a2a+p2p" in a["cp_comm"]:
        assert a["hierarchical"] is not None, (
            "--hierarchical-context-parallel-sizes must be set when a2a+p2p is used in cp comm")
    if a["fp8_param"]:
        assert a["dist_opt"] or a["fsdp2"] or a["mfsdp"], (
            "--fp8-param-gather only supported with distributed optimizer, torch fsdp2, "
            "megatron fsdp, or inference mode")
    megatron_fsdp_peer.validate_args(a)  # Megatron-FSDP's rules
    # sequence parallelism is turned off at tp 1, then --tp-comm-overlap asserts it
    if a["tp_comm_overlap"]:
        assert a["sequence_parallel"] and tp > 1, (
            "Tensor parallel communication/GEMM overlap can happen only when sequence "
            "parallelism is enabled")
    if a["delay_wgrad"]:
        assert a["impl"] == "transformer_engine", (
            "Delaying wgrad compute is only supported with transformer_engine implementation")
    if a["graph_impl"] == "local" and a["ep"] > 1:
        assert a["pad_graph_experts"], (
            "--moe-pad-experts-for-cuda-graph-inference must be set when using CUDA graphs "
            "with expert parallelism")
    if "full" in a["graph_scope"]:
        assert a["graph_scope"] == ["full"], "full scope cannot be used with other scopes."
    if a["max_position"] is not None:
        assert a["max_position"] >= a["seq"], (
            f"max_position_embeddings ({a['max_position']}) must be greater than or equal to "
            f"seq_length ({a['seq']}).")
    if cp > 1:
        assert a["seq"] % (cp * 2) == 0, (
            "seq-length should be a multiple of 2 * context-parallel-size if "
            "context-parallel-size > 1.")
    gbs = a["global_batch"] if a["global_batch"] is not None else a["micro"] * dp
    return {"dp": dp, "vpp": vpp, "global_batch": gbs, "experts": experts, "etp": etp}


def _read(path: str, case: dict[str, Any]) -> dict[str, Any]:
    flags, launcher, env = _args(path)

    def last(name: str) -> str | None:
        return flags[name][-1] if name in flags else None

    def num(name: str) -> int | None:
        value = last(name)
        return int(value) if value is not None else None

    procs = launcher.get("--nproc_per_node") or launcher.get("--nproc-per-node")
    per_node = int(procs[-1]) if procs and procs[-1] else case["gpus"]
    nodes = int(launcher["--nnodes"][-1]) if "--nnodes" in launcher else 1
    recompute = last("--recompute-granularity") or (
        "selective" if "--recompute-activations" in flags else None)
    return {
        "world": nodes * per_node, "tp": num("--tensor-model-parallel-size") or 1,
        "pp": num("--pipeline-model-parallel-size") or 1,
        "cp": num("--context-parallel-size") or 1, "num_layers": num("--num-layers"),
        "encoder_layers": num("--encoder-num-layers"),
        "hidden_given": num("--hidden-size"), "heads_given": num("--num-attention-heads"),
        "hidden": num("--hidden-size") or 4096, "heads": num("--num-attention-heads") or 32,
        "seq": num("--seq-length") or 4096, "micro": num("--micro-batch-size"),
        "global_batch": num("--global-batch-size"),
        "layers_per_virtual": num("--num-layers-per-virtual-pipeline-stage"),
        "virtual_per_rank": num("--num-virtual-stages-per-pipeline-rank"),
        "layout": last("--pipeline-model-parallel-layout"),
        "first": num("--decoder-first-pipeline-num-layers"),
        "last": num("--decoder-last-pipeline-num-layers"),
        "account_embedding": "--account-for-embedding-in-pipeline-split" in flags,
        "account_loss": "--account-for-loss-in-pipeline-split" in flags,
        "group": num("--microbatch-group-size-per-virtual-pipeline-stage"),
        "overlap_p2p": "--no-overlap-p2p-communication" not in flags,
        "bf16": "--bf16" in flags, "fp16": "--fp16" in flags, "recompute": recompute,
        "sequence_parallel": "--sequence-parallel" in flags,
        "tp_comm_overlap": "--tp-comm-overlap" in flags,
        "max_position": num("--max-position-embeddings"),
        "recompute_method": last("--recompute-method"),
        "recompute_modules": (last("--recompute-modules") or "").split() or None,
        "recompute_num_layers": num("--recompute-num-layers"),
        "mtp": num("--mtp-num-layers"),
        "tp_pp_dp": "--use-tp-pp-dp-mapping" in flags,
        "max_connections": env.get("CUDA_DEVICE_MAX_CONNECTIONS"),
        "num_experts": num("--num-experts"), "ep": num("--expert-model-parallel-size") or 1,
        "etp": num("--expert-tensor-parallel-size"), "topk": num("--moe-router-topk") or 2,
        "moe_ffn": num("--moe-ffn-hidden-size"), "ffn": num("--ffn-hidden-size"),
        "shared": num("--moe-shared-expert-intermediate-size"),
        "layer_freq": last("--moe-layer-freq"),
        "dispatcher": last("--moe-token-dispatcher-type") or "allgather",
        "balancing": last("--moe-router-load-balancing-type") or "aux_loss",
        "score": last("--moe-router-score-function") or "softmax",
        "capacity": last("--moe-expert-capacity-factor"),
        "pad": "--moe-pad-expert-input-to-capacity" in flags,
        "pre_softmax": "--moe-router-pre-softmax" in flags,
        "shared_overlap": "--moe-shared-expert-overlap" in flags,
        "grouped": "--moe-grouped-gemm" in flags,
        "enable_deepep": "--moe-enable-deepep" in flags,
        "flex_backend": last("--moe-flex-dispatcher-backend") or "deepep",
        "route_groups": num("--moe-router-num-groups"),
        "route_topk": num("--moe-router-group-topk"),
        "moe_overlap": "--overlap-moe-expert-parallel-comm" in flags,
        "delay_wgrad": "--delay-wgrad-compute" in flags,
        "early_release": "--ep-overlap-early-attn-memory-release" in flags,
        "legacy_grouped": "--moe-use-legacy-grouped-gemm" in flags,
        "expert_bias": "--moe-router-enable-expert-bias" in flags,
        "impl": last("--transformer-impl") or "transformer_engine",
        "graph_impl": last("--cuda-graph-impl") or "none",
        "graph_scope": (last("--cuda-graph-scope") or "").split(),
        "pad_graph_experts": "--moe-pad-experts-for-cuda-graph-inference" in flags,
        "bias": "--disable-bias-linear" not in flags,
        "position": last("--position-embedding-type") or "learned_absolute",
        "mla": "--multi-latent-attention" in flags, "gqa": "--group-query-attention" in flags,
        "q_lora": num("--q-lora-rank"), "kv_lora": num("--kv-lora-rank") or 32,
        "qk_head": num("--qk-head-dim") or 128, "qk_pos": num("--qk-pos-emb-head-dim") or 64,
        "v_head": num("--v-head-dim") or 128, "fsdp2": "--use-torch-fsdp2" in flags,
        "recompute_full": recompute == "full",
        "cp_comm": (last("--cp-comm-type") or "p2p").split(),
        "hierarchical": [int(n) for n in (last("--hierarchical-context-parallel-sizes")
                                          or "").split()] or None,
        "fp8": last("--fp8-format"), "fp8_recipe": last("--fp8-recipe") or "delayed",
        "fp8_param": "--fp8-param-gather" in flags,
        "dist_opt": "--use-distributed-optimizer" in flags,
        "overlap_grad": "--overlap-grad-reduce" in flags,
        "overlap_param": "--overlap-param-gather" in flags,
        "aware": "--use-precision-aware-optimizer" in flags,
        **megatron_fsdp_peer.read(flags),
        "state_dtypes": {k: last(f) for k, f in (("main_grads_dtype", "--main-grads-dtype"),
                                                  ("exp_avg_dtype", "--exp-avg-dtype"),
                                                  ("exp_avg_sq_dtype", "--exp-avg-sq-dtype"))
                         if last(f) is not None},
    }


def _optimizer_config(a: dict[str, Any]) -> None:
    """megatron-core's OptimizerConfig checks of the precision-aware optimizer's widths.
    An accepted precision-aware optimizer then imports Transformer Engine's FusedAdam,
    which this CPU venv lacks: that last check is not run."""
    if a["aware"] and a["dist_opt"]:
        return
    import torch
    from megatron.core.optimizer import OptimizerConfig

    dtypes = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16,
              "fp8": torch.uint8}
    OptimizerConfig(use_distributed_optimizer=a["dist_opt"],
                    use_precision_aware_optimizer=a["aware"],
                    **{k: dtypes[v] for k, v in a["state_dtypes"].items()})


def parse_args(path: str) -> None:
    """Megatron-LM's parse_args (megatron/training/arguments.py), re-stated: an
    ``argparse.ArgumentParser(allow_abbrev=False)`` holding every flag it defines at
    core_v0.16.1 (and its entry script's extra_args_provider's), as bench/megatron_flags.py
    derives them from that source; its ``parser.parse_args()`` refuses the rest. argparse
    itself matches the words (``--flag=value``, no prefixes); each flag takes any number
    of values, since only the names are judged here."""
    import argparse

    from pptune.frameworks.common.shell import interpret
    from pptune.frameworks.megatron import known_flags
    from pptune.frameworks.megatron.launch import entry_script

    script = interpret(open(path, encoding="utf-8").read())
    entry = entry_script(script)
    if entry not in known_flags.ENTRIES:
        return
    words = next(cmd.words for cmd in reversed(script.commands) if entry in
                 [w.rpartition("/")[2] for w in cmd.words])
    words = words[[w.rpartition("/")[2] for w in words].index(entry) + 1:]
    parser = argparse.ArgumentParser(prog=entry, allow_abbrev=False, add_help=False)
    for flag in sorted(known_flags.FLAGS | known_flags.EXTRA_FLAGS.get(entry, frozenset())):
        if flag.startswith("--"):
            parser.add_argument(flag, nargs="*")
    _, extra = parser.parse_known_args(words)
    if any(word.startswith("--") for word in extra):  # argparse exits (SystemExit) with:
        raise argparse.ArgumentError(None, f"{entry}: error: unrecognized arguments: "
                                           f"{' '.join(extra)}")


def judge(case: dict[str, Any]) -> dict[str, Any]:
    parse_args(case["file"])
    a = _read(case["file"], case)
    derived = validate_args(a)
    init_fake_world(a["world"])
    import torch
    from megatron.core import parallel_state
    from megatron.core.num_microbatches_calculator import (
        get_num_microbatches,
        init_num_microbatches_calculator,
    )
    from megatron.core.transformer.transformer_block import get_num_layers_to_build

    _te_stand_in()
    pp, vpp = a["pp"], derived["vpp"]
    parallel_state.initialize_model_parallel(
        tensor_model_parallel_size=a["tp"], pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=vpp, context_parallel_size=a["cp"],
        expert_model_parallel_size=a["ep"], expert_tensor_parallel_size=derived["etp"],
        hierarchical_context_parallel_sizes=a["hierarchical"],
        order="tp-cp-ep-pp-dp" if a["tp_pp_dp"] else "tp-cp-ep-dp-pp",
        create_gloo_process_groups=False)  # gloo groups need a real backend
    config = _config_class(a)(
        num_layers=a["num_layers"], hidden_size=a["hidden"], num_attention_heads=a["heads"],
        tensor_model_parallel_size=a["tp"], pipeline_model_parallel_size=pp,
        virtual_pipeline_model_parallel_size=vpp, context_parallel_size=a["cp"],
        num_layers_in_first_pipeline_stage=a["first"], num_layers_in_last_pipeline_stage=a["last"],
        account_for_embedding_in_pipeline_split=a["account_embedding"],
        account_for_loss_in_pipeline_split=a["account_loss"],
        microbatch_group_size_per_vp_stage=a["group"], pipeline_dtype=torch.bfloat16,
        pipeline_model_parallel_layout=a["layout"], mtp_num_layers=a["mtp"] or None,
        recompute_granularity=a["recompute"], recompute_method=a["recompute_method"],
        recompute_num_layers=a["recompute_num_layers"],
        recompute_modules=a["recompute_modules"] if a["recompute"] == "selective" else None,
        bf16=a["bf16"], overlap_p2p_comm=a["overlap_p2p"] and vpp is not None,
        batch_p2p_comm=not (a["overlap_p2p"] and vpp is not None),
        fp8=a["fp8"], fp8_recipe=a["fp8_recipe"], fp8_param=a["fp8_param"],
        cp_comm_type=a["cp_comm"][0] if len(a["cp_comm"]) == 1 else a["cp_comm"],
        **_moe_kwargs(a, derived))
    _optimizer_config(a)
    fsdp = megatron_fsdp_peer.ddp_config(a)
    experts = _experts(config, a, derived)
    chunks = vpp or 1
    if config.pipeline_model_parallel_layout is not None:
        # megatron-core's get_num_layers_to_build ignores pp_rank with a layout (it asks
        # the process's own rank): the layout is asked for each rank instead
        from megatron.core.transformer.enums import LayerType

        layout = config.pipeline_model_parallel_layout
        split = [layout.get_num_layers_to_build(LayerType.decoder, vp_stage=c if vpp else None,
                                                pp_rank=r)
                 for c in range(chunks) for r in range(pp)]
    else:
        split = [get_num_layers_to_build(config, vp_stage=c if vpp else None, pp_rank=r)
                 for c in range(chunks) for r in range(pp)]
    init_num_microbatches_calculator(0, None, derived["global_batch"], a["micro"], derived["dp"])
    m = get_num_microbatches()
    _run_schedule(config, m, a, chunks)
    if experts.get("moe_layers") and a["tp"] > 1 and not a["sequence_parallel"]:
        # MoELayer.forward (megatron/core/transformer/moe/moe_layer.py) raises this in the
        # first forward step of training, where the run here stops: re-stated (its words,
        # its two string literals run together as in the source)
        raise ValueError("During training, performance may degrade if MoE and tensor "
                         "parallelismare enabled without also enabling sequence parallelism.")
    return verdict(True, stage_layers=split, microbatches=m, dp=derived["dp"], vpp=vpp,
                   max_connections_set=a["max_connections"] == "1", **experts, **fsdp)


def moe_freq_type(x: str) -> int | list[int]:
    """Megatron-LM's --moe-layer-freq type (arguments.py ``moe_freq_type`` and
    ``_eval_pattern``: only digits, commas, brackets, parentheses, + and *, evaluated)."""
    import re

    if "[" not in x:
        return int(x)
    if re.compile(r"[^,\d\[\]\(\)\+\*]").search(x):
        raise ValueError(f"Invalid pattern: {x}")
    return eval(x)


# Transformer Engine is not installed here; megatron-core asks its version for MoE with
# FP8 (transformer_config.py: 1.7 / 1.11 and later checks): answered with the lowest
# version megatron-core 0.16.1's dev extra accepts (transformer-engine >= 2.9.0a0)
TE_STAND_IN = "2.9.0"


def _te_stand_in() -> None:
    from megatron.core import utils
    from packaging.version import Version

    if utils.get_te_version() is None:
        utils._te_version = Version(TE_STAND_IN)


def _config_class(a: dict[str, Any]) -> Any:
    from megatron.core.transformer.transformer_config import (
        MLATransformerConfig,
        TransformerConfig,
    )

    return MLATransformerConfig if a["mla"] else TransformerConfig


def _moe_kwargs(a: dict[str, Any], derived: dict[str, Any]) -> dict[str, Any]:
    """The MoE, MTP and MLA fields of TransformerConfig as
    core_transformer_config_from_args passes them (num_experts -> num_moe_experts)."""
    out: dict[str, Any] = {"add_bias_linear": a["bias"],
                           "expert_model_parallel_size": a["ep"],
                           "expert_tensor_parallel_size": derived["etp"],
                           "overlap_moe_expert_parallel_comm": a["moe_overlap"],
                           "delay_wgrad_compute": a["delay_wgrad"],
                           "ep_overlap_early_attn_memory_release": a["early_release"],
                           "cuda_graph_impl": a["graph_impl"],
                           # validate_args turns "full" into [] (the whole layer)
                           "cuda_graph_scope": [s for s in a["graph_scope"] if s != "full"]}
    if a["mla"]:
        out.update(q_lora_rank=a["q_lora"], kv_lora_rank=a["kv_lora"],
                   qk_head_dim=a["qk_head"], qk_pos_emb_head_dim=a["qk_pos"],
                   v_head_dim=a["v_head"])
    if derived["experts"] is None:
        return out
    freq: Any = a["layer_freq"] or 1
    if isinstance(freq, str):
        freq = moe_freq_type(freq.strip("'\""))
    out.update(
        num_moe_experts=derived["experts"], moe_router_topk=a["topk"],
        moe_ffn_hidden_size=a["moe_ffn"] or a["ffn"],
        moe_shared_expert_intermediate_size=a["shared"], moe_layer_freq=freq,
        moe_token_dispatcher_type=a["dispatcher"],
        moe_router_load_balancing_type=a["balancing"],
        moe_router_score_function=a["score"], moe_router_pre_softmax=a["pre_softmax"],
        moe_expert_capacity_factor=None if a["capacity"] is None else float(a["capacity"]),
        moe_pad_expert_input_to_capacity=a["pad"], moe_shared_expert_overlap=a["shared_overlap"],
        moe_grouped_gemm=a["grouped"], moe_enable_deepep=a["enable_deepep"],
        moe_use_legacy_grouped_gemm=a["legacy_grouped"],
        moe_router_enable_expert_bias=a["expert_bias"],
        moe_flex_dispatcher_backend=a["flex_backend"],
        moe_router_num_groups=a["route_groups"], moe_router_group_topk=a["route_topk"])
    return out


def _experts(config: Any, a: dict[str, Any], derived: dict[str, Any]) -> dict[str, Any]:
    """The expert groups megatron-core built, the MoE layer pattern of its layer specs
    and the router's top-k over the experts (router.py: ``torch.topk(logits, k=topk)``)."""
    import torch
    from megatron.core import parallel_state as ps

    facts: dict[str, Any] = {"ep": ps.get_expert_model_parallel_world_size(),
                             "etp": ps.get_expert_tensor_parallel_world_size(),
                             "edp": ps.get_expert_data_parallel_world_size()}
    if derived["experts"] is None:
        return facts
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec

    # every rank's and virtual stage's block, as each rank builds its own (vp_stage is
    # required with a virtual pipeline): the MoE layers of the whole model
    vpp = config.virtual_pipeline_model_parallel_size
    facts["moe_layers"] = sum(
        1 for r in range(config.pipeline_model_parallel_size)
        for c in (range(vpp) if vpp else [None])
        for layer in get_gpt_decoder_block_spec(config, use_transformer_engine=False,
                                                vp_stage=c, pp_rank=r).layer_specs
        if getattr(layer.submodules.mlp, "module", None).__name__ == "MoELayer")
    torch.topk(torch.zeros(1, derived["experts"]), k=a["topk"], dim=1)
    return facts


class _NoStream:
    """A placeholder for a CUDA stream megatron-core stores but does not use before the
    first forward step."""


def _run_schedule(config: Any, m: int, a: dict[str, Any], chunks: int) -> None:
    """Megatron's own schedule, until its first forward step (rank 0 starts there)."""
    import torch
    from megatron.core.enums import ModelType
    from megatron.core.pipeline_parallel import get_forward_backward_func

    class Chunk(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.config = config
            self.model_type = ModelType.encoder_or_decoder

        def set_input_tensor(self, _tensor: Any) -> None:
            return None

        @property
        def build_schedule_plan(self) -> Any:  # the a2a-overlap schedule's forward step
            raise _Reached

    def first_forward(*_args: Any, **_kwargs: Any) -> Any:
        raise _Reached

    model = [Chunk() for _ in range(chunks)]
    zeros = torch.zeros

    def cpu_zeros(*args: Any, **kwargs: Any) -> Any:  # stand-in: no CUDA on this machine
        if kwargs.get("device") == "cuda":
            kwargs["device"] = "cpu"
        return zeros(*args, **kwargs)

    torch.zeros = cpu_zeros  # type: ignore[assignment]
    if getattr(config, "overlap_moe_expert_parallel_comm", False):
        # stand-in: the a2a-overlap schedule (combined_1f1b) asks CUDA for its compute
        # and communication streams before its first forward step; given placeholders
        from megatron.core.pipeline_parallel import utils as pp_utils

        pp_utils.set_streams(comp_stream=_NoStream(), comm_stream=_NoStream())
    try:
        get_forward_backward_func()(
            forward_step_func=first_forward, data_iterator=[None] * chunks if chunks > 1 else None,
            model=model if chunks > 1 else model[0], num_microbatches=m,
            seq_length=a["seq"], micro_batch_size=a["micro"], forward_only=False)
    except _Reached:
        return
    finally:
        torch.zeros = zeros  # type: ignore[assignment]


if __name__ == "__main__":
    main(judge)
