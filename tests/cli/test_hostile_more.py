"""More hostile inputs, in test_hostile.py's harness: a flag or file value outside
pptune's limits, JSON nested too deep in every reader, non-finite trace times, and
refusals that must come before any work (exit 2, one line, no traceback, no file
changed)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from pptune.costs.profiles import analytic_profile
from tests.cli.test_hostile import _files, invoke_guarded, runner

CASE_LIMIT_S = 10
PLAIN = ("model: gpt3-1.3b\ngpu: h100-sxm\npp: 4\ngpus: 8\nmicro_batch_size: 1\n"
         "global_batch: 64\n")  # no seq_len: --seq-len fills it


def _more(t: Path) -> None:
    _files(t)
    (t / "plain.yaml").write_text(PLAIN)
    (t / "layers.yaml").write_text(PLAIN + "num_layers: 100000000\n")
    (t / "seq.yaml").write_text(PLAIN + "seq_len: 2000000000\n")
    (t / "gpus.yaml").write_text(PLAIN.replace("gpus: 8", "gpus: 1000000"))
    (t / "deep1000.json").write_text("[" * 1000 + "]" * 1000)
    (t / "deepobj5000.json").write_text('{"a":' * 5000)
    (t / "huge_ts.json").write_text(json.dumps({"traceEvents": [
        {"ph": "X", "name": "k", "ts": 1e308, "dur": 1e308, "pid": 0, "tid": 0,
         "cat": "kernel"}]}))
    (t / "deep_info.json").write_text(json.dumps({
        "distributedInfo": "[" * 100_000,
        "traceEvents": [{"ph": "X", "name": "k", "cat": "kernel", "ts": 0, "dur": 10,
                         "pid": 0, "tid": 7}]}))
    prof = analytic_profile("gpt-small", "h100-sxm", [1, 2])
    (t / "profile.json").write_text(prof.model_dump_json())
    # bash -n: "line 3: unexpected EOF while looking for matching `"'"; the apostrophes
    # before it (a comment, a here-document, $'...', \') are no quotes
    (t / "unclosed.sh").write_text(
        "# it's PP=4\ncat <<EOF\ndon't\nEOF\nPP=$'4' Q=it\\'s\n"
        "torchrun pretrain_gpt.py --pipeline-model-parallel-size $PP \\\n"
        '  --data-path "/data/x \\\n  --num-layers 32\n')


Case = tuple[list[str], int, tuple[str, ...]]
CONF = ["check-config", "{t}/plain.yaml", "--no-compare"]

CASES: list[Case] = [
    # 1: --seq-len fills what the file lacks: checked like recommend's, not copied unchecked
    *[([*CONF, "--seq-len", v, *o], 2, (f"--seq-len must be {w}",))
      for v, w in (("0", ">= 1 (got 0)"), ("-1", ">= 1 (got -1)"),
                   ("99999999999999999999999", "<= 16,777,216"))
      for o in ([], ["--json"], ["--output", "github"])],
    # 3: a flag value out of range is bad usage, as in recommend and simulate
    *[([*CONF, "--gpu-spread", v], 2, ("--gpu-spread",)) for v in ("-1", "nan", "1e309", "0.9")],
    # 3: a file's value outside pptune's limits is bad input naming the key and the cap
    (["check-config", "{t}/layers.yaml"], 2, ("num_layers", "4,096")),
    (["check-config", "{t}/big_layers.yaml"], 2, ("num_layers", "4,096")),
    (["check-config", "{t}/seq.yaml"], 2, ("seq_len", "16,777,216")),
    (["check-config", "{t}/gpus.yaml"], 2, ("gpus", "131,072")),
    # a launch script with a quote never closed is refused as bash refuses it, at the
    # line where the quote opens
    *[(["check-config", "{t}/unclosed.sh", *o], 2,
       ('unclosed.sh: line 7: the " opened here is never closed',))
      for o in ([], ["--json"], ["--output", "github"])],
    # 2: JSON nested too deeply, wherever a user's JSON file is read
    (["calibrate", "{t}/deep1000.json", "--profile", "{t}/profile.json", "-o", "{t}/out.json"],
     2, ("nested too deeply",)),
    (["calibrate", "{t}/deepobj5000.json", "--profile", "{t}/profile.json", "-o",
      "{t}/out.json"], 2, ("nested too deeply",)),
    (["trace-report", "{t}/deep_info.json"], 0, ("rank",)),
    # 4: a trace time that overflows is bad input, never Infinity or NaN in the JSON
    (["trace-report", "{t}/huge_ts.json"], 2, ("finite",)),
    (["trace-report", "{t}/huge_ts.json", "--json"], 2, ("finite",)),
    # 6: what can be checked before the search is checked before it
    (["recommend", "--gpus", "8", "--emit", "megatron", "--plan", "0"], 2, ("--plan 0",)),
    (["recommend", "--gpus", "8", "--emit", "megatron", "--plan", "99"], 2, ("--plan 99",)),
    # --top 2 lists at most 3 plans (the best without a pipeline may follow): 4 is refused
    (["recommend", "--gpus", "8", "--emit", "megatron", "--plan", "4", "--top", "2"], 2,
     ("--plan 4", "--top 2")),
    (["probe", "--model", "nope", "-o", "{t}/p.json"], 2, ("--model 'nope'",)),
    # 8: a file where a folder belongs is named as a file
    (["recommend", "--gpus", "8", "--emit", "megatron", "-o", "{t}/regular.txt/out"], 2,
     ("is a file, not a folder",)),
]


@pytest.fixture
def tmp_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    _more(tmp_path)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(("args", "code", "words"), CASES, ids=lambda x: None)
def test_hostile_more(tmp_files: Path, args: list[str], code: int,
                      words: tuple[str, ...]) -> None:
    argv = [a.replace("{t}", str(tmp_files)) for a in args]
    r = invoke_guarded(app(), tmp_files, argv, code, words)
    if code == 2:  # the one line alone: nothing searched, probed or priced before it
        assert r.stderr.strip().splitlines() == [
            x for x in r.stderr.splitlines() if x.startswith("pptune: error:")], r.stderr
        assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    if "--json" in args and code == 2 and args[0] == "check-config":
        doc = json.loads(r.stdout)
        assert doc["exit_code"] == 2 and words[0] in doc["error"]
    if "github" in args and code == 2:
        assert r.stdout.startswith("::error file="), r.stdout


def app() -> object:
    from pptune.cli.app import app as the_app

    return the_app


def test_a_tune_journal_nested_too_deeply_is_one_line(tmp_path: Path) -> None:
    from pptune.errors import BadInput
    from pptune.tune import journal

    path = tmp_path / "tune.jsonl"
    path.write_text("[" * 100_000 + "\n" + '{"key": "k", "status": "measured"}\n')
    with pytest.raises(BadInput, match="nested too deeply"):
        journal.load(path)


# 5: check-config's usage errors still give a CI job its document or annotation
USAGE: list[list[str]] = [
    ["check-config", "{t}/plain.yaml", "--gpus", "abc"],
    ["check-config", "{t}/plain.yaml", "--bogus"],
    ["check-config", "{t}/plain.yaml", "--profile="],
    ["check-config"],
]


@pytest.mark.parametrize("args", USAGE, ids=lambda x: " ".join(x[2:]) or "no file")
@pytest.mark.parametrize("output", [["--json"], ["--output", "json"], ["--output", "github"]])
def test_check_config_usage_errors_still_print_the_document(
        tmp_files: Path, args: list[str], output: list[str]) -> None:
    argv = [a.replace("{t}", str(tmp_files)) for a in [*args, *output]]
    r = runner.invoke(app(), argv, env={"COLUMNS": "120"})
    assert r.exit_code == 2, r.stdout + r.stderr
    assert "Traceback" not in r.stdout + r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("pptune: error:")
    said = r.stderr.removeprefix("pptune: error:").strip()
    if output[-1] == "github":
        assert r.stdout.startswith("::error") and said.split(" (see")[0] in r.stdout
    else:
        doc = json.loads(r.stdout)
        assert doc["exit_code"] == 2 and doc["error"] == said
        assert doc["file"] == (argv[1] if len(args) > 1 else None)


def test_json_and_github_together_is_still_one_line(tmp_files: Path) -> None:
    r = runner.invoke(app(), ["check-config", str(tmp_files / "plain.yaml"), "--json",
                              "--output", "github"])
    assert r.exit_code == 2 and "two outputs" in r.stderr
    assert json.loads(r.stdout)["exit_code"] == 2  # --json asked for a document: it gets one


@pytest.mark.parametrize("number", [math.nan, math.inf, -math.inf])
def test_pptune_never_writes_nan_or_infinity_as_json(number: float) -> None:
    """JSON has no NaN or Infinity: one slipping through is one line and exit 1."""
    from pptune.errors import PptuneError
    from pptune.files import dumps_json

    assert dumps_json({"a": [1.5, None]}) == '{"a": [1.5, null]}'
    with pytest.raises(PptuneError) as info:
        dumps_json({"busy_s": number})
    assert info.value.exit_code == 1 and "\n" not in str(info.value)
