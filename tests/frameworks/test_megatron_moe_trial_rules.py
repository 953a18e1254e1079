"""What a Megatron-LM MoE engineer's trial found in check-config, each against the
Megatron-LM core_v0.16.1 / megatron-core 0.16.1 source it re-states:
CUDA_DEVICE_MAX_CONNECTIONS per GPU generation and beside the expert all-to-all overlap
(validate_args), --delay-wgrad-compute and CUDA graph scopes with the overlap
(TransformerConfig.__post_init__), a refused layout reported alone, srun launches,
and memory advice that lists only the steps a script has not taken."""

from __future__ import annotations

from pathlib import Path

from pptune.frameworks.common.fields import Ctx
from tests.check_json import check_file

DATA = Path(__file__).resolve().parents[1] / "data" / "configs"
QWEN = (DATA / "megatron_qwen3_235b_srun.sh").read_text()
DSV3 = (DATA / "megatron_deepseek_v3_h100_overlap.sh").read_text()
OVERLAP = "    --overlap-moe-expert-parallel-comm\n"
DELAY = "    --delay-wgrad-compute\n"


def qwen(tmp_path: Path, gpu: str, *edits: tuple[str, str]) -> tuple[int, dict[str, str],
                                                                     dict]:
    text = QWEN
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    return check_file(tmp_path / "qwen.sh", text, "--gpu", gpu, by="message")


def dsv3(tmp_path: Path, *edits: tuple[str, str], gpu: str = "h100-sxm"
         ) -> tuple[int, dict[str, str], dict]:
    text = DSV3
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new)
    return check_file(tmp_path / "dsv3.sh", text, "--gpu", gpu, by="message")


def severity(doc: dict, rule: str) -> list[str]:
    return [f["severity"] for f in doc["findings"] if f["id"] == rule]


# --- CUDA_DEVICE_MAX_CONNECTIONS ----------------------------------------------------------


def test_the_overlap_makes_max_connections_a_warning_before_blackwell_only(
        tmp_path: Path) -> None:
    """validate_args (tp or cp > 1, get_device_arch_version() < 10): with
    overlap_moe_expert_parallel_comm it warns 'For Hopper and before, try not to use
    tensor model parallelism or context parallelism with overlap_moe_expert_parallel_comm'
    instead of asserting 1; from Blackwell on it checks nothing."""
    code, found, doc = qwen(tmp_path, "h200")
    assert code == 0 and severity(doc, "megatron-cuda-connections") == ["warning"]
    assert "For Hopper and before" in found["megatron-cuda-connections"]
    assert "asserts" not in found["megatron-cuda-connections"]
    code, found, _ = qwen(tmp_path, "b200")
    assert code == 0 and "megatron-cuda-connections" not in found


def test_without_the_overlap_max_connections_must_be_1_before_blackwell(tmp_path: Path) -> None:
    """validate_args asserts 'Using tensor model parallelism or context parallelism require
    setting the environment variable CUDA_DEVICE_MAX_CONNECTIONS to 1' on GPUs before
    Blackwell: the script's 32 is an error on an H200, nothing on a B200; unset, a warning
    (the job's environment may set it)."""
    plain = ((OVERLAP, ""), (DELAY, ""))
    code, found, doc = qwen(tmp_path, "h200", *plain)
    assert code == 1 and severity(doc, "megatron-cuda-connections") == ["error"]
    assert "CUDA_DEVICE_MAX_CONNECTIONS=32 in the script with tp 2" in found[
        "megatron-cuda-connections"]
    _, found, _ = qwen(tmp_path, "b200", *plain)
    assert "megatron-cuda-connections" not in found
    one = ("export CUDA_DEVICE_MAX_CONNECTIONS=32", "export CUDA_DEVICE_MAX_CONNECTIONS=1")
    _, found, _ = qwen(tmp_path, "h200", *plain, one)
    assert "megatron-cuda-connections" not in found
    unset = ("export CUDA_DEVICE_MAX_CONNECTIONS=32", "")
    _, _, doc = qwen(tmp_path, "h200", *plain, unset)
    assert severity(doc, "megatron-cuda-connections") == ["warning"]


