"""Hostile inputs across every command: one table of (arguments, exit code, words).

Every case must end with its exit code and its words in the output, one
``pptune: error:`` line when it fails, no traceback, within 10 s (a watchdog,
not a timing), and without changing any special or pre-existing file. FIFOs,
symlinks and device nodes are made only inside ``tmp_path``.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from pptune.cli.app import app
from pptune.costs.profiles import analytic_profile

runner = CliRunner()
KEEP = "KEEP: a file the user already had\n"
CASE_LIMIT_S = 10

TINY_HF = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128,
           "num_attention_heads": 4, "num_key_value_heads": 4, "num_hidden_layers": 4,
           "vocab_size": 256, "max_position_embeddings": 64}


def _files(t: Path) -> None:
    """Everything the cases point at, inside tmp_path."""
    (t / "existing.json").write_text(KEEP)
    (t / "target.json").write_text(KEEP)
    (t / "link.json").symlink_to(t / "target.json")
    os.mkfifo(t / "fifo")
    try:
        os.mknod(t / "null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except (PermissionError, OSError):
        (t / "null").symlink_to(t / "fifo")  # without CAP_MKNOD: another special file
    (t / "emitdir").mkdir()
    (t / "emitdir" / "pretrain_megatron.sh").write_text(KEEP)
    (t / "regular.txt").write_text(KEEP)  # regular.txt/x.json can never be created
    (t / "deep.json").write_text("[" * 100_000)
    (t / "deepobj.json").write_text('{"a":' * 50_000)
    (t / "empty.json").write_text("")
    (t / "binary.json").write_bytes(b"\x00\xff\xfe" * 100)
    (t / "list.json").write_text("[1, 2, 3]")
    prof = analytic_profile("gpt-small", "h100-sxm", [1, 2])
    (t / "profile.json").write_text(prof.model_dump_json())
    doc = json.loads(prof.model_dump_json())
    doc["layers"][1]["per_micro_batch"]["1"]["fwd_s"] = "Infinity"
    (t / "inf_profile.json").write_text(json.dumps(doc).replace('"Infinity"', "Infinity"))
    doc["layers"][1]["per_micro_batch"]["1"]["fwd_s"] = -1
    (t / "neg_profile.json").write_text(json.dumps(doc))
    (t / "hf.json").write_text(json.dumps(TINY_HF))
    (t / "hf_moe.json").write_text(json.dumps({**TINY_HF, "num_local_experts": 8}))
    (t / "hf_huge.json").write_text(json.dumps({**TINY_HF, "num_hidden_layers": 10**9}))
    (t / "hf_wide.json").write_text(json.dumps({**TINY_HF, "hidden_size": 10**12}))
    (t / "hf_bool.json").write_text(json.dumps({**TINY_HF, "hidden_size": True}))
    (t / "hf_heads.json").write_text(json.dumps({**TINY_HF, "num_attention_heads": 3}))
    (t / "big_layers.yaml").write_text(
        "pp: 2\nnum_layers: 1000000000\nhidden_size: 4096\nnum_heads: 32\nseq_len: 2048\n"
        "gpus: 8\nmicro_batch_size: 1\nglobal_batch: 64\n")
    (t / "ok.yaml").write_text("model: gpt3-1.3b\ngpu: h100-sxm\npp: 4\ngpus: 8\n"
                               "micro_batch_size: 1\nglobal_batch: 64\nprofile: missing.json\n")
    (t / "sub").mkdir()
    (t / "sub" / "nomodel.yaml").write_text("pp: 2\ngpus: 2\nmicro_batch_size: 1\n"
                                            "global_batch: 8\n")
    (t / "yaml_bomb.yaml").write_text('a: &a ["x","x"]\nb: &b [*a,*a]\nc: &c [*b,*b]\n')
    (t / "plans.json").write_text(json.dumps({"plans": [], "rejected": {}, "source": "x"}))
    (t / "trace.json").write_text(json.dumps({"traceEvents": [
        {"ph": "X", "name": "k", "cat": "kernel", "ts": 0, "dur": 10, "pid": 0, "tid": 7}]}))


@functools.cache
def _gzip_bomb() -> bytes:
    """About 600 KiB of gzip that expands to 600 MiB of spaces (made once)."""
    import zlib

    pack = zlib.compressobj(1, zlib.DEFLATED, 31)
    chunk = b" " * (1 << 20)
    return b"".join([*(pack.compress(chunk) for _ in range(600)), pack.flush()])


# (arguments with {t} = tmp_path, exit code, words that must appear)
Case = tuple[list[str], int, tuple[str, ...]]

TEXTBOOK = ["--fwd-ms", "1", "--bwd-ms", "2"]
BAD_NUMBERS = ["0", "-1", "nan", "inf", "1e300"]


def _numeric(command: list[str], flag: str, base: list[str], values: list[str]) -> list[Case]:
    out = []
    for value in values:
        is_int_flag = not any(c in value for c in "ne.")
        words = (flag,) if is_int_flag or flag in FLOAT_FLAGS else ("'" + flag,)
        out.append(([*command, *base, flag, value], 2, words))
    return out


FLOAT_FLAGS = {"--fwd-ms", "--bwd-ms", "--wgrad-ms", "--p2p-ms", "--efficiency",
               "--reserve-gib", "--train-tokens", "--timeout", "--max-bubble", "--max-slowdown",
               "--max-memory", "--min-busy"}

CASES: list[Case] = [
    # ---- simulate: numbers
    *_numeric(["simulate"], "--pp", TEXTBOOK, ["0", "-3", "1000000", "x"]),
    *_numeric(["simulate"], "--microbatches", TEXTBOOK, ["0", "-1", "x"]),
    *_numeric(["simulate"], "--micro-batch-size", ["--model", "gpt-small"], ["0", "-1", "99999999"]),
    *_numeric(["simulate"], "--fwd-ms", ["--bwd-ms", "1"], ["-1", "nan", "inf", "1e300"]),
    *_numeric(["simulate"], "--bwd-ms", ["--fwd-ms", "1"], ["-1", "nan", "inf"]),
    *_numeric(["simulate"], "--wgrad-ms", TEXTBOOK, ["-1", "nan", "inf"]),
    *_numeric(["simulate"], "--p2p-ms", TEXTBOOK, ["-1", "nan", "inf"]),
    *_numeric(["simulate"], "--width", [*TEXTBOOK, "--timeline"], ["0", "5", "1000000000"]),
    *_numeric(["simulate"], "--efficiency", ["--model", "gpt-small"], ["0", "-1", "nan", "inf", "2"]),
    *_numeric(["simulate"], "--tp", ["--model", "gpt-small"], ["0", "-2", "100000"]),
    *_numeric(["simulate"], "--seq-len", ["--model", "gpt-small"], ["0", "-5", "999999999999"]),
    *_numeric(["simulate"], "--virtual-stages", ["--schedule", "interleaved-1f1b", *TEXTBOOK],
              ["0", "-2", "1000000"]),
    (["simulate", *TEXTBOOK, "--pp", "64", "--microbatches", "100000"], 2, ("2,000,000",)),
    (["simulate", *TEXTBOOK, "--tp", "2"], 2, ("--tp",)),
    (["simulate", *TEXTBOOK, "--seq-len", "4096"], 2, ("--seq-len",)),
    (["simulate", *TEXTBOOK, "--efficiency", "0.4"], 2, ("--efficiency",)),
    (["simulate", *TEXTBOOK, "--attention", "eager"], 2, ("--attention",)),
    (["simulate", *TEXTBOOK, "--tp-comm-overlap"], 2, ("--tp-comm-overlap",)),
    (["simulate", "--profile", "{t}/profile.json", "--attention", "eager"], 2, ("--attention",)),
    (["simulate", "--model", "gpt-small", "--attention", "sparse"], 2, ("--attention",)),
    (["recommend", "--gpus", "8", "--profile", "{t}/profile.json", "--tp-comm-overlap"], 2,
     ("--tp-comm-overlap",)),
    (["simulate", "--fwd-ms", "1"], 2, ("--bwd-ms",)),
    (["simulate", "--schedule", "pipedream"], 2, ("unknown schedule",)),
    (["simulate", "--schedule", "dualpipev", "--pp", "4", "-m", "4"], 2,
     ("DualPipeV requires at least as many microbatches as stages", "use 8 micro-batches")),
    (["simulate", "--schedule", "dualpipe", "--pp", "3", "-m", "6"], 2,
     ("even pipeline depth (got pp=3)",)),
    (["simulate", "--schedule", "zbv", *TEXTBOOK, "--a2a-overlap"], 2,
     ("--a2a-overlap", "1f1b and interleaved-1f1b")),
    (["simulate", "--model", "gpt-small", "--a2a-ms", "1"], 2, ("--a2a-ms",)),
    (["simulate", *TEXTBOOK, "--a2a-ms", "-1"], 2, ("--a2a-ms",)),
    (["simulate", "--schedule", "dualpipe", "--model", "gpt-small", "--pp", "2", "-m", "4",
      "--split", "2,2,2,2"], 2, ("must have 2 entries", "dualpipe's chunks")),
    (["simulate", "--model", "nope"], 2, ("unknown model preset",)),
    (["simulate", "--gpu", "tpu-v9"], 2, ("unknown GPU preset",)),
    (["simulate", "--model", "gpt-small", "--hf-config", "{t}/hf.json"], 2, ("give one",)),
    (["simulate", "--model", "gpt-small", "--split", "1,,2"], 2, ("--split",)),
    (["simulate", "--model", "gpt-small", "--split", "-1,9"], 2, ("--split",)),
    (["simulate", "--model", "gpt-small", "--pp", "100"], 2, ("stages",)),
    # ---- simulate: files in
    (["simulate", "--profile", "{t}/deep.json"], 2, ("nested too deeply",)),
    (["simulate", "--profile", "{t}/deepobj.json"], 2, ("nested too deeply",)),
    (["simulate", "--profile", "{t}/empty.json"], 2, ("not valid JSON",)),
    (["simulate", "--profile", "{t}/binary.json"], 2, ("profile file",)),
    (["simulate", "--profile", "{t}/list.json"], 2, ("invalid",)),
    (["simulate", "--profile", "{t}/fifo"], 2, ("not a regular file",)),
    (["simulate", "--profile", "{t}/null"], 2, ("not a regular file",)),
    (["simulate", "--profile", "{t}"], 2, ("directory",)),
    (["simulate", "--profile", "{t}/missing.json"], 2, ("not found",)),
    (["simulate", "--profile", "{t}/inf_profile.json"], 2, ("finite",)),
    (["simulate", "--profile", "{t}/neg_profile.json"], 2, ("greater than or equal",)),
    (["simulate", "--profile", "{t}/profile.json", "--seq-len", "4096"], 2, ("--seq-len 4096",)),
    (["simulate", "--profile", "{t}/profile.json", "--gpu", "a100-80gb"], 2, ("--gpu",)),
    (["simulate", "--profile", "{t}/profile.json", "--efficiency", "0.3"], 2, ("--efficiency",)),
    (["simulate", "--profile", "{t}/profile.json", "--model", "gpt-small"], 2, ("--model",)),
    (["simulate", "--profile", "{t}/profile.json", "-b", "8"], 2, ("micro-batch size",)),
    (["simulate", "--hf-config", "{t}/hf_huge.json"], 2, ("num_hidden_layers", "4,096")),
    (["simulate", "--hf-config", "{t}/hf_wide.json"], 2, ("hidden_size",)),
    (["simulate", "--hf-config", "{t}/hf_bool.json"], 2, ("hidden_size",)),
    (["simulate", "--hf-config", "{t}/hf_heads.json"], 2, ("divisible",)),
    (["simulate", "--hf-config", "{t}/deep.json"], 2, ("nested too deeply",)),
    (["simulate", "--hf-config", "{t}/fifo"], 2, ("not a regular file",)),
    (["simulate", "--hf-config", "{t}/null"], 2, ("not a regular file",)),
    # experts under a model type whose experts pptune does not read: refused, not planned dense
    (["simulate", "--hf-config", "{t}/hf_moe.json", "--pp", "2"], 2, ("states experts",)),
    # ---- simulate: files out
    (["simulate", *TEXTBOOK, "--trace", "{t}/fifo"], 2, ("not a regular file",)),
    (["simulate", *TEXTBOOK, "--trace", "{t}/null"], 2, ("not a regular file",)),
    (["simulate", *TEXTBOOK, "--svg", "{t}/fifo"], 2, ("not a regular file",)),
    (["simulate", *TEXTBOOK, "--svg", "{t}"], 2, ("directory",)),
    (["simulate", *TEXTBOOK, "--trace", "{t}/regular.txt/x.json"], 2, ("is not a folder",)),
    (["simulate", *TEXTBOOK, "--trace", "{t}/no/such/dir/x.json"], 2, ("does not exist",)),
    # ---- recommend: numbers
    *_numeric(["recommend"], "--gpus", [], ["0", "-8", "1000000000000", "x"]),
    *_numeric(["recommend", "--gpus", "8"], "--tp", [], ["0", "-1", "3", "100000"]),
    *_numeric(["recommend", "--gpus", "8"], "--gpus-per-node", [], ["0", "-1"]),
    *_numeric(["recommend", "--gpus", "8"], "--global-batch", [], ["0", "-1", "99999999999"]),
    *_numeric(["recommend", "--gpus", "8"], "--top", [], ["0", "-1", "100000"]),
    *_numeric(["recommend", "--gpus", "8"], "--efficiency", [], ["0", "nan", "inf", "1.5"]),
    *_numeric(["recommend", "--gpus", "8"], "--reserve-gib", [], ["-1", "nan", "inf", "1e300"]),
    *_numeric(["recommend", "--gpus", "8"], "--max-memory", [], ["0", "-0.5", "1.5", "nan"]),
    *_numeric(["recommend", "--gpus", "8"], "--train-tokens", [], ["0", "-1", "nan", "inf"]),
    *_numeric(["recommend", "--gpus", "8"], "--width", ["--timeline"], ["0", "1000000000"]),
    *_numeric(["recommend", "--gpus", "8"], "--seq-len", [], ["0", "-1", "999999999999"]),
    (["recommend", "--gpus", "8", "--pp", "3"], 2, ("--pp 3", "choose from 1, 2, 4, 8")),
    (["recommend", "--gpus", "8", "--pp", "0"], 2, ("--pp",)),
    (["recommend", "--gpus", "8", "--pp", "2,,4"], 2, ("--pp",)),
    (["recommend", "--gpus", "8", "--micro-batch-sizes", "1,,2"], 2, ("--micro-batch-sizes",)),
    (["recommend", "--gpus", "8", "--micro-batch-sizes", "0"], 2, ("--micro-batch-sizes",)),
    (["recommend", "--gpus", "8", "--micro-batch-sizes", "1,x"], 2, ("--micro-batch-sizes",)),
    (["recommend", "--gpus", "8", "--micro-batch-sizes", ",".join(map(str, range(1, 101)))], 2,
     ("--micro-batch-sizes",)),  # 100 sizes (a repeat is searched once: 1 x 100 is one)
    (["recommend", "--gpus", "8", "--micro-batch-sizes", "9999999"], 2, ("micro-batch size",)),
    (["recommend", "--gpus", "8", "--virtual-stages", "1"], 2, ("--virtual-stages",)),
    (["recommend", "--gpus", "8", "--virtual-stages", "2,,3"], 2, ("--virtual-stages",)),
    (["recommend", "--gpus", "8", "--schedules", ","], 2, ("--schedules",)),
    (["recommend", "--gpus", "8", "--schedules", "1f1b,bogus"], 2, ("unknown schedule",)),
    (["recommend", "--gpus", "8", "--recompute", "half"], 2, ("--recompute",)),
    (["recommend", "--gpus", "8", "--grad-compression", "topk:nan"], 2, ("grad-compression",)),
    (["recommend", "--gpus", "8", "--grad-compression", "zip"], 2, ("grad-compression",)),
    (["recommend", "--gpus", "8", "--emit", "jax"], 2, ("unknown --emit",)),
    (["recommend", "--gpus", "8", "--emit", "megatron", "--plan", "99"], 2, ("--plan",)),
    (["recommend", "--gpus", "8", "--emit", "megatron", "--json"], 2, ("--json and --emit",)),
    (["recommend", "--gpus", "8", "--model", "gpt-small", "--hf-config", "{t}/hf.json"], 2,
     ("give one",)),
    (["recommend", "--gpus", "8", "--profile", "{t}/inf_profile.json"], 2, ("finite",)),
    (["recommend", "--gpus", "8", "--profile", "{t}/deep.json"], 2, ("nested too deeply",)),
    (["recommend", "--gpus", "8", "--profile", "{t}/fifo"], 2, ("not a regular file",)),
    (["recommend", "--gpus", "8", "--profile", "{t}/profile.json", "--seq-len", "999"], 2,
     ("measured at sequence length",)),
    (["recommend", "--gpus", "8", "--hf-config", "{t}/hf_huge.json"], 2, ("num_hidden_layers",)),
    (["recommend", "--gpus", "2", "--model", "gpt3-175b", "--gpu", "a100-80gb"], 1,
     ("no feasible plan",)),
    # ---- recommend: files out
    (["recommend", "--gpus", "8", "-o", "{t}/fifo"], 2, ("not a regular file",)),
    (["recommend", "--gpus", "8", "-o", "{t}/null"], 2, ("not a regular file",)),
    (["recommend", "--gpus", "8", "-o", "{t}"], 2, ("directory",)),
    (["recommend", "--gpus", "8", "-o", "{t}/regular.txt/plans.json"], 2, ("is not a folder",)),
    (["recommend", "--gpus", "8", "--emit", "megatron", "-o", "{t}/emitdir"], 2,
     ("already has pretrain_megatron.sh", "--force")),
    (["recommend", "--gpus", "8", "--emit", "megatron", "-o", "{t}/existing.json"], 2,
     ("not a directory",)),
    (["recommend", "--gpus", "8", "--emit", "megatron", "-o", "{t}/regular.txt/out"], 2,
     ("cannot create",)),
    (["recommend", "--gpus", "8", "--emit", "pptune", "-o", "{t}/fifo"], 2, ("not a directory",)),
    # ---- check-config
    (["check-config"], 2, ("CONFIG",)),
    (["check-config", "{t}/missing.yaml"], 2, ("not found",)),
    (["check-config", "{t}/fifo"], 2, ("not a regular file",)),
    (["check-config", "{t}/null"], 2, ("not a regular file",)),
    (["check-config", "{t}"], 2, ("directory",)),
    (["check-config", "{t}/empty.json"], 2, ("empty",)),
    (["check-config", "{t}/deep.json"], 2, ("nest",)),
    (["check-config", "{t}/hf.json"], 2, ("a Hugging Face model config",)),
    (["check-config", "{t}/deepobj.json"], 2, ("nest",)),
    (["check-config", "{t}/binary.json"], 2, ("pptune: error",)),
    (["check-config", "{t}/yaml_bomb.yaml"], 2, ("alias",)),
    (["check-config", "{t}/big_layers.yaml"], 2, ("num_layers", "4,096")),  # pptune's cap
    # a flag's bad file is bad usage (exit 2); the file's own profile is a finding (1, below)
    (["check-config", "{t}/ok.yaml", "--profile", "{t}/deep.json"], 2, ("nested too deeply",)),
    (["check-config", "{t}/ok.yaml", "--hf-config", "{t}/deep.json"], 2, ("nested too deeply",)),
    # a command-line --profile is the working folder's, not the config's folder's
    (["check-config", "sub/nomodel.yaml", "--profile", "profile.json", "--max-bubble", "1",
      "--max-slowdown", "100"], 0, ("memory-ok",)),
    (["check-config", "{t}/ok.yaml"], 1, ("missing.json",)),
    (["check-config", "{t}/ok.yaml", "--output", "xml"], 2, ("--output",)),
    (["check-config", "{t}/ok.yaml", "--format-in", "jax"], 2, ("jax",)),
    *_numeric(["check-config", "{t}/ok.yaml"], "--max-bubble", [], ["-1", "nan", "2"]),
    *_numeric(["check-config", "{t}/ok.yaml"], "--max-slowdown", [], ["0.5", "nan", "inf"]),
    *_numeric(["check-config", "{t}/ok.yaml"], "--max-memory", [], ["0", "-0.5", "1.5", "nan"]),
    *_numeric(["check-config", "{t}/ok.yaml"], "--pp", [], ["0", "-1"]),
    *_numeric(["check-config", "{t}/ok.yaml"], "--gpus", [], ["0", "1000000000000"]),
    *_numeric(["check-config", "{t}/ok.yaml"], "--tp", [], ["0", "-1"]),
    # ---- validate (all refused before any process starts)
    (["validate", "--plan", "{t}/deep.json"], 2, ("nested too deeply",)),
    (["validate", "--plan", "{t}/fifo"], 2, ("not a regular file",)),
    (["validate", "--plan", "{t}/plans.json"], 2, ("lists no plans",)),
    (["validate", "--plan", "1", "--plans", "{t}/missing.json"], 2, ("not found",)),
    (["validate", "--trace", "{t}/fifo"], 2, ("not a regular file",)),
    (["validate", "--trace", "{t}/null"], 2, ("not a regular file",)),
    (["validate", "--trace", "{t}/regular.txt/x.json"], 2, ("is not a folder",)),
    (["validate", "--dtype", "int4"], 2, ("--dtype",)),
    (["validate", "--device", "tpu", "--trace", "{t}/fifo"], 2, ("not a regular file",)),
    (["validate", "--split", "1,,2"], 2, ("--split",)),
    *_numeric(["validate"], "--timeout", [], ["0", "-1", "nan", "inf"]),
    *_numeric(["validate"], "--steps", [], ["0", "-1", "10000000"]),
    *_numeric(["validate"], "--warmup", [], ["-1", "10000000"]),
    *_numeric(["validate"], "--width", ["--timeline"], ["0", "1000000000"]),
    *_numeric(["validate"], "--pp", [], ["0", "-1"]),
    *_numeric(["validate"], "--microbatches", [], ["0", "-4"]),
    *_numeric(["validate"], "--micro-batch-size", [], ["0"]),
    *_numeric(["validate"], "--seq-len", [], ["0", "999999999999"]),
    # ---- probe (all refused before any measurement)
    (["probe", "-o", "{t}/fifo"], 2, ("not a regular file",)),
    (["probe", "-o", "{t}/null"], 2, ("not a regular file",)),
    (["probe", "-o", "{t}/regular.txt/x.json"], 2, ("is not a folder",)),
    (["probe", "-o", "{t}"], 2, ("directory",)),
    *_numeric(["probe", "-o", "{t}/p.json"], "--timeout", [], ["nan", "inf", "1e300"]),
    *_numeric(["probe", "-o", "{t}/p.json"], "--repeats", [], ["10000000"]),
    *_numeric(["probe", "-o", "{t}/p.json"], "--seq-len", [], ["999999999999"]),
    # ---- trace-report and the rest
    (["trace-report", "{t}/fifo"], 2, ("not a regular file",)),
    (["trace-report", "{t}/null"], 2, ("not a regular file",)),
    (["trace-report", "{t}/deep.json"], 2, ("nested too deeply",)),
    (["trace-report", "{t}/bomb.json.gz"], 2, ("expands to over",)),
    (["trace-report", "{t}/missing.json"], 2, ("not found",)),
    (["trace-report", "{t}/trace.json", "--min-busy", "nan"], 2, ("--min-busy",)),
    (["trace-report", "{t}/trace.json", "--min-busy", "2"], 2, ("--min-busy",)),
    (["trace-report", "{t}/trace.json", "--window-start-us", "nan"], 2, ("--window-start-us",)),
    (["trace-report", "{t}/trace.json", "--window-end-us", "inf"], 2, ("--window-end-us",)),
    (["monitor", "--duration", "inf"], 2, ("--duration",)),
    (["monitor", "--interval", "nan"], 2, ("--interval",)),
    (["monitor", "--interval", "0.001", "--duration", "604800"], 2, ("samples",)),
    (["probe", "--nccl-tests", "{t}/fifo", "-o", "{t}/p.json"], 2, ("not a regular file",)),
    (["probe", "--nccl-tests", "{t}/deep.json", "-o", "{t}/p.json"], 2, ("--nccl-tests",)),
    (["schema", "nope"], 2, ("unknown schema",)),
    (["presets", "--bogus"], 2, ("No such option",)),
    (["nope"], 2, ("No such command",)),
    (["recommend"], 2, ("Missing option",)),
    (["simulate", "--pp"], 2, ("requires an argument",)),
]


@pytest.fixture
def tmp_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    _files(tmp_path)
    monkeypatch.chdir(tmp_path)
    yield tmp_path


def _snapshot(t: Path) -> dict[str, tuple[int, str]]:
    """Mode and content (or link target) of every file the cases may hit."""
    out = {}
    for p in sorted(t.rglob("*")):
        st = p.lstat()
        if stat.S_ISLNK(st.st_mode):
            body = "-> " + os.readlink(p)
        elif stat.S_ISREG(st.st_mode):
            body = p.read_bytes()[:200].decode("latin-1")
        else:
            body = ""
        out[str(p.relative_to(t))] = (stat.S_IFMT(st.st_mode), body)
    return out


def _timeout(signum: int, frame: object) -> None:
    raise TimeoutError(f"a hostile case ran over {CASE_LIMIT_S} s")


def test_the_table_is_large_enough() -> None:
    assert len(CASES) >= 150
    commands = {c[0][0] for c in CASES}
    assert {"simulate", "recommend", "check-config", "validate", "probe", "trace-report"} <= commands


def _needs_torch(args: list[str]) -> bool:
    """validate reads a plan file and probe --nccl-tests reads its logs with torch imported."""
    return (args[0] == "validate" and "--plan" in args) or (
        args[0] == "probe" and "--nccl-tests" in args)


PARAMS = [pytest.param(*c, marks=pytest.mark.torch) if _needs_torch(c[0]) else c for c in CASES]


def invoke_guarded(cli: Any, folder: Path, argv: list[str], code: int,
                   words: tuple[str, ...]) -> Result:
    """Run ``argv`` under a time limit: no traceback, exit ``code``, each of ``words``
    said, no NaN or Infinity on stdout, and no file in ``folder`` changed."""
    before = _snapshot(folder)
    signal.signal(signal.SIGALRM, _timeout)
    signal.alarm(CASE_LIMIT_S)
    try:
        r = runner.invoke(cli, argv, env={"COLUMNS": "120"})
    finally:
        signal.alarm(0)
    text = r.stdout + r.stderr
    assert r.exception is None or isinstance(r.exception, SystemExit), repr(r.exception)
    assert "Traceback" not in text
    assert r.exit_code == code, text
    for word in words:
        assert word in text, text
    assert "NaN" not in r.stdout and "Infinity" not in r.stdout
    after = _snapshot(folder)
    changed = {k for k in before if after.get(k) != before[k]}
    assert not changed, f"changed: {changed}"
    return r


@pytest.mark.parametrize(("args", "code", "words"), PARAMS, ids=lambda x: None)
def test_hostile(tmp_files: Path, args: list[str], code: int, words: tuple[str, ...]) -> None:
    argv = [a.replace("{t}", str(tmp_files)) for a in args]
    if any("bomb.json.gz" in a for a in args):
        (tmp_files / "bomb.json.gz").write_bytes(_gzip_bomb())
    r = invoke_guarded(app, tmp_files, argv, code, words)
    if code == 2:
        errors = [x for x in r.stderr.splitlines() if x.startswith("pptune: error:")]
        assert len(errors) == 1 and len(r.stderr.strip().splitlines()) <= 3, r.stderr
