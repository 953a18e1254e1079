"""Re-derive pptune/frameworks/megatron/known_flags.py from a Megatron-LM git repository.

    python -m bench.megatron_flags GIT_DIR [--tag core_v0.16.1] [--write]

GIT_DIR is a clone (or bare mirror) of github.com/NVIDIA/Megatron-LM. The tag's
``megatron/`` and its ``pretrain_*.py`` are exported (``git archive``) to a
temporary folder, and a child process builds the parser ``parse_args`` builds
(megatron/training/arguments.py: ``argparse.ArgumentParser(allow_abbrev=False)``
and ``add_megatron_arguments``, which includes the flags megatron-core's config
dataclasses add through ``ArgumentGroupFactory``); every option string it holds
is a flag Megatron-LM accepts. Each ``pretrain_*.py`` whose ``pretrain(...)`` call
passes an ``extra_args_provider`` adds that function's flags (an ``a if cond else
None`` provider counts as ``a``: pretrain_gpt.py's ``has_nvidia_modelopt`` is true
whenever megatron.post_training imports, which needs nothing outside Megatron-LM).

With ``--earlier``, every release before TAG (EARLIER_TAGS) is derived the same way
(before core_v0.12.0, whose ``add_megatron_arguments`` gathers them, parse_args' own
``_add_*_args`` calls; before core_v0.7.0 the module is megatron/arguments.py), and
pptune/frameworks/megatron/earlier_flags.py holds the flags they accepted that TAG does
not: removed or renamed since, so not a misspelling at an earlier
``--framework-version``.

Third-party modules the import chain names but this machine lacks (six, triton)
are stand-ins that accept any attribute: they decorate kernels and tokenizers,
and no flag comes from them. Without ``--write`` the derived module is compared
with the one in the repository (exit 1 when they differ).
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
import tarfile
import tempfile
import textwrap
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TARGET = REPO / "pptune" / "frameworks" / "megatron" / "known_flags.py"
TAG = "core_v0.16.1"
EARLIER = REPO / "pptune" / "frameworks" / "megatron" / "earlier_flags.py"
# every megatron-core release tag before TAG (release candidates left out)
EARLIER_TAGS = tuple(f"core_v{v}" for v in (
    "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "0.9.0", "0.10.0", "0.11.0", "0.12.0",
    "0.12.1", "0.12.2", "0.12.3", "0.13.0", "0.13.1", "0.14.0", "0.15.0", "0.15.1", "0.15.2",
    "0.15.3", "0.16.0"))


def export(git_dir: Path, tag: str, into: Path) -> list[str]:
    """The tag's megatron/ and pretrain_*.py under ``into``; the entry scripts' names."""
    listed = subprocess.run(["git", "-C", str(git_dir), "ls-tree", "--name-only", tag],
                            capture_output=True, text=True, check=True).stdout.split()
    entries = sorted(n for n in listed if n.startswith("pretrain_") and n.endswith(".py"))
    archive = subprocess.run(["git", "-C", str(git_dir), "archive", tag, "megatron", *entries],
                             capture_output=True, check=True).stdout
    tar_path = into / "tag.tar"
    tar_path.write_bytes(archive)
    with tarfile.open(tar_path) as tar:
        tar.extractall(into, filter="data")
    return entries


def derive(git_dir: Path, tag: str = TAG) -> dict[str, Any]:
    """{"flags": [...], "entries": [...], "extra": {entry: [...]}} at ``tag``."""
    with tempfile.TemporaryDirectory() as tmp:
        entries = export(git_dir, tag, Path(tmp))
        done = subprocess.run([sys.executable, "-m", "bench.megatron_flags", "--child", tmp,
                               *entries], capture_output=True, text=True, cwd=REPO, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-2000:])
        found: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return {"entries": entries, **found}


class _AnyMeta(type):
    """A stand-in class: every attribute is itself; calling it with one callable returns
    that callable (a decorator), else itself."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return cls

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return args[0] if len(args) == 1 and callable(args[0]) and not kwargs else cls

    def __getitem__(cls, key: Any) -> Any:
        return cls