def test_one_connection_beside_the_overlap_is_a_warning_on_any_gpu(tmp_path: Path) -> None:
    """megatron-core's MoE README: 'Requirements for EP A2A Overlap:
    expert_model_parallel_size > 1, CUDA_DEVICE_MAX_CONNECTIONS > 1'; pptune prices the
    all-to-alls as overlapped."""
    one = ("export CUDA_DEVICE_MAX_CONNECTIONS=32", "export CUDA_DEVICE_MAX_CONNECTIONS=1")
    code, found, doc = qwen(tmp_path, "b200", one)
    assert code == 0 and severity(doc, "megatron-cuda-connections") == ["warning"]
    assert "'CUDA_DEVICE_MAX_CONNECTIONS > 1'" in found["megatron-cuda-connections"]


# --- --delay-wgrad-compute and CUDA graphs ------------------------------------------------


def test_delayed_weight_gradients_need_the_overlap(tmp_path: Path) -> None:
    """transformer_config.py __post_init__: 'overlap_moe_expert_parallel_comm must be
    enabled when enabling delay_wgrad_compute'; 'delay_wgrad_compute is not supported with
    legacy groupedgemm implementation'; validate_args: 'Delaying wgrad compute is only
    supported with transformer_engine implementation'."""
    code, found, _ = qwen(tmp_path, "b200", (OVERLAP, ""))
    assert code == 1
    assert ("'overlap_moe_expert_parallel_comm must be enabled when enabling "
            "delay_wgrad_compute'") in found["megatron-delay-wgrad"]
    _, found, _ = qwen(tmp_path, "b200", (DELAY, DELAY + "    --moe-use-legacy-grouped-gemm\n"))
    assert "legacy groupedgemm" in found["megatron-delay-wgrad"]
    _, found, _ = qwen(tmp_path, "b200", ("--transformer-impl transformer_engine",
                                          "--transformer-impl local"))
    assert "'Delaying wgrad compute is only supported with transformer_engine" in found[
        "megatron-delay-wgrad"]


def test_delayed_weight_gradients_are_read_and_their_absence_is_said(tmp_path: Path) -> None:
    """With the overlap the flag is the order pptune prices the F&B pairs in (a note, not
    an ignored flag); the overlap without it leaves the dispatch all-to-all's backward
    waiting for the experts' weight gradients, which pptune does not model: a warning."""
    _, found, doc = qwen(tmp_path, "b200")
    assert "--delay-wgrad-compute" not in doc["ignored"]
    assert any(n.startswith("--delay-wgrad-compute: priced within the F&B pairs")
               for n in doc["notes"])
    assert "megatron-unmodelled-flag" not in found
    code, found, _ = qwen(tmp_path, "b200", (DELAY, ""))
    assert code == 0
    assert found["megatron-unmodelled-flag"].startswith(
        "--overlap-moe-expert-parallel-comm without --delay-wgrad-compute")


def test_moe_cuda_graphs_beside_the_overlap_are_refused(tmp_path: Path) -> None:
    """transformer_config.py __post_init__, with overlap_moe_expert_parallel_comm: 'CUDA
    graph scope on moe and mlp is not supported with overlap_moe_expert_parallel_comm';
    and, whatever the overlap, 'moe cuda graph is only supported with drop-padding MoE.'"""
    graphs = ("    --cross-entropy-loss-fusion \\\n", "    --cross-entropy-loss-fusion \\\n"
              "    --cuda-graph-impl transformer_engine \\\n    --cuda-graph-scope attn moe \\\n")
    code, _, doc = dsv3(tmp_path, graphs)
    said = [f["message"] for f in doc["findings"] if f["id"] == "megatron-cuda-graph"]
    assert code == 1 and len(said) == 2
    assert any("'CUDA graph scope on moe and mlp is not supported with "
               "overlap_moe_expert_parallel_comm'" in m for m in said)
    assert any("'moe cuda graph is only supported with drop-padding MoE.'" in m for m in said)
    attention = (graphs[0], graphs[1].replace("attn moe", "attn"))
    _, found, doc = dsv3(tmp_path, attention)
    assert "megatron-cuda-graph" not in found
    assert "CUDA graphs are not modelled" in found["megatron-unmodelled-flag"]
    local = (graphs[0], graphs[1].replace("transformer_engine", "local").replace(
        "attn moe", "attn"))
    _, _, doc = dsv3(tmp_path, local)
    said = [f["message"] for f in doc["findings"] if f["id"] == "megatron-cuda-graph"]
    assert any("transformer_engine graphs only" in m for m in said)
    assert any("'--moe-pad-experts-for-cuda-graph-inference must be set" in m for m in said)


