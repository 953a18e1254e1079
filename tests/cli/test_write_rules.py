"""What pptune writes: regular files only, symlinks followed (never replaced),
emitted files kept unless --force, several files all or nothing."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from pptune.errors import BadInput
from pptune.files import check_output, write_all, write_text

KEEP = "KEEP\n"


def test_a_symlink_is_followed_and_kept(tmp_path: Path) -> None:
    target, link = tmp_path / "target.json", tmp_path / "link.json"
    target.write_text(KEEP)
    link.symlink_to(target)
    write_text(link, "new\n")
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.read_text() == "new\n"


def test_special_files_and_folders_are_refused_before_writing(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    for path, words in [(tmp_path / "fifo", "not a regular file"), (tmp_path, "directory"),
                        (tmp_path / "f.txt" / "x.json", "is not a folder")]:
        if path.name == "x.json":
            (tmp_path / "f.txt").write_text(KEEP)
        with pytest.raises(BadInput, match=words):
            check_output(path, "-o")
        with pytest.raises(BadInput, match=words):
            write_text(path, "x")
    assert (tmp_path / "fifo").is_fifo()


def test_a_link_to_an_open_pipe_is_refused_as_not_a_regular_file(tmp_path: Path) -> None:
    """``-o /dev/stdout`` under a pipe: the link's target (``/proc/self/fd/N``) names
    ``pipe:[inode]``, which realpath cannot resolve; it was refused at the write with
    "No such file or directory". The link lives in tmp_path; nothing is written."""
    read_end, write_end = os.pipe()
    try:
        link = tmp_path / "stdout"
        link.symlink_to(f"/proc/self/fd/{write_end}")
        with pytest.raises(BadInput, match=r"^-o .*stdout is not a regular file \(a device, "
                                           r"FIFO or socket\); pptune writes regular files only"):
            check_output(link, "-o")
    finally:
        os.close(read_end)
        os.close(write_end)


def test_emitted_files_are_kept_without_force(tmp_path: Path) -> None:
    (tmp_path / "a.sh").write_text(KEEP)
    with pytest.raises(BadInput, match=r"already has a\.sh; pass --force"):
        write_all(tmp_path, {"a.sh": "new", "b.json": "{}"}, force=False)
    assert (tmp_path / "a.sh").read_text() == KEEP and not (tmp_path / "b.json").exists()
    written = write_all(tmp_path, {"a.sh": "new", "b.json": "{}"}, force=True,
                        modes={"a.sh": 0o777})
    assert [w.path.name for w in written] == ["a.sh", "b.json"]
    assert (tmp_path / "a.sh").read_text() == "new" and os.access(tmp_path / "a.sh", os.X_OK)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.sh", "b.json"]  # no staging left


def test_several_files_are_all_or_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A failure while staging the second file (a full disk) leaves no file at all."""
    calls = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        calls.append(fd)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    out = tmp_path / "launch"
    with pytest.raises(BadInput, match="No space left on device; no file was changed"):
        write_all(out, {"ds_config.json": "{}", "ds_partition.txt": "x"}, force=False)
    assert list(out.iterdir()) == []


def test_a_loop_of_links_is_said_a_loop(tmp_path: Path) -> None:
    """Two links pointing at each other: the write is refused naming the loop, and both
    links stay as they were."""
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.symlink_to(b)
    b.symlink_to(a)
    with pytest.raises(BadInput, match=r"-o .*a\.json: too many levels of symbolic links"):
        check_output(a, "-o")
    with pytest.raises(BadInput, match="symbolic links"):
        write_text(a, "x")
    assert os.readlink(a) == str(b) and os.readlink(b) == str(a)
