"""Megatron-LM rules found missing or wrong in users' MoE trials, each against the
megatron-core 0.16.1 / Megatron-LM core_v0.16.1 source it re-states: padding to a
capacity no factor sets; no even-split rule where a layout or first/last-stage
counts place the layers (and megatron-core's own rules for those); --tp-comm-overlap
and its requirements; --max-position-embeddings against --seq-length."""

from __future__ import annotations

from pathlib import Path

import pytest

from pptune.frameworks.common.versions import FrameworkRefusal
from pptune.frameworks.megatron.split import MegatronSplit, megatron_blocks
from tests.check_json import check_file

DATA = Path(__file__).resolve().parents[1] / "data" / "configs"
DENSE = ("torchrun --nproc_per_node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
         "--num-attention-heads 32 --group-query-attention --num-query-groups 8 "
         "--ffn-hidden-size 14336 --swiglu --position-embedding-type rope "
         "--normalization RMSNorm --disable-bias-linear --untie-embeddings-and-output-weights "
         "--attention-dropout 0.0 --hidden-dropout 0.0 --seq-length 4096 "
         "--max-position-embeddings 4096 --micro-batch-size 1 --global-batch-size 64 --bf16 "
         "--tensor-model-parallel-size {tp} {extra}\n")
MOE = DENSE.replace("--bf16", "--bf16 --num-experts 8 --moe-router-topk 2 "
                    "--moe-ffn-hidden-size 1408 --moe-grouped-gemm --expert-model-parallel-size 8 "
                    "--moe-token-dispatcher-type alltoall")


def dense(tmp_path: Path, extra: str = "", tp: int = 2) -> tuple[int, dict[str, str], dict]:
    return check_file(tmp_path / "run.sh", DENSE.format(tp=tp, extra=extra), "--gpu",
                      "h100-sxm")


def moe(tmp_path: Path, extra: str = "") -> tuple[int, dict[str, str], dict]:
    return check_file(tmp_path / "moe.sh", MOE.format(tp=1, extra=extra), "--gpu", "h100-sxm")


# --- padding to capacity ---------------------------------------------------------------


def test_padding_to_capacity_needs_a_capacity_factor(tmp_path: Path) -> None:
    """transformer_config.py TransformerConfig.__post_init__: 'moe_expert_capacity_factor
    must be set to use moe_pad_expert_input_to_capacity' (a negative factor means
    None), whatever the model's experts."""
    code, found, _ = moe(tmp_path, "--moe-pad-expert-input-to-capacity")
    assert code == 1 and found["megatron-moe-capacity"] == "error"
    code, found, _ = moe(tmp_path, "--moe-pad-expert-input-to-capacity "
                         "--moe-expert-capacity-factor -1")
    assert code == 1 and found["megatron-moe-capacity"] == "error"
    code, found, _ = moe(tmp_path, "--moe-pad-expert-input-to-capacity "
                         "--moe-expert-capacity-factor 1.25")
    assert "megatron-moe-capacity" not in found and "error" not in found.values(), found
    code, found, _ = dense(tmp_path, "--sequence-parallel --moe-pad-expert-input-to-capacity")
    assert code == 1 and found["megatron-moe-capacity"] == "error"


# --- the layer split --------------------------------------------------------------------


def _dsv3(tmp_path: Path, old: str, new: str) -> tuple[int, dict[str, str], dict]:
    text = (DATA / "megatron_deepseek_v3_layout.sh").read_text()
    assert old in text
    return check_file(tmp_path / "dsv3.sh", text.replace(old, new), "--gpu", "h100-sxm",
                      by="message")


def test_a_layout_mistake_is_the_layout_error_alone(tmp_path: Path) -> None:
    """validate_args: 'The length of pipeline_model_parallel_layout must be divisible by
    pipeline_model_parallel_size'; with a layout it applies no even-split rule
    (its 'Number of layers should be divisible' runs only without one), so 61 blocks
    over pp 8 is no error of its own."""
    code, found, _ = _dsv3(tmp_path, '"Et|(tt|)*30mL"', '"Et|(tt|)*29ttmL"')  # 31 stages
    assert code == 1 and "31 stages where a multiple of pp = 8" in found["megatron-layout"]
    assert "layers-not-divisible" not in found and "megatron-layers-not-divisible" not in found
    # a layout pptune cannot resolve without running the script: no split rule either
    code, found, _ = _dsv3(tmp_path, '"Et|(tt|)*30mL"', '"$LAYOUT"')
    assert "megatron-layout-unresolved" in found and code == 0, found
    assert "layers-not-divisible" not in found