class _Any(metaclass=_AnyMeta):
    pass


def _stand_in(name: str) -> Any:
    import types

    class Module(types.ModuleType):
        __version__ = "99.0.0"  # version checks (triton >= 3.4) pass

        def __getattr__(self, attr: str) -> Any:
            if attr.startswith("__"):
                raise AttributeError(attr)
            return _Any

    module = Module(name)
    module.__path__ = []  # a package: its submodules import too
    return module


def _import_arguments() -> Any:
    """megatron.training.arguments (megatron/arguments.py before core_v0.7.0)."""
    import importlib

    name = ("megatron.training.arguments" if (Path(sys.path[0]) / "megatron" / "training").is_dir()
            else "megatron.arguments")
    for _ in range(300):
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name is None or exc.name.startswith("megatron"):
                raise
            for key in [k for k in sys.modules if k.startswith("megatron")]:
                del sys.modules[key]
            sys.modules[exc.name] = _stand_in(exc.name)
    raise RuntimeError("too many missing modules")


def _options(parser: argparse.ArgumentParser) -> set[str]:
    return {o for action in parser._actions for o in action.option_strings}


def _provider(root: Path, entry: str) -> Any:
    """The function ``pretrain(..., extra_args_provider=F)`` names in ``entry`` (None)."""
    tree = ast.parse((root / entry).read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "extra_args_provider":
            value = node.value.body if isinstance(node.value, ast.IfExp) else node.value
            if not isinstance(value, ast.Name):
                return None
            for item in tree.body:
                if isinstance(item, ast.FunctionDef) and item.name == value.id:
                    space: dict[str, Any] = {}
                    exec(compile(ast.Module([item], []), entry, "exec"), space)
                    return space[value.id]
                if isinstance(item, ast.Try):  # try: from megatron.post_training... import F
                    for sub in item.body:
                        if isinstance(sub, ast.ImportFrom) and any(
                                a.name == value.id for a in sub.names):
                            module = __import__(sub.module or "", fromlist=[value.id])
                            return getattr(module, value.id)
    return None


def _add_all(arguments: Any, parser: argparse.ArgumentParser) -> None:
    """What parse_args adds: ``add_megatron_arguments`` (from core_v0.12.0); before it,
    parse_args' own ``parser = _add_..._args(parser)`` calls, in its order."""
    if hasattr(arguments, "add_megatron_arguments"):
        arguments.add_megatron_arguments(parser)
        return
    import inspect

    body = ast.parse(textwrap.dedent(inspect.getsource(arguments.parse_args)))
    for node in ast.walk(body):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id.startswith("_add_")):
            getattr(arguments, node.func.id)(parser)


def child(root: Path, entries: list[str]) -> None:
    sys.path.insert(0, str(root))
    arguments = _import_arguments()
    parser = argparse.ArgumentParser(allow_abbrev=False)
    _add_all(arguments, parser)
    flags = _options(parser)
    extra = {}
    for entry in entries:
        provider = _provider(root, entry)
        if provider is not None:
            own = argparse.ArgumentParser(allow_abbrev=False, add_help=False)
            extra[entry] = sorted(_options(provider(own)) - flags)
    print(json.dumps({"flags": sorted(flags), "extra": extra}))


def _words(names: list[str], indent: str) -> str:
    return textwrap.fill(" ".join(names), width=96, initial_indent=indent,
                         subsequent_indent=indent, break_on_hyphens=False, break_long_words=False)


