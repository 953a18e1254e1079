"""A file pptune replaces keeps its permission bits and is said replaced on stderr;
the exit codes and refusals are those of a new file (docs/limits.md#what-pptune-writes)."""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

import pytest
from typer.testing import Result

from pptune.files import Written, write_all, write_text

Cli = Callable[..., Result]
OLD = "OLD\n"
JOB = """model: gpt3-1.3b
gpu: a100-80gb
gpus: 8
tp: 1
pp: 2
micro_batch_size: 4
global_batch: 512
schedule: 1f1b
"""


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def umasked(wanted: int) -> int:
    umask = os.umask(0)
    os.umask(umask)
    return wanted & ~umask


def old_file(path: Path, bits: int) -> Path:
    path.write_text(OLD)
    path.chmod(bits)
    return path


def test_a_new_file_gets_the_usual_mode_and_is_not_said_replaced(tmp_path: Path) -> None:
    out = tmp_path / "new.json"
    assert write_text(out, "{}\n") == Written(out, replaced=False, other_links=0)
    assert mode(out) == umasked(0o666)
    assert Written(out).note() == ""


def test_a_replaced_file_keeps_its_permission_bits(tmp_path: Path) -> None:
    out = old_file(tmp_path / "p.json", 0o600)
    assert write_text(out, "{}\n") == Written(out, replaced=True, other_links=0)
    assert out.read_text() == "{}\n" and mode(out) == 0o600
    assert Written(out, replaced=True).note() == "replaced the previous one"


def test_through_a_symlink_the_target_keeps_its_bits(tmp_path: Path) -> None:
    target = old_file(tmp_path / "target.json", 0o640)
    link = tmp_path / "link.json"
    link.symlink_to(target)
    assert write_text(link, "new\n").replaced
    assert link.is_symlink() and target.read_text() == "new\n" and mode(target) == 0o640


def test_a_hard_link_keeps_the_old_bytes_and_is_said(tmp_path: Path) -> None:
    """The rename gives the path a new file; the other name still holds the old one."""
    out = old_file(tmp_path / "p.json", 0o644)
    os.link(out, tmp_path / "other.json")
    written = write_text(out, "new\n")
    assert written == Written(out, replaced=True, other_links=1)
    assert (tmp_path / "other.json").read_text() == OLD and out.read_text() == "new\n"
    assert written.note() == ("replaced the previous one; its 1 other hard link still "
                              "holds the old content")
    os.link(tmp_path / "other.json", tmp_path / "third.json")
    assert Written(out, True, 2).note().endswith("its 2 other hard links still hold the "
                                                 "old content")


def test_emitted_files_replaced_with_force_keep_their_bits(tmp_path: Path) -> None:
    """A script stays runnable by whoever could read the one it replaces: 0640 -> 0750;
    a new file beside it gets the usual mode."""
    old_file(tmp_path / "a.sh", 0o640)
    old_file(tmp_path / "c.json", 0o600)
    written = write_all(tmp_path, {"a.sh": "new", "b.json": "{}", "c.json": "{}"}, force=True,
                        modes={"a.sh": 0o777})
    assert [(w.path.name, w.replaced) for w in written] == [
        ("a.sh", True), ("b.json", False), ("c.json", True)]
    assert mode(tmp_path / "a.sh") == 0o750
    assert mode(tmp_path / "b.json") == umasked(0o666)
    assert mode(tmp_path / "c.json") == 0o600