def test_first_and_last_stage_counts_replace_the_even_rule(tmp_path: Path) -> None:
    """validate_args applies 'Number of layers should be divisible by the
    pipeline-model-parallel size' only without --decoder-first/last-pipeline-num-layers;
    TransformerConfig.__post_init__ then checks the middle stages: 61 blocks minus 4 and
    4 leaves 53 for 6 middle stages."""
    code, found, _ = _dsv3(tmp_path, '--pipeline-model-parallel-layout "Et|(tt|)*30mL"',
                           "--decoder-first-pipeline-num-layers 4 "
                           "--decoder-last-pipeline-num-layers 4")
    assert code == 1
    assert ("number of layers at middle stage: 53 must be divisible by the middle pipeline "
            "model parallel size 6") in found["megatron-uneven-split"]
    assert "layers-not-divisible" not in found
    # 61 - 7 - 6 = 48 over 6 middle stages: megatron-core builds 7, 8 x 6, 6
    code, found, doc = _dsv3(tmp_path, '--pipeline-model-parallel-layout "Et|(tt|)*30mL"',
                             "--decoder-first-pipeline-num-layers 7 "
                             "--decoder-last-pipeline-num-layers 6")
    assert "layers-not-divisible" not in found and "megatron-uneven-split" not in found
    assert doc["config"]["stage_layers"] == [7, 8, 8, 8, 8, 8, 8, 6]


def test_middle_ranks_split_by_the_virtual_stages() -> None:
    """TransformerConfig.__post_init__, uneven pipeline: the middle layers divide over the
    middle ranks, each rank's share over vpp, and the middle stages exist exactly when
    layers remain for them."""
    assert megatron_blocks(MegatronSplit(32, 4, 2, 6, 6)) == [3, 5, 5, 3, 3, 5, 5, 3]
    cases = {
        # 34 - 12 = 22 over 2 middle ranks: 11 a rank, not divisible by vpp 2
        MegatronSplit(34, 4, 2, 6, 6): "number of layers on each middle pipeline rank: 11 "
        "must be divisible by virtual pipeline parallel degree 2",
        MegatronSplit(33, 4, 1, 6, 6): "number of layers at middle stage: 21 must be "
        "divisible by the middle pipeline model parallel size 2",
        MegatronSplit(12, 2, 1, 6, 4): "'Mismatch: 2 middle layers remaining but 0 middle PP "
        "stages available.'",
        MegatronSplit(8, 4, 1, 6, 6): "the first and last stages hold more layers than the "
        "model has",
    }
    for split, said in cases.items():
        with pytest.raises(FrameworkRefusal, match="megatron-core") as err:
            megatron_blocks(split)
        assert said in str(err.value) and err.value.rule_id == "megatron-uneven-split"


def test_uneven_vpp_middle_refusal_through_check_config(tmp_path: Path) -> None:
    """The same rule on a script: 34 blocks, pp 4, vpp 2, first and last 6."""
    text = DENSE.format(tp=1, extra="--pipeline-model-parallel-size 4 "
                        "--num-virtual-stages-per-pipeline-rank 2 "
                        "--decoder-first-pipeline-num-layers 6 "
                        "--decoder-last-pipeline-num-layers 6")
    code, found, _ = check_file(tmp_path / "run.sh", text.replace(
        "--num-layers 32", "--num-layers 34"), "--gpu", "h100-sxm", by="message")
    assert code == 1
    assert "must be divisible by virtual pipeline parallel degree 2" in \
        found["megatron-uneven-split"]
    assert "layers-not-divisible" not in found


# --- --tp-comm-overlap ------------------------------------------------------------------


def test_tp_comm_overlap_needs_sequence_parallelism(tmp_path: Path) -> None:
    """validate_args sets sequence_parallel False at tp 1, then asserts 'Tensor parallel
    communication/GEMM overlap can happen only when sequence parallelism is enabled'."""
    code, found, _ = dense(tmp_path, "--tp-comm-overlap")
    assert code == 1 and found["megatron-tp-comm-overlap"] == "error"
    code, found, _ = dense(tmp_path, "--sequence-parallel --tp-comm-overlap", tp=1)
    assert code == 1 and found["megatron-tp-comm-overlap"] == "error"
    code, found, doc = dense(tmp_path, "--sequence-parallel --tp-comm-overlap")
    assert "error" not in found.values(), found
    assert doc["config"]["tp_comm_overlap"] is True


