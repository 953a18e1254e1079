"""What torchtitan main (b5bcd76) refuses of a dump's context parallelism and token
dispatcher, as check-config's error findings in main's words (frameworks/torchtitan/
main_rules.py). Each expected message is main's own text, copied from the file and
function the finding cites; the dumps are the real fixtures under tests/data/
torchtitan_main/ with one key edited."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from pptune.frameworks.read import ReadResult
from tests.frameworks.test_torchtitan_main_dump import DUMPS, LLAMA3_8B, edited, ids, read

QWEN3 = json.loads((DUMPS / "qwen3_30b_a3b.json").read_text())
DEEPEP = {"hidden_dim": 2048, "num_max_tokens_per_rank": 4096, "cudagraphable": False}


def errors(result: ReadResult) -> dict[str, str]:
    return {f.id: f.message for f in result.semantics.findings if f.severity == "error"}


def test_cp_on_partial_dtensor_is_mains_validate_cp_backend(tmp_path: Path) -> None:
    """validate_cp_backend (distributed/context_parallel/api.py): cp > 1 and spmd_backend
    != "spmd_types" raises; called first in Decoder.Config.update_from_config."""
    result = read(tmp_path, edited(parallelism={"context_parallel_degree": 2,
                                                "spmd_backend": "partial_dtensor"}))
    assert errors(result) == {"torchtitan-cp-backend": (
        "context_parallel_degree 2 with parallelism.spmd_backend 'partial_dtensor': "
        "torchtitan raises \"Context Parallel requires parallelism.spmd_backend="
        "'spmd_types', got 'partial_dtensor'.\" (torchtitan/distributed/context_parallel/"
        "api.py validate_cp_backend, from torchtitan/models/common/decoder.py "
        "Decoder.Config.update_from_config); set parallelism.spmd_backend to spmd_types "
        "(main's default) or context_parallel_degree 1")}


def test_flex_cp_on_spmd_types_and_partial_dtensor_without_cp_run(tmp_path: Path) -> None:
    """Main's own tests (tests/unit_tests/test_context_parallel_validation.py): flex CP
    on spmd_types and partial_dtensor at cp 1 are valid; the latter is a backend pptune
    does not price apart (a warning naming it)."""
    assert not errors(read(tmp_path, edited(parallelism={"context_parallel_degree": 2})))
    result = read(tmp_path, edited(parallelism={"spmd_backend": "partial_dtensor"}))
    assert not errors(result)
    assert "parallelism.spmd_backend 'partial_dtensor'" in ids(result)[
        "torchtitan-unmodelled"]


def test_both_cp_refusals_are_said_in_mains_order(tmp_path: Path) -> None:
    """partial_dtensor and SDPA with cp 2: main raises the backend's ValueError first, then
    (once fixed) decoder.py's NotImplementedError: two errors, the backend's first."""
    dump = edited(parallelism={"context_parallel_degree": 2, "spmd_backend": "partial_dtensor"})
    for block in dump["model_spec"]["model"]["layers"]:
        block["attention"]["inner_attention"] = {}
    found = [f.id for f in read(tmp_path, dump).semantics.findings if f.severity == "error"]
    assert found == ["torchtitan-cp-backend", "torchtitan-cp-attention"]


def test_a_backend_main_does_not_know_and_an_empty_balancer(tmp_path: Path) -> None:
    """ParallelismConfig.__post_init__ (config/configs.py) refuses both."""
    result = read(tmp_path, edited(parallelism={"spmd_backend": "dtensor"}))
    assert errors(result)["torchtitan-spmd-backend"] == (
        "parallelism.spmd_backend 'dtensor': torchtitan raises \"parallelism.spmd_backend "
        "must be either 'partial_dtensor' or 'spmd_types'.\" (torchtitan/config/configs.py "
        "ParallelismConfig.__post_init__); use spmd_types (main's default)")
    result = read(tmp_path, edited(parallelism={"context_parallel_degree": 2,
                                                "context_parallel_load_balancer": ""}))
    assert errors(result) == {"torchtitan-cp-load-balancer": (
        "parallelism.context_parallel_load_balancer '': torchtitan raises "
        "'context_parallel_load_balancer cannot be an empty string. Use None to disable "
        "load balancing.' (torchtitan/config/configs.py ParallelismConfig.__post_init__); "
        "use null (no balancing) or headtail")}


def test_a_rotate_method_is_a_key_main_has_not(tmp_path: Path) -> None:
    """Main's ParallelismConfig has no context_parallel_rotate_method: a warning naming the
    key (read as allgather), never an error."""
    result = read(tmp_path, edited(parallelism={"context_parallel_degree": 2,
                                                "context_parallel_rotate_method": "alltoall"}))
    assert not errors(result)
    assert "context_parallel_rotate_method" in ids(result)["torchtitan-unknown-key"]
    assert result.config.cp_comm == "all-gather"


def _mtp(dump: dict[str, Any]) -> dict[str, Any]:
    """The deepseek_v3 fixture with one MTP layer (a copy of its last block)."""
    dump = copy.deepcopy(dump)
    dump["model_spec"]["model"]["mtp_layers"] = [dump["model_spec"]["model"]["layers"][-1]]
    return dump


def test_mtp_refuses_pipeline_and_context_parallelism(tmp_path: Path) -> None:
    """MTPDecoder.Config.update_from_config (models/deepseek_v3/mtp.py): pp > 1, then
    cp > 1, each a NotImplementedError. The fixture: pp 2, tp 2, ep 4 on 8 GPUs."""
    dump = _mtp(json.loads((DUMPS / "deepseek_v3_debugmodel_fsdp2_tp2_pp2_ep4.json")
                           .read_text()))
    assert errors(read(tmp_path, dump, gpus=8))["torchtitan-mtp"] == (
        "model_spec.model.mtp_layers (1) with pipeline_parallel_degree 2: torchtitan raises "
        "'MTP does not support pipeline parallelism yet.' (torchtitan/models/deepseek_v3/"
        "mtp.py MTPDecoder.Config.update_from_config); use pipeline_parallel_degree 1 or "
        "no MTP layers")
    dump["parallelism"].update(pipeline_parallel_degree=1, context_parallel_degree=2)
    assert errors(read(tmp_path, dump, gpus=8))["torchtitan-mtp"] == (
        "model_spec.model.mtp_layers (1) with context_parallel_degree 2: torchtitan raises "
        "'MTP does not support context parallelism yet.' (torchtitan/models/deepseek_v3/"
        "mtp.py MTPDecoder.Config.update_from_config); use context_parallel_degree 1 or "
        "no MTP layers")


def test_models_whose_parallelize_refuses_cp(tmp_path: Path) -> None:
    """qwen3_5 and kimi_k2_5 refuse any cp > 1 in their parallelize functions; muse_glimmer
    only with its vision encoder."""
    base = edited(parallelism={"context_parallel_degree": 2})
    for name, said, where in (
            ("qwen3_5", "Context Parallel is not yet supported for Qwen3.5. GatedDeltaNet "
             "(75% of layers) requires full-sequence allgather, and multimodal CP needs "
             "vision scatter before CP sharding.", "qwen3_5/parallelize.py parallelize_qwen3_5"),
            ("kimi_k2_5", "Context Parallel is not yet supported for Kimi K2.5: vision "
             "scatter needs the full sequence before CP would shard it.",
             "kimi_k2_7/parallelize.py parallelize_kimi_k2_5")):
        dump = copy.deepcopy(base)
        dump["model_spec"]["name"] = name
        assert errors(read(tmp_path, dump))["torchtitan-cp-model"] == (
            f"context_parallel_degree 2 with model {name}: torchtitan raises '{said}' "
            f"(torchtitan/models/{where}); use context_parallel_degree 1")
    dump = copy.deepcopy(base)
    dump["model_spec"]["name"] = "muse_glimmer"
    assert "torchtitan-cp-model" not in errors(read(tmp_path, dump))
    dump["model_spec"]["model"]["vision_encoder"] = {"dim": 1024}
    assert errors(read(tmp_path, dump))["torchtitan-cp-model"] == (
        "context_parallel_degree 2 with model muse_glimmer (its vision_encoder): torchtitan "
        "raises 'context parallel is not supported for the Muse Glimmer vision encoder.' "
        "(torchtitan/models/muse_glimmer/parallelize.py parallelize_muse_glimmer); use "
        "context_parallel_degree 1")


def _dispatch(ep: int, extra: dict[str, Any], **par: Any) -> dict[str, Any]:
    dump = copy.deepcopy(QWEN3)
    dump["parallelism"].update(expert_parallel_degree=ep, **par)
    for layer in dump["model_spec"]["model"]["layers"]:
        layer["moe"]["routed_experts"]["token_dispatcher"].update(extra)
    return dump


def test_deepep_without_expert_parallelism_is_refused_at_config_time(tmp_path: Path) -> None:
    """ep 1: Decoder.Config.update_from_config calls update_ep_token_dispatcher_config
    (models/common/token_dispatcher.py), which raises for DeepEP's config before any
    mesh is built (main's own code in the scratch install raised exactly this text for
    qwen3_30b_a3b with moe_comm_backend "deepep" at ep 1)."""
    result = read(tmp_path, _dispatch(1, DEEPEP), gpus=8)
    assert errors(result) == {"torchtitan-deepep": (
        "model_spec.model's token_dispatcher DeepEP with expert_parallel_degree 1: torchtitan "
        "raises 'DeepEPTokenDispatcher.Config requires expert parallelism "
        "(expert_parallel_degree > 1).' (torchtitan/models/common/token_dispatcher.py "
        "update_ep_token_dispatcher_config, from torchtitan/models/common/decoder.py "
        "Decoder.Config.update_from_config; past it, DeepEPTokenDispatcher.init_buffer "
        "would assert the ep mesh, None at ep 1); drop the DeepEP dispatcher "
        "(moe_comm_backend \"standard\") or set parallelism.expert_parallel_degree > 1")}
    assert result.config.moe_dispatcher == "deepep"  # as the file states it
    # the backend does not matter: the refusal comes before parallelize
    result = read(tmp_path, _dispatch(1, DEEPEP, spmd_backend="partial_dtensor"), gpus=8)
    assert "torchtitan-deepep" in errors(result)


def test_hybridep_and_minimal_async_ep_without_expert_parallelism(tmp_path: Path) -> None:
    """The same loop refuses HybridEP's and MinimalAsyncEP's configs, by their qualname."""
    hybrid = {"hidden_dim": 2048, "num_max_tokens_per_rank": 4096,
              "non_blocking_capacity_factor": None}
    said = errors(read(tmp_path, _dispatch(1, hybrid), gpus=8))["torchtitan-deepep"]
    assert "raises 'HybridEPTokenDispatcher.Config requires expert parallelism" in said
    assert "HybridEPTokenDispatcher.init_buffer would assert" in said
    said = errors(read(tmp_path, _dispatch(1, {"num_max_tokens_per_rank": 4096}),
                       gpus=8))["torchtitan-deepep"]
    assert said == (
        "model_spec.model's token_dispatcher MinimalAsyncEP with expert_parallel_degree 1: "
        "torchtitan raises 'MinimalAsyncEPTokenDispatcher.Config requires expert "
        "parallelism (expert_parallel_degree > 1).' (torchtitan/models/common/"
        "token_dispatcher.py update_ep_token_dispatcher_config, from torchtitan/models/"
        "common/decoder.py Decoder.Config.update_from_config); drop the MinimalAsyncEP "
        "dispatcher (moe_comm_backend \"standard\") or set "
        "parallelism.expert_parallel_degree > 1")


def test_deepep_with_expert_parallelism_and_the_standard_one_run(tmp_path: Path) -> None:
    assert "torchtitan-deepep" not in errors(read(tmp_path, _dispatch(8, DEEPEP), gpus=8))
    assert not errors(read(tmp_path, _dispatch(1, {}), gpus=8))


def test_the_llama3_dump_is_unchanged(tmp_path: Path) -> None:
    assert set(ids(read(tmp_path, LLAMA3_8B))) == {"torchtitan-flex-attention"}