def test_recommend_o_says_it_replaced_the_file(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "plans.json"
    first = cli("recommend", "--gpus", "8", "--model", "gpt3-1.3b", "--gpu", "a100-80gb",
                "-o", out)
    assert first.exit_code == 0, first.stderr
    assert f"pptune: wrote {out}\n" in first.stderr and "replaced" not in first.stderr
    out.chmod(0o600)
    again = cli("recommend", "--gpus", "8", "--model", "gpt3-1.3b", "--gpu", "a100-80gb",
                "-o", out)
    assert again.exit_code == 0, again.stderr
    assert f"pptune: wrote {out} (replaced the previous one)\n" in again.stderr
    assert mode(out) == 0o600 and json.loads(out.read_text())["plans"]


def test_emit_force_says_each_file_it_replaced(cli: Cli, tmp_path: Path) -> None:
    args = ["recommend", "--gpus", "8", "--model", "gpt3-1.3b", "--gpu", "a100-80gb",
            "--emit", "megatron", "-o", tmp_path]
    assert cli(*args).exit_code == 0
    (tmp_path / "pretrain_megatron.sh").chmod(0o700)
    again = cli(*args, "--force")
    assert again.exit_code == 0, again.stderr
    assert f"pptune: wrote {tmp_path / 'pretrain_megatron.sh'} (replaced the previous one)" \
        in again.stderr
    assert mode(tmp_path / "pretrain_megatron.sh") == 0o700


def test_simulate_trace_says_it_replaced_the_file(cli: Cli, tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    trace.write_text('{"traceEvents": [], "otherData": {"name": "pptune simulate"}}\n')
    trace.chmod(0o600)
    r = cli("simulate", "--pp", "2", "-m", "4", "--fwd-ms", "1", "--bwd-ms", "2",
            "--trace", trace)
    assert r.exit_code == 0, r.stderr
    assert (f"pptune: wrote {trace} (replaced the previous one; open in "
            "https://ui.perfetto.dev)") in r.stderr
    assert mode(trace) == 0o600


def test_calibrate_o_says_it_replaced_the_file(cli: Cli, tmp_path: Path) -> None:
    config = tmp_path / "job.yaml"
    config.write_text(JOB)
    out = tmp_path / "cal.json"
    out.write_text('{"schema_version": 1, "layers": []}\n')  # an earlier profile's keys
    out.chmod(0o600)
    r = cli("calibrate", "--run", config, "--step-s", "8.5", "-o", out)
    assert r.exit_code == 0, r.stderr
    assert f"pptune: wrote {out} (replaced the previous one)" in r.stderr
    assert mode(out) == 0o600 and json.loads(out.read_text())["calibration"]


@pytest.mark.torch
def test_probe_says_it_replaced_the_profile(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "pptune-profile.json"
    out.write_text('{"schema_version": 1, "layers": []}\n')  # an earlier profile's keys
    out.chmod(0o600)
    r = cli("probe", "-o", out, "--no-comm", "--micro-batch-sizes", "1", "--repeats", "1",
            "--warmup", "0", "--seq-len", "8", "--model", "gpt-small")
    assert r.exit_code == 0, r.stderr
    assert f"pptune: profile written to {out} (replaced the previous one)" in r.stderr
    assert mode(out) == 0o600


LAUNCH = "#!/usr/bin/env bash\ntorchrun pretrain_gpt.py --num-layers 32\n"


@pytest.mark.parametrize(("args", "what"), [
    (("recommend", "--gpus", "8", "--json", "-o"), "a pptune plan file (recommend --json -o)"),
    (("simulate", "--pp", "2", "-m", "4", "--fwd-ms", "1", "--bwd-ms", "2", "--trace"),
     "a pptune trace (simulate or validate --trace)"),
    (("simulate", "--pp", "2", "-m", "4", "--fwd-ms", "1", "--bwd-ms", "2", "--svg"),
     "a pptune timeline SVG (simulate --svg)"),
])
def test_a_file_of_another_kind_is_not_replaced(cli: Cli, error_line: Callable[[Result], str],
                                                tmp_path: Path, args: tuple[str, ...],
                                                what: str) -> None:
    """A launch script under a mistyped -o (or a trace path) is refused before the work,
    untouched; an empty file or one of the same kind is replaced (tests above)."""
    script = tmp_path / "myjob.sh"
    script.write_text(LAUNCH)
    line = error_line(cli(*args, script))
    assert line.endswith(f"{script} already holds something other than {what}; pptune "
                         "replaces only its own output there: give another path, or delete "
                         "the file first")
    assert script.read_text() == LAUNCH


def test_calibrate_does_not_replace_a_plan_file_with_a_profile(
        cli: Cli, error_line: Callable[[Result], str], tmp_path: Path) -> None:
    config = tmp_path / "job.yaml"
    config.write_text(JOB)
    plans = tmp_path / "plans.json"
    assert cli("recommend", "--gpus", "8", "--model", "gpt3-1.3b", "-o", plans).exit_code == 0
    before = plans.read_text()
    line = error_line(cli("calibrate", "--run", config, "--step-s", "8.5", "-o", plans))
    assert "already holds something other than a pptune profile" in line
    assert plans.read_text() == before


def test_an_empty_file_is_replaced(cli: Cli, tmp_path: Path) -> None:
    out = tmp_path / "plans.json"
    out.touch()
    r = cli("recommend", "--gpus", "8", "--model", "gpt3-1.3b", "-o", out)
    assert r.exit_code == 0, r.stderr
    assert json.loads(out.read_text())["plans"]


@pytest.mark.parametrize(("flag", "text"), [
    ("--trace", '{"traceEvents": [], "distributedInfo": {"rank": 0}}\n'),  # torch.profiler's
    ("--svg", '<svg xmlns="http://www.w3.org/2000/svg"><rect/></svg>\n'),  # a drawing
])
def test_another_tool_s_trace_or_svg_is_not_replaced(
        cli: Cli, error_line: Callable[[Result], str], tmp_path: Path, flag: str,
        text: str) -> None:
    """A trial: a PyTorch profiler trace (trace-report reads them) and a hand-drawn SVG
    had passed as pptune's own output and been replaced."""
    path = tmp_path / "theirs"
    path.write_text(text)
    error_line(cli("simulate", "--pp", "2", "-m", "4", "--fwd-ms", "1", "--bwd-ms", "2",
                   flag, path))
    assert path.read_text() == text


def test_an_earlier_svg_is_replaced(cli: Cli, tmp_path: Path) -> None:
    args = ("simulate", "--pp", "2", "-m", "4", "--fwd-ms", "1", "--bwd-ms", "2", "--svg",
            tmp_path / "t.svg")
    assert cli(*args).exit_code == 0
    again = cli(*args)
    assert again.exit_code == 0, again.stderr
    assert "(replaced the previous one)" in again.stderr


def test_trace_and_svg_on_one_path_are_refused(cli: Cli, error_line: Callable[[Result], str],
                                               tmp_path: Path) -> None:
    out = tmp_path / "same.out"
    line = error_line(cli("simulate", "--pp", "2", "-m", "4", "--fwd-ms", "1", "--bwd-ms", "2",
                          "--trace", out, "--svg", out))
    assert line == (f"pptune: error: --trace and --svg name one file ({out}): the SVG would "
                    "replace the trace; give each its own path")
    assert not out.exists()
