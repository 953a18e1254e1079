"""torchtitan 0.2.2's quantization converters: which parts of a model run FP8
(frameworks/torchtitan/converters.py), from a B200/GB200 user trial's files.

``quantize.linear.float8`` swaps nn.Linear modules only; the routed experts' grouped
GEMMs run FP8 with ``quantize.grouped_mm.float8`` (``fqns = ["experts"]``), which
asserts pp 1 and cp 1 and whose FP8 grouped GEMM torch runs on SM90 only; torchao's
``rowwise_with_gw_hp`` runs the weight-gradient GEMMs in BF16.
"""

from __future__ import annotations

from pathlib import Path

from tests.check_json import check_file

DATA = Path(__file__).resolve().parents[1] / "data" / "configs"
QWEN3 = (DATA / "torchtitan_qwen3_fp8_both.toml").read_text()
BOTH = '["quantize.linear.float8", "quantize.grouped_mm.float8"]'
CONVERTERS = {"none": "[]", "lin": '["quantize.linear.float8"]',
              "gmm": '["quantize.grouped_mm.float8"]', "both": BOTH}


def qwen3(tmp_path: Path, which: str, gpu: str = "h200", text: str = QWEN3,
          *flags: str) -> tuple[int, dict[str, str], dict]:
    assert f"converters = {BOTH}" in text
    text = text.replace(f"converters = {BOTH}", f"converters = {CONVERTERS[which]}")
    return check_file(tmp_path / f"{which}.toml", text, "--gpus", "64", "--gpu", gpu, *flags)


def notes(doc: dict, part: str) -> list[str]:
    return [n for n in doc["notes"] if part in n]


def test_each_converter_prices_its_own_part(tmp_path: Path) -> None:
    """On an SM90 GPU: the linear converter alone leaves the experts BF16, the grouped one
    alone the linears; each is slower than both and faster than neither."""
    docs = {w: qwen3(tmp_path, w)[2] for w in CONVERTERS}
    config = {w: (d["config"]["precision"], d["config"]["expert_precision"])
              for w, d in docs.items()}
    assert config == {"none": (None, None), "lin": ("fp8", "bf16"),  # no precision stated
                      "gmm": (None, "fp8"), "both": ("fp8", None)}
    step = {w: d["derived"]["step_time_s"] for w, d in docs.items()}
    assert step["both"] < min(step["lin"], step["gmm"]) <= max(step["lin"], step["gmm"]) \
        < step["none"]
    assert docs["gmm"]["derived"]["cost_key"] == "tp1 ep8 bf16"  # the linears' precision
    (said,) = notes(docs["lin"], "routed experts BF16")
    assert "has no quantize.grouped_mm.float8" in said and 'fqns = ["experts"]' in said
    assert notes(docs["gmm"], "the routed experts run FP8, the linears")
    assert notes(docs["both"], "the linears and the routed experts' grouped GEMMs run FP8")
    assert not notes(docs["none"], "routed experts")


def test_fp8_grouped_gemms_do_not_run_on_blackwell(tmp_path: Path) -> None:
    """torch's FP8 rowwise grouped GEMM has SM90 kernels only: on a B200 a file that
    converts the experts is refused; the linear converter alone is priced with BF16
    experts, between the BF16 file and the SM90 file with both."""
    for which in ("gmm", "both"):
        code, found, doc = qwen3(tmp_path, which, "b200")
        assert code == 1 and found["torchtitan-float8-moe-sm90"] == "error"
        assert doc["derived"]["step_time_s"] is None
    code, found, lin = qwen3(tmp_path, "lin", "b200")
    assert code == 0 and "torchtitan-float8-moe-sm90" not in found
    _, _, none = qwen3(tmp_path, "none", "b200")
    assert lin["derived"]["step_time_s"] < none["derived"]["step_time_s"]