def test_an_unknown_cuda_graph_scope_is_bad_input(tmp_path: Path) -> None:
    """argparse: --cuda-graph-scope takes CudaGraphScope names (or full)."""
    from typer.testing import CliRunner

    from pptune.cli.app import app

    path = tmp_path / "bad.sh"
    path.write_text(DSV3.replace("    --cross-entropy-loss-fusion \\\n",
                                 "    --cross-entropy-loss-fusion \\\n    --cuda-graph-impl "
                                 "transformer_engine \\\n    --cuda-graph-scope attention \\\n"))
    r = CliRunner().invoke(app, ["check-config", str(path), "--gpu", "h100-sxm"])
    assert r.exit_code == 2 and "--cuda-graph-scope 'attention' is no scope" in r.stderr


# --- a refused layout -----------------------------------------------------------------


def test_a_refused_layout_does_not_also_claim_no_virtual_pipeline(tmp_path: Path) -> None:
    """validate_args derives the virtual stages from the layout's stage count before
    TransformerConfig validates the layout: 32 stages over pp 8 are 4 virtual stages
    whatever else is wrong; 31 stop validate_args there. Either way the overlap's
    'virtual_pipeline_model_parallel_size must be specified' is not the problem."""
    layout = '"Et|(tt|)*30mL"'
    code, found, _ = dsv3(tmp_path, (layout, '"Et|(tt|)*30mLL"'))
    assert code == 1 and set(found) >= {"megatron-layout"}
    assert "megatron-a2a-overlap" not in found
    code, found, _ = dsv3(tmp_path, (layout, '"Et|(tt|)*29mL"'))
    assert code == 1 and "31 stages where a multiple of pp = 8" in found["megatron-layout"]
    assert "megatron-a2a-overlap" not in found
    # 8 stages, one a rank, refused for its second L: the overlap's rule stands
    _, found, _ = dsv3(tmp_path, (layout, '"Et*8|(t*7|)*6t*11mLL"'))
    assert {"megatron-layout", "megatron-a2a-overlap"} <= set(found)


# --- srun ---------------------------------------------------------------------------


def test_an_srun_launch_states_the_gpu_count(tmp_path: Path) -> None:
    """Megatron-LM takes its world size from the environment: under srun, the job
    step's tasks, 32 nodes x 8 here (256 GPUs: dp 16 at tp 2, pp 8), not an assumed dp."""
    _code, found, doc = qwen(tmp_path, "b200")
    assert doc["derived"]["dp"] == 16 and doc["config"]["gpus"] == 256
    assert doc["config"]["gpus_per_node"] == 8 and "dp-assumed" not in found
    srun = "srun --nodes=32 --ntasks-per-node=8 --gpus-per-node=8 "
    batch = ("#!/bin/bash\n", "#!/bin/bash\n#SBATCH --nodes=32\n#SBATCH --ntasks-per-node=8\n")
    _, found, doc = qwen(tmp_path, "b200", batch, (srun, "srun "))
    assert doc["config"]["gpus"] == 256 and "dp-assumed" not in found


def _srun(text: str, *launcher: str) -> tuple[dict | None, Ctx]:
    from pptune.frameworks.megatron.slurm import srun_launch

    ctx = Ctx(name="run.sh")
    return srun_launch(text, list(launcher), ctx), ctx


