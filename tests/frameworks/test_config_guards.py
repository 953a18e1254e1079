"""Broken files: every problem is one BadInput line naming the file; never a traceback."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pptune.errors import BadInput
from pptune.frameworks.common.source import MAX_BYTES
from pptune.frameworks.read import read_config

DATA = Path(__file__).resolve().parent.parent / "data" / "configs"
DUMPS = DATA.parent / "torchtitan_main"  # torchtitan main's Trainer.Config dumps
FORMATS = [None, "pptune", "deepspeed", "megatron", "torchtitan"]


def bad(path: Path, *args: object, **kwargs: object) -> str:
    """The one-line message read_config raises for ``path``."""
    with pytest.raises(BadInput) as info:
        read_config(path, *args, **kwargs)  # type: ignore[arg-type]
    message = str(info.value)
    assert "\n" not in message and message
    return message


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    return path


# --- files that are not configs ----------------------------------------------------


def test_missing_file_directory_and_invalid_path(tmp_path: Path) -> None:
    assert bad(tmp_path / "nope.yaml") == (
        f"config file not found: {tmp_path / 'nope.yaml'} (no such file)")
    assert "is a directory" in bad(tmp_path)
    assert "the path is not valid" in bad(tmp_path / "a\x00b.yaml")
    (tmp_path / "dangling.yaml").symlink_to(tmp_path / "gone.yaml")  # a user trial's case
    assert bad(tmp_path / "dangling.yaml") == (
        f"config file not found: {tmp_path / 'dangling.yaml'} (a symbolic link to "
        f"{tmp_path / 'gone.yaml'}, which does not exist)")


def test_huge_file_is_refused_without_reading_it(tmp_path: Path) -> None:
    path = tmp_path / "huge.json"
    with path.open("wb") as fh:
        fh.truncate(100 * 1024 * 1024)  # sparse: instant to create
    message = bad(path)  # its size is checked before any byte is read
    assert message.endswith(f"huge.json is 100 MiB; pptune reads up to {MAX_BYTES >> 20} MiB")


@pytest.mark.parametrize(("content", "expected"), [
    (b"", "is empty"),
    (b"  \n\t\n", "is empty"),
    (b"\x7fELF\x02\x01\x01\x00\x00", "looks like a binary file (NUL byte at offset 7)"),
    (b"micro_batch_size: 1\nname: caf\xe9\n", "is not UTF-8 text (byte 0xe9 at offset 29)"),
    # a trailing comment's '#' could as well be inside quotes: refused too
    (b"micro_batch_size: 1  # caf\xe9\n", "is not UTF-8 text (byte 0xe9 at offset 26)"),
])
def test_empty_binary_and_non_utf8(tmp_path: Path, content: bytes, expected: str) -> None:
    assert expected in bad(write(tmp_path, "c.yaml", content))


def test_non_utf8_bytes_in_comment_lines_are_a_warning(tmp_path: Path) -> None:
    """bash runs a launch script with a Latin-1 comment (a user trial, u30): its bytes
    are read as U+FFFD and one warning names the first (offset 5 = len(b"# caf"), line
    1) and counts the rest (\\xe9 twice on line 3: 2 more)."""
    path = write(tmp_path, "run.sh", b"# caf\xe9\ntorchrun --nproc_per_node 8 pretrain_gpt.py "
                 b"--num-layers 32 --hidden-size 4096 --num-attention-heads 32 "
                 b"--seq-length 4096 --max-position-embeddings 4096 --micro-batch-size 1 "
                 b"--global-batch-size 64 --bf16\n  # \xe9t\xe9\n")
    read = read_config(path)
    assert read.config.num_layers == 32
    assert [(f.id, f.severity, f.message) for f in read.semantics.findings
            if f.id == "not-utf8-comment"] == [(
                "not-utf8-comment", "warning", "byte 0xe9 at offset 5 (line 1) and 2 more is "
                "not UTF-8, in comment lines only: read as U+FFFD, which changes nothing "
                "pptune reads; save the file as UTF-8")]


def test_utf8_bom_is_accepted(tmp_path: Path) -> None:
    path = write(tmp_path, "c.yaml", "\ufeffmicro_batch_size: 3\n".encode())
    assert read_config(path).config.micro_batch_size == 3


@pytest.mark.parametrize(("name", "content", "expected"), [
    ("deep.json", "[" * 100_000 + "]" * 100_000, "more than 32 levels deep"),
    ("deep.yaml", "a:\n" + "".join("  " * i + f"k{i}:\n" for i in range(1, 60)) + "  " * 60
     + "1\n", "more than 32 levels deep"),
    ("deep.toml", "micro_batch_size = 1\nx = " + "[" * 3000 + "]" * 3000, "levels deep"),
    ("bomb.yaml", "a: &a [x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a]\n"
     "c: [*b, *b, *b, *b, *b, *b]\nmicro_batch_size: 1\n", "line 2: YAML alias *a is not supported"),
    ("merge.yaml", "base: &base {pp: 2}\nrun:\n  <<: *base\n", "YAML alias *base"),
    ("digits.json", '{"train_batch_size": ' + "9" * 5000 + "}", "a number with thousands of digits"),
    ("list.json", "[1, 2, 3]", "the top level is a list; expected a JSON mapping"),
    ("list.yaml", "- pp: 2\n- pp: 4\n", "the top level is a list"),
    ("broken.json", '{"train_batch_size": 8,', "is not valid JSON"),
    ("broken.yaml", "pp: 4\nmicro_batch_size: [1\n", "is not valid YAML"),
    ("two.yaml", "pp: 4\n---\npp: 2\n", "expected a single document"),
])
def test_structural_problems(tmp_path: Path, name: str, content: str, expected: str) -> None:
    message = bad(write(tmp_path, name, content))
    assert expected in message and str(tmp_path / name) in message


# --- values that cannot be represented -----------------------------------------------


@pytest.mark.parametrize(("content", "expected"), [
    ("pp: -3\nmicro_batch_size: 1\n", "pp is -3: Input should be greater than or equal to 1"),
    ("micro_batch_size: 0\n", "micro_batch_size is 0: Input should be greater than or equal to 1"),
    ("micro_batch_size: 1\ngpus: 1000000000000000000000000000000\n", "gpus must be <= 131,072 (got a 31-digit number): pptune's cap"),
    ('pp: "4"\nmicro_batch_size: 1\n', "pp is '4': Input should be a valid integer"),
    ("pp: 4.0\nmicro_batch_size: 1\n", "pp is 4.0: Input should be a valid integer"),
    ("pp: true\nmicro_batch_size: 1\n", "pp is true: Input should be a valid integer"),
    ("micro_batch_size: 1\nlimits: {max_bubble: '0.2'}\n", "limits.max_bubble is '0.2'"),
    ("micro_batch_size: 1\nmicro_batchsize: 2\n",
     "unknown key 'micro_batchsize' (did you mean micro_batch_size?)"),
    ("micro_batch_size: 1\nlimits: {max_buble: 0.2}\n",
     "unknown key 'limits.max_buble' (did you mean max_bubble?)"),
    ("micro_batch_size: 1\nschedule: 2f2b\n",
     "schedule '2f2b' is unknown; expected one of gpipe, 1f1b, interleaved-1f1b, zb-h1, zbv"),
    ("micro_batch_size: 1\nmodel: llama-8b\n", "model 'llama-8b' is not a preset; expected one of"),
    ("pp: 4\n", "micro_batch_size is missing"),
    ("micro_batch_size: 1\n8: 2\n", "key 8 is not a name; expected keys such as micro_batch_size"),
])
def test_pptune_values(tmp_path: Path, content: str, expected: str) -> None:
    assert expected in bad(write(tmp_path, "c.yaml", content))


def test_pptune_reports_every_problem_at_once(tmp_path: Path) -> None:
    message = bad(write(tmp_path, "c.yaml", "pp: 0\ntp: -1\nmicro_batch_size: 1\nfoo: 1\n"))
    assert "pp is 0" in message and "tp is -1" in message and "unknown key 'foo'" in message


@pytest.mark.parametrize(("config", "expected"), [
    ({"train_batch_size": 64, "train_micro_batch_size_per_gpu": 0},
     "train_micro_batch_size_per_gpu is 0; expected a whole number from 1"),
    ({"train_batch_size": "64", "train_micro_batch_size_per_gpu": 1},
     "train_batch_size is '64' (a string); expected a whole number >= 1"),
    ({"train_batch_size": 64.0, "train_micro_batch_size_per_gpu": 1},
     "train_batch_size is 64.0 (a decimal number)"),
    ({"train_micro_batch_size_per_gpu": 1, "zero_optimization": {"stage": 4}},
     "zero_optimization.stage is 4; expected a whole number from 0 to 3"),
    ({"train_micro_batch_size_per_gpu": 1, "zero_optimization": 2},
     "zero_optimization is 2; expected a mapping"),
    ({"train_micro_batch_size_per_gpu": 1, "pipeline": {"stages": -2}},
     "pipeline.stages is -2"),
    ({"train_micro_batch_size_per_gpu": 1, "pipeline": {"partition": 3}},
     "pipeline.partition is 3; expected a method name"),
    ({"train_micro_batch_size_per_gpu": 1, "bf16": {"enabled": "yes"}},
     "bf16.enabled is 'yes'; expected true, false or \"auto\""),
])
def test_deepspeed_values(tmp_path: Path, config: dict, expected: str) -> None:
    assert expected in bad(write(tmp_path, "ds.json", json.dumps(config)))


@pytest.mark.parametrize(("args", "expected"), [
    ("--micro-batch-size 1 --pipeline-model-parallel-size -3",
     "--pipeline-model-parallel-size is -3; expected a whole number from 1"),
    ("--micro-batch-size 0", "--micro-batch-size is 0"),
    ("--micro-batch-size four", "--micro-batch-size is 'four'; expected a whole number"),
    ("--micro-batch-size 1 --global-batch-size 1000000000000000000000000000000",
     "--global-batch-size is a 31-digit number"),
    ("--global-batch-size 64", "--micro-batch-size is missing or unresolved"),
    ("--micro-batch-size $MBS", "--micro-batch-size is missing or unresolved"),
    ("--micro-batch-size 1 --recompute-granularity most", "expected full or selective"),
    ("--micro-batch-size 1 --num-layers --hidden-size 8", "--num-layers has no value"),
])
def test_megatron_values(tmp_path: Path, args: str, expected: str) -> None:
    assert expected in bad(write(tmp_path, "run.sh", f"python pretrain_gpt.py {args}\n"))


def test_megatron_script_without_arguments(tmp_path: Path) -> None:
    path = write(tmp_path, "run.sh", "#!/bin/bash\necho hello\nls -l\n")
    assert "found no Megatron-LM arguments" in bad(path, "megatron")


@pytest.mark.parametrize(("script", "expected"), [
    ("A=x\n" + 'A="$A$A"\n' * 40 + "python pretrain_gpt.py --micro-batch-size 1\n",
     "shell variable A grows past 100000 characters"),
    ("A=(x)\n" + 'A=("${A[@]}" "${A[@]}")\n' * 40 + "python pretrain_gpt.py\n",
     "shell array A grows past"),
    ("X=" + "${A:-" * 40 + "1" + "}" * 40 + "\npython pretrain_gpt.py --micro-batch-size $X\n",
     "nests ${...} or $((...)) more than 16 deep"),
])
def test_shell_expansion_bombs_are_refused_quickly(tmp_path: Path, script: str,
                                                   expected: str) -> None:
    # A hang guard, not a speed measurement: an unguarded bomb runs for hours
    # (2**40 words); refusing it takes milliseconds even on a loaded machine.
    start = time.perf_counter()
    assert expected in bad(write(tmp_path, "run.sh", script))
    assert time.perf_counter() - start < 30.0


@pytest.mark.parametrize(("toml", "expected"), [
    ("[parallelism]\npipeline_parallel_degree = 0\n",
     "parallelism.pipeline_parallel_degree is 0"),
    ("[parallelism]\npipeline_parallel_degree = '4'\n", "is '4' (a string)"),
    ("[parallelism]\ndata_parallel_shard_degree = -2\n",
     "data_parallel_shard_degree is -2; expected a whole number from 1"),
    ("parallelism = 3\n[training]\n[model]\n", "parallelism is 3; expected a [parallelism] table"),
    ("[parallelism]\n[training]\nlocal_batch_size = 1.5\n", "training.local_batch_size is 1.5"),
])
def test_torchtitan_values(tmp_path: Path, toml: str, expected: str) -> None:
    assert expected in bad(write(tmp_path, "job.toml", toml))


def test_bad_flag_values() -> None:
    path = DATA / "ds_config.json"
    assert bad(path, pp=0) == "--pp 0: expected a whole number from 1 to 1048576"
    assert bad(path, gpus=-8).startswith("--gpus -8")
    assert bad(path, tp=True).startswith("--tp true")  # type: ignore[arg-type]


# --- fuzz: only BadInput or success ---------------------------------------------------


def read_or_bad(path: Path, fmt: str | None, **flags: int) -> None:
    try:
        result = read_config(path, fmt, **flags)
    except BadInput as exc:
        assert "\n" not in str(exc) and str(exc)
    else:
        assert all("\n" not in note for note in result.notes)


FUZZ = settings(max_examples=150, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(content=st.binary(max_size=400), fmt=st.sampled_from(FORMATS))
def test_fuzz_random_bytes(tmp_path: Path, content: bytes, fmt: str | None) -> None:
    path = tmp_path / "fuzz.bin"
    path.write_bytes(content)
    read_or_bad(path, fmt)


SHELLISH = st.sampled_from(["--num-layers", "--pipeline-model-parallel-size", "pretrain_gpt.py",
                            "$PP", "${A[@]}", "$((", "))", "=(", ")", "\\\n", "#", '"', "'",
                            "[parallelism]", "pp:", "{", "}", "&a", "*a", "-1", "0", "8", " ",
                            "\n", "=", "auto", "train_batch_size"])


@FUZZ
@given(pieces=st.lists(st.one_of(SHELLISH, st.text(max_size=8)), max_size=40),
       fmt=st.sampled_from(FORMATS), pp=st.sampled_from([None, 2]))
def test_fuzz_random_text(tmp_path: Path, pieces: list[str], fmt: str | None,
                          pp: int | None) -> None:
    path = tmp_path / "fuzz.txt"
    path.write_text("".join(pieces), encoding="utf-8", errors="surrogatepass")
    read_or_bad(path, fmt, **({"pp": pp} if pp else {}))


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**40), max_value=10**40)
    | st.floats(allow_nan=True) | st.text(max_size=10) | st.just("auto"),
    lambda children: st.lists(children, max_size=4)
    | st.dictionaries(st.sampled_from([
        "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
        "zero_optimization", "stage", "pipeline", "stages", "bf16", "enabled", "pp", "gpus",
        "micro_batch_size", "schedule", "limits", "max_bubble", "parallelism", "training",
        "model", "pipeline_parallel_degree", "local_batch_size", "x",
    ]) | st.text(max_size=6), children, max_size=5),
    max_leaves=25,
)


@FUZZ
@given(value=JSON_VALUES, fmt=st.sampled_from(FORMATS), gpus=st.sampled_from([None, 8]))
def test_fuzz_random_json(tmp_path: Path, value: object, fmt: str | None,
                          gpus: int | None) -> None:
    path = tmp_path / "fuzz.json"
    path.write_text(json.dumps(value))
    read_or_bad(path, fmt, **({"gpus": gpus} if gpus else {}))


@FUZZ
@given(data=st.data())
def test_fuzz_mutated_fixtures(tmp_path: Path, data: st.DataObject) -> None:
    source = data.draw(st.sampled_from(sorted([*DATA.iterdir(), *DUMPS.glob("*.json")])))
    text = source.read_text()
    cut = data.draw(st.integers(0, len(text)))
    insert = data.draw(st.one_of(SHELLISH, st.text(max_size=6)))
    drop = data.draw(st.integers(0, 30))
    path = tmp_path / source.name
    path.write_text(text[:cut] + insert + text[cut + drop:], encoding="utf-8",
                    errors="surrogatepass")
    read_or_bad(path, data.draw(st.sampled_from(FORMATS)))
