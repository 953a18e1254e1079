"""The registry is the one list of frameworks; each adapter is complete and self-contained."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from pptune.errors import BadInput
from pptune.frameworks.common.versions import TORCH, Versions
from pptune.frameworks.read import SYNTAX_ORDER, read_config
from pptune.frameworks.registry import ADAPTERS, NAMES, VERSION_KEYS, Framework, adapter_of, find
from pptune.plan.emit import emit, file_names, parse_framework
from pptune.plan.recommend import RecommendSpec, recommend

PACKAGE = Path(__file__).resolve().parents[2] / "pptune"
FRAMEWORKS = PACKAGE / "frameworks"


@pytest.mark.parametrize("framework", list(Framework))
def test_every_framework_has_its_adapter(framework: Framework) -> None:
    adapter = ADAPTERS[framework]
    assert adapter.name == framework.value and find(framework.value) is adapter
    assert adapter.files and set(adapter.syntaxes) <= set(SYNTAX_ORDER)
    assert file_names(framework.value) == list(adapter.files)


def test_adapters_are_distinct_and_one_is_the_fallback() -> None:
    files = [name for a in ADAPTERS.values() for name in a.files]
    assert len(files) == len(set(files))
    assert [a.name for a in ADAPTERS.values() if a.fallback] == ["pptune"]
    assert NAMES == ("pptune", "deepspeed", "megatron", "torchtitan")


def test_release_keys_in_registry_order_then_torch() -> None:
    spellings = [s for key in VERSION_KEYS for s in key.spellings]
    assert spellings == ["deepspeed", "megatron", "megatron-core", "torchtitan", "torch"]
    assert {k.name: k.default for k in VERSION_KEYS} == {
        "deepspeed": "0.19.8", "megatron": "0.16.1", "torchtitan": "0.2.2", "torch": "2.13"}
    assert Versions().of(TORCH) == "2.13" and Versions().at_least(TORCH, 2, 7)
    assert not Versions({"torch": "2.5"}).at_least(TORCH, 2, 6)


def test_a_config_no_reader_produced_is_judged_as_pptunes_own() -> None:
    assert adapter_of("nemo") is ADAPTERS[Framework.PPTUNE]
    assert adapter_of("megatron") is ADAPTERS[Framework.MEGATRON]


def test_unknown_names_list_the_registry() -> None:
    with pytest.raises(BadInput, match=re.escape(
            "unknown --emit 'slurm'; choose pptune, deepspeed, megatron, torchtitan")):
        parse_framework("slurm")


def test_the_undetectable_message_names_every_format_in_the_order_tried(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("just words\n")
    with pytest.raises(BadInput, match=re.escape(
            "no DeepSpeed, torchtitan, Megatron-LM or pptune keys found; pass --format-in "
            "pptune|deepspeed|megatron|torchtitan")):
        read_config(path)


@pytest.fixture(scope="module")
def small_run():
    return recommend(RecommendSpec.of(gpus=4, model="gpt-small", gpu="a100-80gb", pp=[2],
                                   schedules=["1f1b"], sharding="none", recompute="none"))


@pytest.mark.parametrize("framework", list(Framework))
def test_each_writer_writes_exactly_its_files(framework: Framework, small_run) -> None:
    assert tuple(emit(framework, small_run).files) == ADAPTERS[framework].files


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def _module(path: Path) -> str:
    return ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)


def test_no_import_cycle_inside_the_frameworks_package() -> None:
    modules = {_module(p): p for p in FRAMEWORKS.rglob("*.py") if p.name != "__init__.py"}
    graph = {m: {i for i in _imports(p) if i in modules} for m, p in modules.items()}
    done: set[str] = set()

    def visit(m: str, path: list[str]) -> None:
        assert m not in path, f"import cycle: {' -> '.join([*path, m])}"
        if m in done:
            return
        for n in graph[m]:
            visit(n, [*path, m])
        done.add(m)

    for m in graph:
        visit(m, [])


def test_framework_names_appear_only_in_their_folders_and_the_registry() -> None:
    """Nothing outside a framework's folder (and the registry) branches on its name."""
    names = {"megatron", "deepspeed", "torchtitan"}
    own = {FRAMEWORKS / n for n in names}
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path == FRAMEWORKS / "registry.py" or any(d in path.parents for d in own):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in names:
                found.append(f"{path.relative_to(PACKAGE)}:{node.lineno} {node.value!r}")
    assert found == []