def test_srun_options_over_sbatch_lines() -> None:
    """srun(1)/sbatch(1): srun's own options win over the allocation's; -N and -n are
    --nodes and --ntasks; one task a node unless said; #SBATCH lines count only before
    the first command; a torchrun under srun states the shape itself."""
    header = "#!/bin/bash\n#SBATCH --nodes=16\n#SBATCH --ntasks-per-node=8\nset -e\n"
    assert _srun(header, "srun", "python")[0] == {"gpus": 128, "gpus_per_node": 8}
    assert _srun(header, "srun", "--nodes=32", "python")[0] == {"gpus": 256,
                                                               "gpus_per_node": 8}
    assert _srun("", "srun", "-N", "4", "--ntasks-per-node", "8", "python")[0] == {
        "gpus": 32, "gpus_per_node": 8}
    assert _srun("", "srun", "-N4", "-n32", "python")[0] == {"gpus": 32, "gpus_per_node": 8}
    assert _srun("", "srun", "--ntasks=24", "python")[0] == {"gpus": 24}
    shape, ctx = _srun("", "srun", "--nodes=2", "--gpus-per-node=8", "python")
    assert shape == {"gpus": 2} and any("one task a node" in n for n in ctx.notes)
    late = "#!/bin/bash\nset -e\n#SBATCH --nodes=16\n"
    assert _srun(late, "srun", "python")[0] == {}
    assert _srun(header, "srun", "torchrun", "--nnodes", "2")[0] is None
    assert _srun(header, "torchrun", "--nnodes", "2")[0] is None


def test_an_srun_node_range_leaves_the_count_to_the_user(tmp_path: Path) -> None:
    """--nodes=16-32: Slurm allocates 16 to 32 nodes; the GPU count is not known."""
    shape, ctx = _srun("", "srun", "--nodes=16-32", "--ntasks-per-node=8", "python")
    assert shape == {} and any("is a range" in n for n in ctx.notes)
    assert _srun("", "srun", "--nodes=32-32", "--ntasks-per-node=8", "python")[0] == {
        "gpus": 256, "gpus_per_node": 8}
    _, found, _ = qwen(tmp_path, "b200", ("--nodes=32", "--nodes=16-32"))
    assert "dp-assumed" in found


# --- memory advice --------------------------------------------------------------------


def test_memory_advice_lists_only_steps_the_script_has_not_taken(tmp_path: Path) -> None:
    """DeepSeek-V3 on H100s overflows (83.55 GiB on rank 1 of 79.65 GiB); the script
    already runs the distributed optimizer and selective recomputation, and
    megatron-core refuses full recomputation beside the overlap ('disable full
    recomputation when enabling overlap_moe_expert_parallel_comm'): Megatron-FSDP and
    the modules it does not recompute yet are what is left."""
    code, found, _doc = dsv3(tmp_path)
    assert code == 1
    advice = found["memory-overflow"].split("; ", 1)[1]
    assert advice == (
        "use more pipeline stages (--pipeline-model-parallel-size), Megatron-FSDP "
        "(--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params) or more "
        "--recompute-modules (mlp, moe, shared_experts)")


def test_recomputation_advice_follows_the_overlap() -> None:
    """Without the overlap a selective script is offered full recomputation too; with it
    and no recomputation, selective recomputation of the modules megatron-core accepts."""
    from pptune.frameworks.megatron.adapter import ADAPTER
    from pptune.frameworks.megatron.advice import memory_fix_clauses
    from pptune.schemas import TrainingConfig

    base = dict(pp=8, micro_batch_size=1, num_experts=64, moe_top_k=8, moe_grouped_gemm=True,
                source_format="megatron")
    selective = TrainingConfig(**base, recompute="selective", recompute_modules=["moe_act"])
    assert memory_fix_clauses(selective, ADAPTER.memory_fixes)[2] == (
        "full recomputation (--recompute-granularity full --recompute-method uniform "
        "--recompute-num-layers 1) or more --recompute-modules (layernorm, moe)")
    overlap = TrainingConfig(**base, recompute="none", a2a_overlap=True)
    assert memory_fix_clauses(overlap, ADAPTER.memory_fixes)[2] == (
        "selective recomputation (--recompute-granularity selective --recompute-modules "
        "moe_act layernorm moe; full recomputation is refused with "
        "--overlap-moe-expert-parallel-comm)")
    plain = TrainingConfig(**base, recompute="none", sharded_optimizer=False)
    _stages, shard, recompute, _micro = memory_fix_clauses(plain, ADAPTER.memory_fixes)
    assert (shard, recompute) == ADAPTER.memory_fixes[1:3]