def test_grouped_converter_refusals(tmp_path: Path) -> None:
    piped = QWEN3.replace("expert_parallel_degree = 8",
                          "expert_parallel_degree = 8\ncontext_parallel_degree = 2")
    code, found, doc = qwen3(tmp_path, "gmm", "h200", piped)
    assert code == 1 and found["torchtitan-float8-moe"] == "error"
    assert any("does not yet support context parallelism" in f["message"]
               for f in doc["findings"])
    code, found, _ = qwen3(tmp_path, "gmm", "a100-80gb")
    assert code == 1 and found["precision-gpu"] == "error"
    mixed = QWEN3.replace(f"converters = {BOTH}",
                          'converters = ["quantize.linear.float8", "quantize.grouped_mm.mx"]')
    code, found, _ = check_file(tmp_path / "mixed.toml", mixed, "--gpus", "64", "--gpu", "b200")
    assert code == 1 and found["torchtitan-converter"] == "error"


def test_fqns_that_name_no_experts_leave_them_bf16(tmp_path: Path) -> None:
    """Float8GroupedMMConverter converts the modules whose name contains a target; fqns
    defaults to [] (none)."""
    _, _, none = qwen3(tmp_path, "none")
    for fqns in ("[]", '["attention"]'):
        text = QWEN3.replace('fqns = ["experts"]', f"fqns = {fqns}")
        _, found, doc = qwen3(tmp_path, "gmm", "h200", text)
        assert found["torchtitan-moe-fqns"] == "warning"
        assert doc["derived"]["step_time_s"] == none["derived"]["step_time_s"]
    text = QWEN3.replace('fqns = ["experts"]', 'fqns = ["moe"]')
    assert qwen3(tmp_path, "gmm", "h200", text)[2]["config"]["expert_precision"] == "fp8"


RECIPES = {"rowwise": 'recipe_name = "rowwise"', "tensorwise": "# tensorwise",
           "rowwise_with_gw_hp": 'recipe_name = "rowwise_with_gw_hp"'}


def test_rowwise_recipes_are_priced_and_said(tmp_path: Path) -> None:
    """torchao's rowwise casts move more bytes than tensorwise's; rowwise_with_gw_hp runs
    the weight-gradient GEMMs at the BF16 rate (still faster than BF16 throughout)."""
    text = (DATA / "torchtitan_llama3_70b_rowwise_128k.toml").read_text()
    assert RECIPES["rowwise"] in text
    step, said = {}, {}
    for recipe, line in RECIPES.items():
        code, _, doc = check_file(tmp_path / f"{recipe}.toml",
                                  text.replace(RECIPES["rowwise"], line), "--gpus", "64",
                                  "--gpu", "b200")
        assert code == 0, doc["findings"]
        step[recipe] = doc["derived"]["step_time_s"]
        said[recipe] = notes(doc, "recipe_name")
    bf16 = text.replace('converters = ["quantize.linear.float8"]', "converters = []")
    _, _, doc = check_file(tmp_path / "bf16.toml", bf16, "--gpus", "64", "--gpu", "b200")
    assert step["tensorwise"] < step["rowwise"] < step["rowwise_with_gw_hp"] \
        < doc["derived"]["step_time_s"]
    assert not said["tensorwise"] and "6 bytes an element" in said["rowwise"][0]
    assert "weight-gradient GEMMs run BF16" in said["rowwise_with_gw_hp"][0]


# --- a converter's table without the converter --------------------------------------

TP16 = (DATA / "torchtitan_llama3_70b_tp16.toml").read_text()
LINEAR = 'converters = ["quantize.linear.float8"]'