def render(found: dict[str, Any], tag: str = TAG) -> str:
    extra = "".join(f'    "{entry}": frozenset("""\n{_words(names, "    ")}\n""".split()),\n'
                    for entry, names in sorted(found["extra"].items()))
    return f'''"""Every flag Megatron-LM's parse_args accepts at {tag} (generated: do not edit).

Derived by ``python -m bench.megatron_flags GIT_DIR --write`` from Megatron-LM's git tag
{tag}: the option strings of the parser parse_args builds
(megatron/training/arguments.py: ``argparse.ArgumentParser(allow_abbrev=False)`` and
``add_megatron_arguments``, with the flags megatron-core's config dataclasses add through
``ArgumentGroupFactory``), and per entry script the flags its ``extra_args_provider``
adds. ``allow_abbrev=False``: only these exact names are accepted; parse_args calls
``parser.parse_args()`` (pretrain() never passes ignore_unknown_args), so any other
flag exits with argparse's "unrecognized arguments".
"""

from __future__ import annotations

TAG = "{tag}"
# Megatron-LM's own entry scripts at TAG
ENTRIES = frozenset("""
{_words(found["entries"], "")}
""".split())
FLAGS = frozenset("""
{_words(found["flags"], "")}
""".split())
# the flags an entry script's extra_args_provider adds
EXTRA_FLAGS: dict[str, frozenset[str]] = {{
{extra}}}
'''


def written_flags(git_dir: Path, tag: str) -> set[str]:
    """Every ``--flag`` string passed to an ``add_argument`` call in the tag's megatron/
    and pretrain_*.py, read without importing them: a superset of its parser's flags
    (core_v0.6.0 and core_v0.7.0, whose import chains the stand-ins do not satisfy, had
    no flags from config dataclasses, so none is missed)."""
    flags: set[str] = set()
    with tempfile.TemporaryDirectory() as tmp:
        export(git_dir, tag, Path(tmp))
        for path in Path(tmp).rglob("*.py"):
            try:
                tree = ast.parse(path.read_text(errors="replace"))
            except SyntaxError:
                continue
            for node in ast.walk(tree):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr == "add_argument"):
                    flags |= {a.value for a in node.args if isinstance(a, ast.Constant)
                              and isinstance(a.value, str) and a.value.startswith("--")}
    return flags


def render_earlier(git_dir: Path, current: dict[str, Any]) -> str:
    """earlier_flags.py: the flags of EARLIER_TAGS (entry scripts' extra ones too) that
    ``current`` (TAG's derived flags) does not hold."""
    now = set(current["flags"]).union(*current["extra"].values())
    gone: set[str] = set()
    for tag in EARLIER_TAGS:
        try:
            found = derive(git_dir, tag)
            flags = set(found["flags"]).union(*found["extra"].values())
        except RuntimeError:  # an import chain the stand-ins cannot satisfy
            flags = written_flags(git_dir, tag)
        gone |= flags - now
    return f'''"""Flags earlier Megatron-LM releases accepted and {TAG} does not (generated: do not edit).

Derived by ``python -m bench.megatron_flags GIT_DIR --earlier --write`` from Megatron-LM's
git tags {EARLIER_TAGS[0]} to {EARLIER_TAGS[-1]} (every megatron-core release before
{TAG}), as known_flags.py is from {TAG}: removed or renamed since, so at
an earlier ``--framework-version megatron-core`` they are no misspelling (unknown.py).
"""

from __future__ import annotations

FIRST = "{EARLIER_TAGS[0]}"  # the earliest release read
FLAGS = frozenset("""
{_words(sorted(gone), "")}
""".split())
'''


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        child(Path(sys.argv[2]), sys.argv[3:])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("git_dir", type=Path)
    ap.add_argument("--tag", default=TAG)
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--earlier", action="store_true",
                    help="earlier_flags.py from EARLIER_TAGS instead (minutes)")
    args = ap.parse_args()
    found = derive(args.git_dir, args.tag)
    target, text = ((EARLIER, render_earlier(args.git_dir, found)) if args.earlier
                    else (TARGET, render(found, args.tag)))
    if args.write:
        target.write_text(text)
        print(f"wrote {target.relative_to(REPO)}")
    elif target.read_text() != text:
        raise SystemExit(f"{target.relative_to(REPO)} differs from {args.tag}: rerun with "
                         "--write")
    else:
        print(f"{target.relative_to(REPO)} matches {args.tag}")


if __name__ == "__main__":
    main()