def test_tp_comm_overlap_is_priced_as_recommend_prices_it(tmp_path: Path) -> None:
    """Transformer Engine's userbuffers overlap hides TP collectives behind their GEMMs:
    the step is shorter than with them exposed; under --transformer-impl local (whose
    linear layers overlap nothing: only extensions/transformer_engine.py reads
    tp_comm_overlap) it is a warning and the step is the exposed one."""
    _c, _f, exposed = dense(tmp_path, "--sequence-parallel")
    _c, _f, hidden = dense(tmp_path, "--sequence-parallel --tp-comm-overlap")
    assert hidden["derived"]["step_time_s"] < exposed["derived"]["step_time_s"]
    _c, _f, local = dense(tmp_path, "--sequence-parallel --transformer-impl local")
    _c, found, local_overlap = dense(tmp_path, "--sequence-parallel --transformer-impl local "
                                     "--tp-comm-overlap")
    assert found["megatron-tp-comm-overlap-local"] == "warning"
    assert local_overlap["config"]["tp_comm_overlap"] is False
    assert local_overlap["derived"]["step_time_s"] == local["derived"]["step_time_s"]


# --- --max-position-embeddings ----------------------------------------------------------


def test_max_position_embeddings_is_read_and_checked(tmp_path: Path) -> None:
    """validate_args asserts 'max_position_embeddings (2048) must be greater than or
    equal to seq_length (4096).'; the flag is read, not listed as ignored."""
    text = DENSE.format(tp=2, extra="--sequence-parallel")
    code, found, doc = check_file(tmp_path / "run.sh", text, "--gpu", "h100-sxm")
    assert "megatron-max-position" not in found and "--max-position-embeddings" not in doc[
        "ignored"]
    code, found, _ = check_file(tmp_path / "run.sh", text.replace(
        "--max-position-embeddings 4096", "--max-position-embeddings 2048"), "--gpu",
        "h100-sxm", by="message")
    assert code == 1
    assert ("'max_position_embeddings (2048) must be greater than or equal to seq_length "
            "(4096)'") in found["megatron-max-position"]


def test_max_position_embeddings_is_a_required_argument(tmp_path: Path) -> None:
    """validate_args checks its required arguments first: 'max_position_embeddings
    argument is None'. Unless the words it could come from are out of sight: the
    script's own arguments ("$@"), an unresolved variable where a flag would be, a
    checkpoint's arguments, a --yaml-cfg, or a file of arguments with no launch."""
    text = DENSE.format(tp=2, extra="--sequence-parallel").replace(
        "--max-position-embeddings 4096 ", "")
    code, found, _ = check_file(tmp_path / "run.sh", text, "--gpu", "h100-sxm", by="message")
    assert code == 1
    assert "'max_position_embeddings argument is None'" in found["megatron-max-position"]
    assert "add --max-position-embeddings 4096" in found["megatron-max-position"]
    for more in ('"$@"', "$EXTRA_ARGS", "--use-checkpoint-args"):
        _, found, _ = check_file(tmp_path / "run.sh", text.rstrip()
                                 + f" {more}\n", "--gpu", "h100-sxm")
        assert "megatron-max-position" not in found, more
    # a flag's unresolved value is that flag's, not more flags
    _, found, _ = check_file(tmp_path / "run.sh", text.replace(
        "--micro-batch-size 1", "--micro-batch-size 1 --lr $LR"), "--gpu", "h100-sxm")
    assert "megatron-max-position" in found
    held = "MODEL_ARGS=\" \\\n  " + text.split("pretrain_gpt.py ")[1].strip() + "\"\n"
    _, found, _ = check_file(tmp_path / "conf.sh", held, "--gpus", "8", "--gpu", "h100-sxm")
    assert "megatron-max-position" not in found


def test_one_ignored_flag_is_one_flag(tmp_path: Path) -> None:
    _c, _f, doc = dense(tmp_path, "--sequence-parallel --rotary-base 500000")
    assert "ignored 1 other flag: --rotary-base" in doc["notes"]
    _c, _f, doc = dense(tmp_path, "--sequence-parallel --rotary-base 500000 --train-iters 9")
    assert "ignored 2 other flags: --rotary-base, --train-iters" in doc["notes"]
