"""Reading and writing user files without surprises.

Write rules (stated in the README):
- only regular files are written; a device node, FIFO, socket or directory
  in the way is refused;
- a symlink is followed to its target, which is replaced atomically; the
  link itself is never replaced;
- every file appears whole or not at all (temp file + rename in the same
  folder); several files (``--emit``) are staged in one temporary folder
  beside them and moved into place only when all were written;
- emitted files that already exist are kept unless ``--force``; a file given with
  ``-o`` (or ``--trace``, ``--svg``) is replaced only where it is empty or holds the
  same kind of output (``Kind``: an earlier run's), never a file of another kind;
- a file replaced keeps its permission bits (``chmod 600`` stays 600), and the
  writer says so (``Written.replaced``); the rename gives the path a new inode,
  so other hard links to the old file keep the old bytes (``Written.other_links``);
- output paths are checked before the work starts (``check_output``).

Reads are bounded: ``read_limited`` refuses anything that is not a regular
file and anything larger than the stated limit, before reading it whole.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import stat
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pptune.errors import EXIT_FAILED, BadInput, PptuneError

MIB = 1 << 20


def _size(n: int) -> str:
    return f"{n / MIB:.2f} MiB".replace(".00 MiB", " MiB") if n >= MIB else f"{n} bytes"


def dumps_json(obj: Any, indent: int | None = None, sort_keys: bool = False) -> str:
    """``json.dumps`` as pptune writes JSON: never NaN or Infinity (JSON has no such
    numbers); one that slipped through is one line and exit 1, not a traceback."""
    try:
        return json.dumps(obj, indent=indent, sort_keys=sort_keys, allow_nan=False)
    except ValueError as exc:
        raise PptuneError(f"cannot write the result as JSON: {exc} (a pptune bug: please "
                          "report it with the command line)", exit_code=EXIT_FAILED) from None


def loads_json(text: str, label: str, what: str) -> Any:
    """``json.loads`` of text from a user's file. JSON nested deeper than Python's parser
    allows, or a number too long to convert, is BadInput naming ``label`` (``what`` the
    file should be, "a plan"); a syntax error stays ``json.JSONDecodeError`` for the
    caller to word."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        raise
    except RecursionError:
        raise BadInput(f"{label}: JSON nested too deeply to be {what}") from None
    except ValueError as exc:  # e.g. an integer literal with thousands of digits
        raise BadInput(f"{label} is not valid JSON: {first_line(exc)}") from None


def first_line(exc: BaseException) -> str:
    """A parser's error as one short clause, Python's 4,300-digit guard in words."""
    text = str(exc).strip().splitlines()
    if text and "integer string conversion" in text[0]:
        return "a number with thousands of digits; expected counts like 8 or 512"
    return text[0][:200] if text else type(exc).__name__


def _missing(path: Path) -> str:
    """Why ``path`` is not there: no such file, or a symbolic link to one that is not."""
    try:
        if path.is_symlink():
            return f"a symbolic link to {os.readlink(path)}, which does not exist"
    except (OSError, ValueError):
        pass
    return "no such file"


def read_limited(path: Path, what: str, limit_bytes: int) -> bytes:
    """The bytes of a regular file of at most ``limit_bytes``; BadInput otherwise."""
    try:
        st = path.stat()
        if stat.S_ISDIR(st.st_mode):
            raise BadInput(f"{what} {path} is a directory; expected a file")
        if not stat.S_ISREG(st.st_mode):  # a FIFO or device would block or never end
            raise BadInput(f"{what} {path} is not a regular file (a device, FIFO or socket)")
        if st.st_size > limit_bytes:
            raise BadInput(f"{what} {path} is {_size(st.st_size)}; pptune reads up to "
                           f"{_size(limit_bytes)}")
        with path.open("rb") as fh:
            data = fh.read(limit_bytes + 1)
    except FileNotFoundError:
        raise BadInput(f"{what} not found: {path} ({_missing(path)})") from None
    except OSError as exc:
        raise BadInput(f"cannot read {what} {path}: {exc.strerror or exc}") from None
    except ValueError:  # a NUL byte in the path
        raise BadInput(f"cannot read {what} {str(path)!r}: the path is not valid") from None
    if len(data) > limit_bytes:  # the file grew while we read it
        raise BadInput(f"{what} {path} is larger than {_size(limit_bytes)}")
    return data


