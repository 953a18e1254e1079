"""What every peer shares: a single-process "fake" process group sized to the
config's world, and one JSON verdict line on stdout.

torch's fake backend (torch.testing._internal.distributed.fake_pg) answers
every collective without data, so a framework's setup code runs its real
checks for any world size on one CPU process, rank 0.
"""

from __future__ import annotations

import json
import os
import sys
import traceback
from collections.abc import Callable
from typing import Any


def init_fake_world(world: int, rank: int = 0) -> None:
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    os.environ.update(RANK=str(rank), LOCAL_RANK="0", WORLD_SIZE=str(world),
                      MASTER_ADDR="localhost", MASTER_PORT="29500")
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)


def verdict(accepted: bool, error: str | None = None, **facts: Any) -> dict[str, Any]:
    return {"accepted": accepted, "error": error, **facts}


def main(judge: Callable[[dict[str, Any]], dict[str, Any]]) -> None:
    """Run ``judge(case)`` on the case given as JSON in argv[1]; print its verdict.

    An exception the framework raises is its refusal: the verdict records its
    type and first line. Output from the framework goes to stderr.
    """
    case = json.loads(sys.argv[1])
    stdout = sys.stdout
    sys.stdout = sys.stderr
    try:
        result = judge(case)
    except Exception as exc:  # the framework's refusal, whatever it raises
        line = (str(exc).strip().splitlines() or [""])[0][:300]
        where = traceback.extract_tb(exc.__traceback__)[-1]
        result = verdict(False, f"{type(exc).__name__}: {line}",
                         raised_at=f"{os.path.relpath(where.filename, _site())}:{where.name}")
    sys.stdout = stdout
    print(json.dumps(result))


def _site() -> str:
    import torch

    return os.path.dirname(os.path.dirname(torch.__file__))
