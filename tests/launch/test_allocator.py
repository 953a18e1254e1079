"""glibc's malloc keeps the memory it frees in a process that measures on a CPU."""

from __future__ import annotations

import subprocess
import sys

import pytest

# a 200 MiB buffer written through, freed, and the resident bytes that went with it
FREED = """
import sys
from pptune.launch.allocator import keep_freed_memory

def resident():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096

if sys.argv[1] == "keep":
    assert keep_freed_memory() is None
buf = bytearray(b"x") * (200 * 2**20)
before = resident()
del buf
print(before - resident())
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="mallopt is glibc's (Linux)")
def test_freed_memory_stays_mapped_for_the_next_allocation() -> None:
    # by default glibc unmaps a large freed buffer (the next one faults its pages in
    # again); kept, the process holds it for reuse, as PyTorch's CUDA caching allocator
    freed = {mode: int(subprocess.run([sys.executable, "-c", FREED, mode], check=True,
                                      capture_output=True, text=True).stdout)
             for mode in ("default", "keep")}
    assert freed["default"] >= 190 * 2**20
    assert freed["keep"] < 10 * 2**20
