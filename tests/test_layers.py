"""Imports point down the layers of the README's Architecture section (there
numbered from the top, cli = 1; here by height, costmodel = 0); no module is
over 400 lines; no two modules import each other.

Every ``import`` of every module under pptune/ and bench/ (those inside
functions included) is read with ``ast``, nothing is executed.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "pptune"
BENCH = ROOT / "bench"

# Higher layers may import lower ones; a layer never imports its own level
# (other than its own package) or anything above it.
LAYERS = {
    "costmodel": 0, "errors": 0, "limits": 0,
    "files": 0.5,  # bounded reads and safe writes: raise errors' BadInput, used by schemas
    "options": 0.75,  # the option groups, declared once: the CLI's flags and the plan file's request
    "schemas": 1,
    "costs": 2, "report": 2, "launch": 2,
    "frameworks": 2.5,  # one adapter per framework: reads configs, prices and writes plans
    "plan": 3, "check": 3, "observe": 3, "probe": 3, "validate": 3,
    "tune": 4,  # runs the planner's search and validate's trials
    "cli": 5, "__main__": 6,  # python -m pptune: runs the command line
}
# Same-level imports that are part of the design: validate builds its stages
# with the probe's layer builders and measures a quick profile with it.
SIDEWAYS = {("validate", "probe")}


def unit_of(path: Path) -> str:
    """The layer a file belongs to: its package under pptune/, or its module name."""
    rel = path.relative_to(PACKAGE)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def imports_of(path: Path) -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in the file."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: relative import"
            base = node.module or ""
            if base == "pptune":  # `from pptune import launch` names the package imported
                out += [(node.lineno, f"pptune.{a.name}") for a in node.names]
            else:
                out.append((node.lineno, base))
    return out


SOURCES = sorted(p for p in PACKAGE.rglob("*.py") if unit_of(p) != "__init__")


def test_every_package_has_a_layer() -> None:
    assert {unit_of(p) for p in SOURCES} == set(LAYERS)


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_point_down(path: Path) -> None:
    unit = unit_of(path)
    wrong = []
    for line, module in imports_of(path):
        parts = module.split(".")
        if parts[0] != "pptune" or len(parts) < 2 or parts[1] == unit:
            continue
        target = parts[1]
        if LAYERS[target] >= LAYERS[unit] and (unit, target) not in SIDEWAYS:
            wrong.append(f"line {line}: {module} ({target}, layer {LAYERS[target]})")
    assert not wrong, f"{path.name} ({unit}, layer {LAYERS[unit]}) imports upward or sideways: {wrong}"


def test_core_imports_only_the_standard_library() -> None:
    """costmodel is pure: the planner and simulator run with Python alone."""
    foreign = []
    for path in PACKAGE.joinpath("costmodel").rglob("*.py"):
        for line, module in imports_of(path):
            top = module.split(".")[0]
            if top not in sys.stdlib_module_names and not module.startswith("pptune.costmodel"):
                foreign.append(f"{path.name}:{line}: {module}")
    assert foreign == []


def test_the_rules_catch_an_upward_import(tmp_path: Path) -> None:
    """The checker itself: a renderer importing a check is found."""
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from pptune.check.rules import check\n    import pptune.cli\n")
    assert imports_of(bad) == [(2, "pptune.check.rules"), (3, "pptune.cli")]
    upward = [m for _, m in imports_of(bad) if LAYERS[m.split(".")[1]] >= LAYERS["report"]]
    assert upward == ["pptune.check.rules", "pptune.cli"]


# ---------------------------------------------------------------- module size

MAX_MODULE_LINES = 400
# Known cases, owned by the adapters/options rework: remove when merged.


def test_no_module_is_over_400_lines() -> None:
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


# ---------------------------------------------------------------- import cycles


def module_name(path: Path, root: Path = ROOT) -> str:
    """``pptune/probe/build.py`` -> ``pptune.probe.build``; a package's ``__init__`` is the package."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules_imported(path: Path, known: set[str], root: Path = ROOT) -> set[str]:
    """The modules of ``known`` that the file imports, at module level or in a function.

    ``from a.b import c`` imports module ``a.b.c`` when there is one, else ``a.b``
    (``c`` is a name defined in it); relative imports are resolved from the file's package."""
    here = module_name(path, root)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for a in node.names:
                sub = f"{base}.{a.name}"
                out.add(sub if sub in known else base)
    return (out & known) - {here}


ALL_SOURCES = sorted([*PACKAGE.rglob("*.py"), *BENCH.rglob("*.py")])


def mutual_imports(paths: list[Path], root: Path = ROOT) -> set[tuple[str, str]]:
    """Every pair of modules (sorted names) each of which imports the other."""
    known = {module_name(p, root) for p in paths}
    graph = {module_name(p, root): modules_imported(p, known, root) for p in paths}
    return {
        (min(a, b), max(a, b)) for a, targets in graph.items() for b in targets if a in graph.get(b, ())
    }


def test_no_two_modules_import_each_other() -> None:
    pairs = mutual_imports(ALL_SOURCES)
    assert pairs == set()


def test_the_cycle_check_catches_a_function_level_pair(tmp_path: Path) -> None:
    """The checker itself: a pair that meets only inside functions, and a
    ``from package import module`` form, are both found; a one-way import is not."""
    pkg = tmp_path / "bench"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from bench import b\n")
    (pkg / "b.py").write_text("from bench.a import f\nimport bench.c\n")
    (pkg / "c.py").write_text("from . import a\n")
    paths = sorted(pkg.glob("*.py"))
    known = {module_name(p, tmp_path) for p in paths}
    assert known == {"bench", "bench.a", "bench.b", "bench.c"}
    assert modules_imported(pkg / "a.py", known, tmp_path) == {"bench.b"}
    assert modules_imported(pkg / "b.py", known, tmp_path) == {"bench.a", "bench.c"}
    assert modules_imported(pkg / "c.py", known, tmp_path) == {"bench.a"}
    assert mutual_imports(paths, tmp_path) == {("bench.a", "bench.b")}
