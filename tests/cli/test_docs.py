"""The docs stay in step with the app (sqlite-utils' test_docs idea).

- every `pptune X` and every `--flag` that README.md or docs/**/*.md names
  exists, and every command is in the README and has an example in its help;
- the generated pages (docs/cli.md from the app, docs/accuracy.md and
  docs/benchmarks.md from bench/results/) and every example block are what
  ``make docs`` renders now;
- the README is a front page (at most 250 lines), every relative link and
  anchor between the pages resolves, and no page cites a path outside the
  repository.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

import pytest
from typer.testing import CliRunner

from bench import docs, docs_results
from pptune.cli.app import app
from pptune.frameworks.megatron import earlier_flags, known_flags
from pptune.frameworks.megatron.flags import LATER_FLAGS, MOE_BOOL_FLAGS, MOE_VALUE_FLAGS

REPO = Path(__file__).resolve().parents[2]
README = REPO / "README.md"
PAGES = [README, *sorted((REPO / "docs").rglob("*.md")), REPO / "CHANGELOG.md"]
runner = CliRunner()

# Flags of other tools the docs quote, exactly as those tools spell them.
MEGATRON_FLAGS = {
    "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split",
    "--attention-backend", "--attention-dropout", "--hidden-dropout", "--bf16",
    "--context-parallel-size", "--use-megatron-fsdp",
    "--data-parallel-sharding-strategy",
    "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers",
    "--ffn-hidden-size", "--fp16", "--global-batch-size", "--group-query-attention",
    "--hidden-size",
    "--microbatch-group-size-per-virtual-pipeline-stage", "--no-overlap-p2p-communication",
    "--num-attention-heads", "--num-layers", "--num-layers-per-virtual-pipeline-stage",
    "--num-query-groups", "--num-virtual-stages-per-pipeline-rank", "--overlap-param-gather",
    "--pipeline-model-parallel-layout", "--pipeline-model-parallel-size",
    "--rampup-batch-size", "--recompute-activations", "--recompute-granularity",
    "--recompute-method", "--recompute-num-layers", "--recompute-modules", "--mtp-num-layers",
    "--seq-length", "--swiglu", "--cross-entropy-loss-fusion", "--cross-entropy-fusion-impl",
    "--bias-swiglu-fusion", "--no-bias-swiglu-fusion",
    "--tensor-model-parallel-size", "--transformer-impl", "--use-distributed-optimizer",
    "--use-flash-attn", "--use-torch-fsdp2", "--use-tp-pp-dp-mapping", "--vocab-size",
    "--use-checkpoint-args", "--yaml-cfg",
    "--account-for-embedding",  # as in `--account-for-embedding/loss-in-pipeline-split`
    "--cp-comm-type", "--expert-model-parallel-size", "--expert-tensor-parallel-size",
    "--fp8-format", "--fp8-recipe", "--fp8-param-gather", "--num-experts",
    "--overlap-moe-expert-parallel-comm", "--tp-comm-overlap",
    # in the example launch script's flags that check-config and calibrate read past
    "--disable-bias-linear", "--max-position-embeddings", "--normalization",
    "--position-embedding-type", "--rotary-base", "--train-iters",
    "--untie-embeddings-and-output-weights", "--use-mcore-models", "--adam-beta1",
    "--weight-decay", "--adam-beta2", "--init-method-std", "--add-qkv-bias", "--clip-grad",
    "--hierarchical-context-parallel-sizes",
    "--use-precision-aware-optimizer", "--main-grads-dtype", "--exp-avg-dtype",
    "--exp-avg-sq-dtype",
    "--cuda-graph-impl", "--enable-cuda-graph", "--external-cuda-graph",
    "--grad-reduce-in-bf16",
}
MEGATRON_FLAGS |= set(MOE_VALUE_FLAGS) | set(MOE_BOOL_FLAGS) | {
    "--moe-router-num-groups", "--moe-router-group-topk"}  # group-limited routing, ignored
TORCHRUN_FLAGS = {"--nnodes", "--nproc-per-node", "--nproc",  # `--nproc_per_node` too
                  "--rdzv-backend", "--rdzv-endpoint"}
SLURM_FLAGS = {"--ntasks-per-node", "--nodes", "--ntasks"}  # srun: tune --launcher, check-config
# torchtitan main's `--debug.save_config_file` / `--debug.print_config` (torchtitan/config/
# configs.py DebugConfig), which write or log the config dumps check-config reads, and its
# `--module` / `--config` (config/manager.py), which launch the config recommend --emit
# writes for main
TORCHTITAN_FLAGS = {"--debug", "--module", "--config"}
# every flag Megatron-LM core_v0.16.1 defines (known_flags), beside those pptune reads, and
# later releases' flags pptune names (megatron/flags.py LATER_FLAGS)
FOREIGN = (MEGATRON_FLAGS | known_flags.FLAGS | earlier_flags.FLAGS | TORCHRUN_FLAGS
           | SLURM_FLAGS | LATER_FLAGS | TORCHTITAN_FLAGS)


def _prose(path: Path) -> str:
    """A page without the targets of its Markdown links (anchors look like flags)."""
    return re.sub(r"\]\([^)]*\)", "]", path.read_text())


@cache
def _commands() -> tuple[str, ...]:
    out = runner.invoke(app, ["--help"], env={"COLUMNS": "200"}).stdout
    block = out.split("Commands:", 1)[1]
    return tuple(line.split()[0] for line in block.splitlines() if line.strip())


@cache
def _pages() -> dict[Path, str]:
    return docs.pages()


def test_every_command_is_documented_and_every_documented_command_exists() -> None:
    commands = _commands()
    assert {"simulate", "recommend", "probe", "check-config", "presets", "schema"} <= set(commands)
    readme = README.read_text()
    for name in commands:
        assert f"`pptune {name}" in readme, f"README does not mention `pptune {name}`"
    root_help = runner.invoke(app, ["--help"], env={"COLUMNS": "200"}).stdout
    for page in PAGES:
        text = page.read_text()
        named = set(re.findall(r"`pptune ([a-z-]+)", text))
        for block in re.findall(r"^```[a-z]*\n(.*?)^```", text, re.M | re.S):
            named |= set(re.findall(r"^\s*(?:\$ )?(?:COLUMNS=\d+ )?pptune ([a-z-]+)", block, re.M))
        for name in named:
            if name.startswith("--"):  # an option of pptune itself (--version)
                assert name in root_help, f"{page.name} names `pptune {name}`, which does not exist"
                continue
            assert name in commands, f"{page.name} names `pptune {name}`, which does not exist"


def test_every_flag_in_the_docs_exists() -> None:
    flags = {f for names in docs.cli_flags().values() for f in names}
    missing = []
    for page in PAGES:
        for flag in set(re.findall(r"(?<![\w-])(--[a-z][a-z0-9-]+)", _prose(page))):
            if flag not in flags and flag not in FOREIGN:
                missing.append(f"{page.relative_to(REPO)}: {flag}")
    assert not missing, f"docs name flags no command has: {sorted(missing)}"


def test_every_command_help_has_an_example() -> None:
    for name in _commands():
        text = runner.invoke(app, [name, "--help"], env={"COLUMNS": "200"}).stdout
        assert f"pptune {name}" in text, f"`pptune {name} --help` shows no example"


def test_cli_reference_is_current() -> None:
    page = REPO / "docs" / "cli.md"
    assert page.read_text() == _pages()[page], "docs/cli.md is stale: run make docs"


def test_every_flag_of_every_command_is_in_the_reference() -> None:
    text = (REPO / "docs" / "cli.md").read_text()
    sections = dict(re.findall(r"^## `(pptune[a-z -]*)`\n(.*?)(?=^## `|\Z)", text, re.M | re.S))
    for command, flags in docs.cli_flags().items():
        title = f"pptune {command}".strip()
        assert title in sections, f"docs/cli.md has no section for `{title}`"
        absent = [f for f in flags if f"`{f}`" not in sections[title]]
        assert not absent, f"docs/cli.md does not list {absent} under `{title}`"


@pytest.mark.parametrize("name", ["accuracy.md", "benchmarks.md"])
def test_results_pages_are_current(name: str) -> None:
    page = REPO / "docs" / name
    assert page.read_text() == _pages()[page], f"docs/{name} is stale: run make docs"


def test_example_blocks_are_current() -> None:
    pages = {p: t for p, t in _pages().items() if p.name not in ("cli.md", "accuracy.md",
                                                                 "benchmarks.md")}
    assert README in pages and (REPO / "docs" / "guide" / "simulate.md") in pages
    for path, text in pages.items():
        rel = path.relative_to(REPO)
        assert path.read_text() == text, f"{rel} has stale examples: run make docs"
        for block in re.findall(r"<!-- example: .*? -->\n```text\n(.*?)```", text, re.S):
            assert block.count("\n") > 1, f"{rel}: an example block came out empty"
            assert "Traceback" not in block, f"{rel}: an example raised"


def test_readme_is_a_front_page() -> None:
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; the front page keeps to 250"
    assert "has not run" in README.read_text() or "never run on a GPU" in README.read_text()


def _anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but - and _ dropped."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(), flags=re.M | re.S)
    seen: dict[str, int] = {}
    out = set()
    for heading in re.findall(r"^#+ (.+)$", text, re.M):
        base = _anchor(heading)
        n = seen.get(base, 0)
        out.add(base if n == 0 else f"{base}-{n}")
        seen[base] = n + 1
    return out


def test_links_between_pages_resolve() -> None:
    broken = []
    for page in PAGES:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"[a-z]+:", target):
                continue  # http(s) and other schemes
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            if not dest.exists():
                broken.append(f"{page.relative_to(REPO)} -> {target} (no such file)")
            elif anchor and dest.is_file() and anchor not in _anchors(dest):
                broken.append(f"{page.relative_to(REPO)} -> {target} (no such heading)")
    assert not broken, broken


def test_no_page_cites_a_path_outside_the_repository() -> None:
    for page in PAGES:
        text = page.read_text()
        assert "/work/" not in text and "../shared" not in text, page


def test_analysis_says_when_the_results_are_of_another_run() -> None:
    same = docs_results._analysis({"date": "2026-12-01"}, "2026-12-01", ["reading"])
    newer = docs_results._analysis({"date": "2027-01-05"}, "2026-12-01", ["reading"])
    assert not any("These results are of" in line for line in same)
    assert "These results are of 2027-01-05" in newer[0] and newer[-1] == "reading"


def test_gpu_check_rows_are_rendered_when_the_check_ran() -> None:
    doc = {"date": "2027-01-05", "device": "NVIDIA H100 80GB HBM3", "preset": "h100-sxm",
           "shape": "llama3-8b widths, seq 4096, b 1, bf16", "torch": "2.13.0",
           "results": [{"op": "qkv", "analytic_ms": 0.5, "measured_ms": 0.625,
                        "analytic_over_measured": 0.8}]}
    lines = docs_results.gpu_section(doc)
    assert "| qkv | 0.5 | 0.625 | 0.8 |" in lines
    assert not any("has not run" in line for line in lines)
    assert any("has not run" in line for line in docs_results.gpu_section(None))


def test_accuracy_at_a_glance_is_computed_from_the_results(tmp_path: Path) -> None:
    from bench import docs_glance

    assert docs_glance.glance_section(tmp_path) == []  # no results, no section
    text = "\n".join(docs_glance.glance_section(docs_results.RESULTS))
    modern = docs_results.load("published_modern.json")
    peers = docs_results.load("peers.json")
    assert modern is not None and peers is not None
    assert f"{modern['within']} of {modern['of']} runs within 10%" in text
    assert f"{peers['summary']['agree']} of {peers['summary']['cases']} files" in text


def test_readme_counts_are_those_of_the_results() -> None:
    """The README's accuracy line quotes counts a rerun of `make bench` can move."""
    text = " ".join(README.read_text().split())
    modern = docs_results.load("published_modern.json")
    peers = docs_results.load("peers.json")
    assert modern is not None and peers is not None
    assert (f"NVIDIA's {modern['of']} H100/B200 recipe runs {modern['within']} come within "
            "10%") in text
    assert f"check-config on {peers['summary']['agree']} of {peers['summary']['cases']} " in text
