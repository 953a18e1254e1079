"""What torchtitan main refuses of a dump's context parallelism and token dispatcher, in
main's words (read at b5bcd76, each rule citing its file and function).

Context parallelism: the model config's ``update_from_config`` runs, in this order,
``validate_cp_backend`` (torchtitan/distributed/context_parallel/api.py: cp > 1 needs
``parallelism.spmd_backend == "spmd_types"``), decoder.py's refusal of SDPA and varlen
attention (dump_batch.py ``main_attention``) and, for deepseek_v3's MTP decoder,
"MTP does not support pipeline parallelism yet." and "... context parallelism yet."
(models/deepseek_v3/mtp.py). Then some models' parallelize functions refuse any cp:
qwen3_5, kimi_k2_5, and muse_glimmer with its vision encoder. Main has no rotate method
(a dump's key is another commit's: dump.py's unknown-key warning) and pptune prices
only the head-tail balancer (dump.py UNPRICED warns of another).
``ParallelismConfig.__post_init__`` (torchtitan/config/configs.py) refuses, before all,
an spmd_backend other than the two and an empty load-balancer name.

Token dispatchers without expert parallelism: ``Decoder.Config.update_from_config`` calls
``update_ep_token_dispatcher_config`` (models/common/token_dispatcher.py), which raises
"<its config's qualname> requires expert parallelism (expert_parallel_degree > 1)." for
DeepEP's, HybridEP's and MinimalAsyncEP's configs at ep 1, at config time
(trainer.py ``Trainer.__init__``), whatever the SPMD backend. Were that passed, DeepEP's
and HybridEP's ``init_buffer`` would ``assert self.ep_mesh is not None`` (no message)
when ``RoutedExperts.parallelize`` (models/common/moe.py) wires the ep mesh, None at ep 1
(``get_optional_mesh("ep")``). pptune would price DeepEP at ep 1 as the standard
dispatcher's local permute (costmodel/dispatch.py ``runs_as``): a price of a run that
does not start.
"""

from __future__ import annotations

from typing import Any

from pptune.frameworks.common.fields import Ctx

BACKENDS = ("partial_dtensor", "spmd_types")  # ParallelismConfig.spmd_backend's Literal
_CONFIGS = "torchtitan/config/configs.py ParallelismConfig.__post_init__"
_DECODER = "torchtitan/models/common/decoder.py Decoder.Config.update_from_config"
_MTP = "torchtitan/models/deepseek_v3/mtp.py MTPDecoder.Config.update_from_config"
# the models whose parallelize function refuses any cp (its words, where)
CP_MODELS = {
    "qwen3_5": ("Context Parallel is not yet supported for Qwen3.5. GatedDeltaNet (75% of "
                "layers) requires full-sequence allgather, and multimodal CP needs vision "
                "scatter before CP sharding.", "qwen3_5/parallelize.py parallelize_qwen3_5"),
    "kimi_k2_5": ("Context Parallel is not yet supported for Kimi K2.5: vision scatter needs "
                  "the full sequence before CP would shard it.",
                  "kimi_k2_7/parallelize.py parallelize_kimi_k2_5"),
}
_GLIMMER = ("context parallel is not supported for the Muse Glimmer vision encoder.",
            "muse_glimmer/parallelize.py parallelize_muse_glimmer")


def parallelism_refusals(ctx: Ctx, par: dict[str, Any]) -> None:
    """ParallelismConfig.__post_init__'s refusals of the CP keys (module docstring)."""
    backend = par.get("spmd_backend", "spmd_types")
    if backend not in BACKENDS:
        ctx.refuse("torchtitan-spmd-backend",
                   f"parallelism.spmd_backend {str(backend)[:40]!r}: torchtitan raises "
                   "\"parallelism.spmd_backend must be either 'partial_dtensor' or "
                   f"'spmd_types'.\" ({_CONFIGS}); use spmd_types (main's default)")
    if par.get("context_parallel_load_balancer") == "":
        ctx.refuse("torchtitan-cp-load-balancer",
                   "parallelism.context_parallel_load_balancer '': torchtitan raises "
                   "'context_parallel_load_balancer cannot be an empty string. Use None to "
                   f"disable load balancing.' ({_CONFIGS}); use null (no balancing) or "
                   "headtail")


def cp_backend(ctx: Ctx, backend: str, cp: int) -> None:
    """validate_cp_backend, the first CP rule every decoder (and flux) runs."""
    if cp > 1 and backend != "spmd_types":
        ctx.refuse("torchtitan-cp-backend",
                   f"context_parallel_degree {cp} with parallelism.spmd_backend {backend[:40]!r}:"
                   " torchtitan raises \"Context Parallel requires parallelism.spmd_backend="
                   f"'spmd_types', got '{backend[:40]}'.\" (torchtitan/distributed/"
                   f"context_parallel/api.py validate_cp_backend, from {_DECODER}); set "
                   "parallelism.spmd_backend to spmd_types (main's default) or "
                   "context_parallel_degree 1")


def model_refusals(ctx: Ctx, name: str, model: dict[str, Any], cp: int, pp: int) -> None:
    """The MTP decoder's refusals, then the parallelize functions' of cp (module
    docstring), after decoder.py's."""
    mtp = model.get("mtp_layers")
    count = len(mtp) if isinstance(mtp, list) else 0
    for degree, key, what in ((pp, "pipeline_parallel_degree", "pipeline"),
                              (cp, "context_parallel_degree", "context")):
        if count and degree > 1:
            ctx.refuse("torchtitan-mtp",
                       f"model_spec.model.mtp_layers ({count}) with {key} {degree}: torchtitan "
                       f"raises 'MTP does not support {what} parallelism yet.' ({_MTP}); use "
                       f"{key} 1 or no MTP layers")
            break  # main raises the first only, and pp's comes first
    said = CP_MODELS.get(name) or (_GLIMMER if name == "muse_glimmer" and model.get(
        "vision_encoder") is not None else None)
    if cp > 1 and said:
        whose = f"{name} (its vision_encoder)" if name == "muse_glimmer" else name
        ctx.refuse("torchtitan-cp-model",
                   f"context_parallel_degree {cp} with model {whose}: torchtitan raises "
                   f"'{said[0]}' (torchtitan/models/{said[1]}); use context_parallel_degree 1")


def dispatcher_without_ep(ctx: Ctx, name: str | None, ep: int) -> None:
    """The token dispatcher a dump states (dump_model.py DISPATCHERS' name) with ep 1,
    which main refuses (module docstring)."""
    if ep != 1 or name not in ("DeepEP", "HybridEP", "MinimalAsyncEP"):
        return
    later = (f"; past it, {name}TokenDispatcher.init_buffer would assert the ep mesh, None "
             "at ep 1" if name != "MinimalAsyncEP" else "")
    ctx.refuse("torchtitan-deepep",
               f"model_spec.model's token_dispatcher {name} with expert_parallel_degree 1: "
               f"torchtitan raises '{name}TokenDispatcher.Config requires expert parallelism "
               "(expert_parallel_degree > 1).' (torchtitan/models/common/token_dispatcher.py "
               f"update_ep_token_dispatcher_config, from {_DECODER}{later}); drop the "
               f"{name} dispatcher (moe_comm_backend \"standard\") or set "
               "parallelism.expert_parallel_degree > 1")