def test_a_float8_table_without_its_converter_is_a_warning(tmp_path: Path) -> None:
    """torchtitan builds one converter per name in [model] converters (protocols/
    model_converter.py), whatever tables the file has: a [quantize.linear.float8] that
    turns the FP8 all-gather on, with no converter naming it, trains BF16 (a user trial:
    priced BF16 without a word). The warning names the converter; priced as it runs."""
    assert LINEAR in TP16
    _, found, doc = check_file(tmp_path / "no.toml", TP16.replace(LINEAR, ""),
                                  "--gpu", "h100-sxm")
    assert found["torchtitan-converter-unlisted"] == "warning"
    (said,) = [f["message"] for f in doc["findings"]
               if f["id"] == "torchtitan-converter-unlisted"]
    assert said.startswith("[quantize.linear.float8] sets enable_fsdp_float8_all_gather, "
                           "precompute_float8_dynamic_scale_for_fsdp")
    assert 'converters = ["quantize.linear.float8"]' in said and "BF16" in said
    assert doc["config"]["precision"] is None and doc["config"]["fp8_param_gather"] is None
    _, listed, _ = check_file(tmp_path / "yes.toml", TP16, "--gpu", "h100-sxm")
    assert "torchtitan-converter-unlisted" not in listed


def test_torchtitans_own_bf16_tables_are_not_a_warning(tmp_path: Path) -> None:
    """torchtitan's reference configs keep a float8 table of defaults and filter_fqns with
    the converter commented out (train_configs/llama3_8b.toml): a BF16 run, no warning,
    a note that the table configures nothing; an experts table whose fqns name a module,
    unlisted, is a warning too."""
    defaults = TP16.replace(LINEAR, "").replace(
        "enable_fsdp_float8_all_gather = true\nprecompute_float8_dynamic_scale_for_fsdp = true",
        "enable_fsdp_float8_all_gather = false\nprecompute_float8_dynamic_scale_for_fsdp = false")
    _, found, doc = check_file(tmp_path / "stock.toml", defaults, "--gpu", "h100-sxm")
    assert "torchtitan-converter-unlisted" not in found
    assert notes(doc, "[quantize.linear.float8] configures nothing: [model] converters "
                      "does not name it")
    _, found, doc = qwen3(tmp_path, "lin")
    (said,) = [f["message"] for f in doc["findings"]
               if f["id"] == "torchtitan-converter-unlisted"]
    assert said.startswith("[quantize.grouped_mm.float8] sets fqns")
    assert "quantize.grouped_mm.float8" in said.split("converters")[1]


LEGACY = """[job]
dump_folder = "./outputs"

[model]
name = "llama3"
flavor = "8B"

[training]
local_batch_size = 2
global_batch_size = 64
seq_len = 131072

[parallelism]
data_parallel_shard_degree = 4
tensor_parallel_degree = 2
context_parallel_degree = 8

[activation_checkpoint]
mode = "full"

[float8]
enable_fsdp_float8_all_gather = true
precompute_float8_dynamic_scale_for_fsdp = true

[compile]
enable = true
"""


def test_unlisted_advice_names_the_releases_converter(tmp_path: Path) -> None:
    """A 0.2.2 file (its [compile] table is 0.2's) with 0.1's [float8] table and no
    converter (a user trial): the warning advised 0.1's ``float8``, which 0.2.2 does not
    register (pptune's own torchtitan-converter error). It names 0.2.2's converter and
    table; the file that follows it is read FP8 with neither the warning nor the error."""
    _, found, doc = check_file(tmp_path / "legacy.toml", LEGACY, "--gpu", "h200")
    assert found["torchtitan-converter-unlisted"] == "warning"
    (said,) = [f["message"] for f in doc["findings"]
               if f["id"] == "torchtitan-converter-unlisted"]
    assert said.endswith('set converters = ["quantize.linear.float8"] in [model] and name '
                         "the table [quantize.linear.float8]")
    followed = LEGACY.replace('flavor = "8B"', 'flavor = "8B"\nconverters = '
                              '["quantize.linear.float8"]').replace(
        "[float8]", "[quantize.linear.float8]")
    _, found, doc = check_file(tmp_path / "followed.toml", followed, "--gpu", "h200")
    assert "torchtitan-converter" not in found and "torchtitan-converter-unlisted" not in found
    assert doc["config"]["precision"] == "fp8"