def _target(path: Path) -> Path:
    """Where a write to ``path`` lands: a symlink's final target, else the path."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


@dataclass(frozen=True)
class Kind:
    """What an output file holds, by which a file already at its path is known to be
    pptune's output of the same kind (an earlier run's), the only kind pptune replaces
    there: a JSON object with these top-level ``keys`` (and, for a trace, ``otherData``
    named by pptune), or text holding ``marker``."""

    what: str  # "a pptune plan file"
    keys: frozenset[str] = frozenset()
    marker: bytes = b""

    def holds(self, data: bytes) -> bool:
        if self.marker:
            return self.marker in data
        try:
            obj = json.loads(data)
        except (ValueError, RecursionError):  # not JSON (UnicodeDecodeError included)
            return False
        if not isinstance(obj, dict) or not self.keys <= obj.keys():
            return False
        other = obj.get("otherData")  # a trace: pptune's names its run (report/trace.py)
        return "traceEvents" not in self.keys or (
            isinstance(other, dict) and str(other.get("name", "")).startswith("pptune"))


PLANS = Kind("a pptune plan file (recommend --json -o)", frozenset({"plans", "rejected"}))
PROFILE = Kind("a pptune profile", frozenset({"schema_version", "layers"}))
TRACE = Kind("a pptune trace (simulate or validate --trace)", frozenset({"traceEvents"}))
SVG_MARKER = b"<desc>pptune timeline</desc>"  # report/svg.py writes it
SVG = Kind("a pptune timeline SVG (simulate --svg)", marker=SVG_MARKER)
KIND_LIMIT = 256 * MIB  # a larger file in the way is not read to be recognised


def check_output(path: Path, flag: str, inputs: Iterable[tuple[str, Path | None]] = (),
                 kind: Kind | None = None) -> None:
    """Refuse an output path that cannot be written, that is a file the same command
    reads (``inputs``: flag and path), or that holds something else than ``kind`` (a
    launch script under a mistyped ``-o``: replacing it would lose it; an empty file or
    an earlier run's output is replaced), before any work is done."""
    for name, given in inputs:
        if given is not None and same_file(path, Path(given)):
            raise BadInput(f"{flag} {path} is the {name} file this command reads; write "
                           "to another path")
    try:
        if path.is_symlink() and path.exists() and not path.is_dir() \
                and not stat.S_ISREG(path.stat().st_mode):
            # a link to an open pipe or terminal (/dev/stdout -> /proc/self/fd/1): its
            # target's name (pipe:[inode]) does not resolve, so look through the link
            raise BadInput(f"{flag} {path} is not a regular file (a device, FIFO or socket); "
                           "pptune writes regular files only")
        target = _target(path)
        if target.exists() or target.is_symlink():
            mode = target.lstat().st_mode
            if stat.S_ISDIR(mode):
                raise BadInput(f"{flag} {path} is a directory; give a file name")
            if stat.S_ISLNK(mode):  # realpath stops inside a loop of links
                raise BadInput(f"{flag} {path}: too many levels of symbolic links (a loop); "
                               "give a file name")
            if not stat.S_ISREG(mode):
                raise BadInput(f"{flag} {path} is not a regular file (a device, FIFO or socket); "
                               "pptune writes regular files only")
            _same_kind(target, path, flag, kind)
        folder = target.parent if str(target.parent) else Path(".")
        if not folder.is_dir():
            raise BadInput(f"{flag} {path}: {folder} is not a folder" if folder.exists()
                           else f"{flag} {path}: the folder {folder} does not exist")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise BadInput(f"{flag} {path}: the folder {folder} is not writable")
    except (OSError, ValueError) as exc:
        raise BadInput(f"{flag} {path}: {getattr(exc, 'strerror', None) or exc}") from None


def _same_kind(target: Path, path: Path, flag: str, kind: Kind | None) -> None:
    """Refuse a non-empty file at ``target`` that does not hold ``kind`` (check_output)."""
    size = target.stat().st_size
    if kind is None or size == 0:
        return
    if size <= KIND_LIMIT:
        with target.open("rb") as fh:
            if kind.holds(fh.read(KIND_LIMIT)):
                return
    raise BadInput(f"{flag} {path} already holds something other than {kind.what}; "
                   "pptune replaces only its own output there: give another path, or "
                   "delete the file first")


def same_file(a: Path, b: Path) -> bool:
    """Whether two paths name one file (links and relative spellings included)."""
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
        return a.resolve() == b.resolve()
    except (OSError, ValueError, RuntimeError):
        return False


def distinct_inputs(paths: Iterable[Path], what: str, limit_bytes: int, why: str
                    ) -> tuple[list[Path], list[str]]:
    """``paths`` without repeats (one file under two names, or two files of the same
    bytes), and a note for each left out, ending in ``why`` (what one file stands for).
    A file that cannot be read is kept: its reader (given ``what`` and ``limit_bytes``)
    says why."""
    kept: list[tuple[Path, str | None]] = []
    notes = []
    for path in paths:
        digest = _digest(path, limit_bytes)
        twin = next((p for p, d in kept
                     if same_file(path, p) or (d is not None and d == digest)), None)
        if twin is None:
            kept.append((path, digest))
            continue
        how = ("is given twice" if str(path) == str(twin) else
               f"is {twin}, given already" if same_file(path, twin) else
               f"holds the same bytes as {twin}")
        notes.append(f"{path} {how}: counted once ({why})")
    return [p for p, _ in kept], notes


def _digest(path: Path, limit_bytes: int) -> str | None:
    """SHA-256 of a regular file of at most ``limit_bytes``, read in chunks; None else."""
    try:
        st = path.stat()
        if not stat.S_ISREG(st.st_mode) or st.st_size > limit_bytes:
            return None
        h = hashlib.sha256()
        with path.open("rb") as fh:
            for chunk in iter(lambda: fh.read(MIB), b""):
                h.update(chunk)
        return h.hexdigest()
    except (OSError, ValueError):
        return None


@dataclass(frozen=True)
class Written:
    """A file pptune wrote: ``replaced`` when a regular file was there before (its
    permission bits were kept), ``other_links`` the hard links to that file besides
    ``path``, which the rename left holding the old bytes."""

    path: Path
    replaced: bool = False
    other_links: int = 0

    def note(self) -> str:
        """What the "wrote" line adds: "" for a new file."""
        if not self.replaced:
            return ""
        if not self.other_links:
            return "replaced the previous one"
        n = self.other_links
        return (f"replaced the previous one; its {n} other hard link{'s' * (n > 1)} "
                f"still {'hold' if n > 1 else 'holds'} the old content")


def _replacing(target: Path, path: Path, wanted: int) -> tuple[int, Written]:
    """The mode to give a new file at ``target`` (``wanted`` less the umask, or the
    permission bits of the regular file it replaces, with execute added where that
    one is readable when ``wanted`` is executable) and what the write will have done."""
    try:
        st = os.stat(target)
    except FileNotFoundError:
        return wanted & ~_umask(), Written(path)
    if not stat.S_ISREG(st.st_mode):  # check_output refused it; a race: let rename say
        return wanted & ~_umask(), Written(path)
    mode = st.st_mode & 0o777  # never a set-user-ID bit carried onto new content
    if wanted & 0o111:  # a script stays runnable by whoever could read the old one
        mode |= (mode & 0o444) >> 2
    return mode, Written(path, replaced=True, other_links=max(st.st_nlink - 1, 0))


def write_text(path: Path, text: str, mode: int = 0o666) -> Written:
    """Write ``text`` whole or not at all; a symlink's target is written, not the link.
    A file replaced keeps its permission bits (``_replacing``)."""
    path = Path(path)
    check_output(path, "cannot write")
    target = _target(path)
    folder = target.parent if str(target.parent) else Path(".")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=folder)
    except OSError as exc:
        raise BadInput(f"cannot write {path}: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        new_mode, written = _replacing(target, path, mode)
        os.chmod(tmp, new_mode)  # mkstemp makes 0600
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise BadInput(f"cannot write {path}: {exc.strerror or exc}") from None
    return written


def _umask() -> int:
    umask = os.umask(0)
    os.umask(umask)
    return umask


def check_folder(directory: Path, names: list[str], force: bool, flag: str = "-o") -> None:
    """Refuse a folder whose files would be overwritten (without --force) or cannot be."""
    if directory.exists() and not directory.is_dir():
        raise BadInput(f"{flag} {directory} exists and is not a directory "
                       "(with --emit, -o is a folder)")
    if not directory.exists():
        parent = directory.parent if str(directory.parent) else Path(".")
        existing = next((p for p in [parent, *parent.parents] if p.exists()), Path("."))
        if not existing.is_dir():
            kind = "a file, not a folder" if existing.is_file() else "not a folder"
            raise BadInput(f"{flag} {directory}: cannot create it ({existing} is {kind})")
        if not os.access(existing, os.W_OK | os.X_OK):
            raise BadInput(f"{flag} {directory}: cannot create it ({existing} is not writable)")
        return
    if not os.access(directory, os.W_OK | os.X_OK):
        raise BadInput(f"{flag} {directory} is not writable")
    present = [n for n in names if (directory / n).exists() or (directory / n).is_symlink()]
    special = [n for n in present if not (directory / n).is_file()]
    if special:
        raise BadInput(f"{flag} {directory}: {', '.join(special)} exists and is not a regular "
                       "file; pptune writes regular files only")
    if present and not force:
        raise BadInput(f"{flag} {directory} already has {', '.join(present)}; pass --force to "
                       "overwrite, or choose another folder")


def write_all(directory: Path, files: dict[str, str], force: bool,
              modes: dict[str, int] | None = None) -> list[Written]:
    """Write several files all-or-nothing: staged in a temporary folder beside
    them, moved into place only when every one was written. A file replaced
    (``force``) keeps its permission bits (``_replacing``)."""
    check_folder(directory, list(files), force)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=".pptune-staging.", dir=directory))
    except OSError as exc:
        raise BadInput(f"cannot create {directory}: {exc.strerror or exc}") from None
    try:
        out = []
        for name, text in files.items():
            with (stage / name).open("w", encoding="utf-8") as fh:
                fh.write(text)
                fh.flush()
                os.fsync(fh.fileno())
            dest = _target(directory / name)
            mode, written = _replacing(dest, directory / name, (modes or {}).get(name, 0o666))
            os.chmod(stage / name, mode)
            out.append(written)
        for name in files:  # renames inside one folder: no data is written here
            os.replace(stage / name, _target(directory / name))
        return out
    except OSError as exc:
        raise BadInput(f"cannot write into {directory}: {exc.strerror or exc}; "
                       "no file was changed") from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)