# --- --output github -----------------------------------------------------------------


def test_github_annotations_point_at_the_flag(tmp_path: Path) -> None:
    """GitHub's workflow command ``::error file=F,line=N,title=T::message`` shows the
    annotation on line N: the line of the flag the finding names."""
    from typer.testing import CliRunner

    from pptune.cli.app import app

    path = tmp_path / "qwen.sh"
    text = QWEN.replace(OVERLAP, "")
    path.write_text(text)
    r = CliRunner().invoke(app, ["check-config", str(path), "--gpu", "h200", "--output",
                                 "github", "--no-compare"])
    line = text.splitlines().index(DELAY.rstrip("\n")) + 1
    export = text.splitlines().index("export CUDA_DEVICE_MAX_CONNECTIONS=32") + 1
    assert f"::error file={path},line={line},title=pptune megatron-delay-wgrad::" in r.stdout
    assert (f"::error file={path},line={export},title=pptune megatron-cuda-connections::"
            in r.stdout)
    assert f"::notice file={path},title=pptune prediction-skipped::" in r.stdout


def test_an_annotation_line_is_that_of_a_flag_or_an_environment_variable() -> None:
    """A script's own short variables (TP=2, EP=64) are not the "EP" of a message that
    quotes megatron-core ('If enabling EP A2A overlap')."""
    from pptune.check.render import finding_line

    lines = {"--overlap-moe-expert-parallel-comm": 40, "EP": 14,
             "CUDA_DEVICE_MAX_CONNECTIONS": 5}
    assert finding_line("--overlap-moe-expert-parallel-comm with pp 8: megatron-core asserts "
                        "'If enabling EP A2A overlap'", lines) == 40
    assert finding_line("megatron-core asserts 'If enabling EP A2A overlap'", lines) is None
    assert finding_line("CUDA_DEVICE_MAX_CONNECTIONS=32 in the script", lines) == 5


def test_the_overlaps_no_connection_count_serves_are_named() -> None:
    from pptune.frameworks.megatron.rules import contested_connections

    # the expert all-to-all overlap wants more than one connection; context parallelism
    # and overlapped tensor-parallel collectives want 1 before Blackwell
    assert contested_connections(1, 2, True, "h800", False)
    assert contested_connections(2, 1, True, "h100-sxm", True)
    assert contested_connections(1, 2, True, None, False)  # no preset: before Blackwell
    assert not contested_connections(2, 1, True, "h100-sxm", False)  # collectives exposed
    assert not contested_connections(1, 2, False, "h800", False)  # no expert overlap
    assert not contested_connections(1, 2, True, "gb200", False)  # Blackwell checks nothing


def test_a_finding_that_names_its_sizes_not_a_flag_is_on_the_sizes_flag_line() -> None:
    """moe-world says "ep x etp = 24 x 1" of a script that set --expert-model-parallel-size:
    the annotation goes on that flag's line."""
    from pptune.check.render import finding_line
    from pptune.frameworks.megatron.adapter import MegatronAdapter

    lines = {"--expert-model-parallel-size": 31, "--tensor-model-parallel-size": 20}
    message = "ep x etp = 24 x 1 = 24 does not divide the 128 ranks of a pipeline stage"
    flags = MegatronAdapter.size_flags
    assert finding_line(message, lines, {"ep": 24, "etp": 1}, flags) == 31
    assert finding_line(message, lines, {"stage_ranks": 128}, flags) is None
    assert finding_line(message, lines) is None  # no sizes given: as before
