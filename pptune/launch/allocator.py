"""glibc's malloc told to keep the memory it frees, in a process that measures on a CPU.

PyTorch's CPU tensors come from the C library's ``malloc``. glibc serves a large
allocation (above its mmap threshold: 128 KiB at first, rising with the sizes
freed, at most 32 MiB on 64-bit) with a fresh mapping that it unmaps when the
tensor is freed, and returns the top of its heap to the kernel above its trim
threshold; the next allocation then touches new pages, and each first touch is
a page fault. Which op pays them depends on what ran and freed just before it,
so an op's time on a CPU moves with the op order: on this machine a gpt-small
last stage's whole backward took 41.4 ms right after another backward and
37.5 ms after a forward, and 35.1 and 36.7 ms with freed memory kept
(docs/measured.md). On a GPU, PyTorch's caching allocator keeps freed blocks for
reuse, and no op pays this.

``keep_freed_memory`` sets glibc's ``M_MMAP_MAX`` to 0 (every allocation from
the heap) and ``M_TRIM_THRESHOLD`` to its largest value (the heap never
shrinks) through ``mallopt(3)``, so the process reuses freed memory as the
caching allocator does: probe and validate then time the same kind of
allocation. Elsewhere (not Linux, or no glibc) it changes nothing and says why.
"""

from __future__ import annotations

import ctypes
import sys

M_TRIM_THRESHOLD = -1  # glibc's malloc.h
M_MMAP_MAX = -4
LARGEST_INT = 2**31 - 1


def keep_freed_memory() -> str | None:
    """Keep freed memory in this process (module docstring): None when done, else why
    it is not (the C library has no ``mallopt``, or refused it)."""
    if not sys.platform.startswith("linux"):
        return f"malloc left as it is on {sys.platform} (mallopt is glibc's)"
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own C library
    except (OSError, AttributeError):
        return "malloc left as it is: this C library has no mallopt (not glibc)"
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    if mallopt(M_MMAP_MAX, 0) != 1 or mallopt(M_TRIM_THRESHOLD, LARGEST_INT) != 1:
        return "malloc left as it is: mallopt refused M_MMAP_MAX / M_TRIM_THRESHOLD"
    return None
