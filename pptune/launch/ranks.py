"""Process launch shared by `probe` and `validate` (no torch at import).

Standalone, a command spawns one process per rank on this host, gives them a
loopback rendezvous and collects their messages from a queue; under
``torchrun`` it joins the job instead. Ranks report on the queue as
``(kind, rank, payload)`` with kind ``ready``, ``progress``, ``done`` or
``error``. A rank that fails, dies or stays silent past the timeout is
reported in one line (``RunFailed``, exit 1), never waited on forever; every
child is ended before returning.
"""

from __future__ import annotations

import multiprocessing
import os
import queue as queue_mod
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Protocol

from pptune.errors import EXIT_FAILED, BadInput, PptuneError, RunFailed, TimeLimit
from pptune.launch import allocator
from pptune.launch.deps import import_torch


class GroupSettings(Protocol):
    """What a rank needs to join its process group (``CommPlan``, ``RunSpec``)."""

    @property
    def backend(self) -> str: ...  # "gloo" or "nccl"
    @property
    def device(self) -> str: ...  # "cpu" or "cuda"
    @property
    def threads(self) -> int: ...  # torch threads per CPU rank
    @property
    def timeout_s(self) -> float: ...  # the process group's and the parent's wait


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def torchrun_env() -> dict[str, int] | None:
    """RANK, WORLD_SIZE, LOCAL_RANK and LOCAL_WORLD_SIZE under torchrun, else None."""
    keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK")
    if not all(k in os.environ for k in keys):
        return None
    try:
        env = {k: int(os.environ[k]) for k in keys}
        env["LOCAL_WORLD_SIZE"] = int(os.environ.get("LOCAL_WORLD_SIZE", env["WORLD_SIZE"]))
    except ValueError:
        raise BadInput(
            "torchrun environment: RANK, WORLD_SIZE, LOCAL_RANK must be integers"
        ) from None
    return env


def node_key() -> str:
    """Which node this process runs on: the host name, and torchrun's node rank if set.

    torchrun sets GROUP_RANK to the node's index, so two "nodes" of one job
    are told apart even where their containers share a host name.
    """
    group = os.environ.get("GROUP_RANK")
    host = socket.gethostname()
    return f"{host}/node{group}" if group is not None else host


def one_line(exc: BaseException) -> str:
    """``Type: first line`` of an exception (and its cause when torch wraps one)."""
    lines = [x for x in str(exc).strip().splitlines() if x.strip()]
    text = f"{type(exc).__name__}: {lines[0].strip()}" if lines else type(exc).__name__
    cause = exc.__cause__
    if cause is not None and isinstance(exc, RuntimeError) and "failed to run" in text:
        text += f" ({one_line(cause)})"
    return text


def set_local_env(rank: int, world: int, port: int, backend: str) -> None:
    """The env:// rendezvous of a spawned local rank (loopback for gloo)."""
    os.environ.update(
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(world),
        LOCAL_RANK=str(rank),
        LOCAL_WORLD_SIZE=str(world),
    )
    os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")  # no gloo connection chatter
    if backend == "gloo" and sys.platform.startswith("linux"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # all ranks are local


def init_group(torch: Any, group: GroupSettings, rank: int, world: int, local_rank: int) -> None:
    """One process group per job; one GPU per local rank, or ``threads`` CPU threads."""
    kwargs: dict[str, Any] = {}
    if group.device == "cuda":
        torch.cuda.set_device(local_rank)
        kwargs["device_id"] = torch.device("cuda", local_rank)
    else:
        torch.set_num_threads(group.threads)
        allocator.keep_freed_memory()  # time ops as a caching allocator would (allocator.py)
    torch.distributed.init_process_group(
        backend=group.backend, rank=rank, world_size=world,
        timeout=timedelta(seconds=group.timeout_s), **kwargs,
    )


def finish_child(q: Any, code: int) -> None:
    """Flush the queue and leave: closing and joining it first keeps the parent
    from waiting out its timeout (docs/measured.md); ``os._exit`` skips the
    interpreter and process-group teardown, the parent has the result."""
    q.close()
    q.join_thread()
    os._exit(code)


Work = Callable[[Any, Callable[[Any], None]], Any]  # (torch, progress) -> rank 0's result


def child_main(
    rank: int, world: int, port: int, q: Any, group: GroupSettings, command: str, work: Work
) -> None:
    """A spawned rank's whole life: rendezvous, process group, ``work``, report, exit.

    Sends ``ready`` once in the group, ``progress`` for each ``progress(payload)``
    call of ``work``, then ``done`` with its result, or ``error`` with the one-line
    text of anything raised; never hangs the parent.
    """
    set_local_env(rank, world, port, group.backend)
    code = 0
    try:
        torch = import_torch(command)
        init_group(torch, group, rank, world, rank)
        q.put(("ready", rank, None))
        result = work(torch, lambda payload: q.put(("progress", rank, payload)))
        q.put(("done", rank, result))
    except BaseException as exc:  # report anything; never hang the parent
        q.put(("error", rank, one_line(exc)))
        code = 1
    finish_child(q, code)


@dataclass
class JoinTexts:
    """The one-line errors of a torchrun rank."""

    no_group: Callable[[int, int, str], str]  # rank, world, the one-line error
    failed: Callable[[int, int, str], str]  # rank, world, the one-line error


@contextmanager
def joined_group(
    torch: Any, group: GroupSettings, env: dict[str, int], texts: JoinTexts
) -> Iterator[None]:
    """Join the torchrun job's process group for the ``with`` body, then leave it.

    A failure to join or inside the body is RunFailed in one line (a
    PptuneError raised inside passes through as it is).
    """
    rank, world, local = env["RANK"], env["WORLD_SIZE"], env["LOCAL_RANK"]
    try:
        init_group(torch, group, rank, world, local)
    except Exception as exc:
        raise RunFailed(texts.no_group(rank, world, one_line(exc))) from None
    try:
        yield
    except PptuneError:
        raise
    except Exception as exc:
        raise RunFailed(texts.failed(rank, world, one_line(exc))) from None
    finally:
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()


class Watchdog:
    """Ends this process with one error line (exit 1) when ``touch`` is not
    called for ``timeout_s`` seconds: a torchrun peer that hangs in compute is
    not bounded by the process group's timeout alone."""

    def __init__(self, timeout_s: float, message: str) -> None:
        self.timeout_s = timeout_s
        self.message = message
        self.last = time.monotonic()
        self.done = threading.Event()

    def __enter__(self) -> Watchdog:
        threading.Thread(target=self._watch, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()

    def touch(self) -> None:
        self.last = time.monotonic()

    def _watch(self) -> None:
        while not self.done.wait(1.0):
            if time.monotonic() - self.last > self.timeout_s:
                sys.stderr.write(f"pptune: error: {self.message}\n")
                sys.stderr.flush()
                os._exit(EXIT_FAILED)


@dataclass
class SpawnTexts:
    """The one-line errors of a command's spawned ranks."""

    died: Callable[[int, int, int | None], str]  # rank, world, exit code
    silent: Callable[[int, set[int], set[int], float], str]  # world, started, finished, timeout
    failed: Callable[[int, int, str], str]  # rank, world, the rank's one-line error


def spawn_ranks(
    entry: Callable[..., None],
    args: tuple[Any, ...],
    world: int,
    timeout_s: float,
    texts: SpawnTexts,
    on_progress: Callable[[int, Any], None] = lambda rank, payload: None,
    limit_s: float | None = None,
) -> Any:
    """Run ``entry(rank, world, port, queue, *args)`` in ``world`` spawned processes.

    Returns rank 0's ``done`` payload. Raises RunFailed (one of ``texts``) when
    a rank fails, dies, or is silent for ``timeout_s`` seconds; TimeLimit when the
    run is not done ``limit_s`` seconds after the start (None: no limit). Every rank
    still running is then ended (SIGTERM, then SIGKILL): they are this process's
    children, one process each, so ending them ends the whole run.
    """
    deadline = None if limit_s is None else time.monotonic() + max(0.0, limit_s)
    ctx = multiprocessing.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [
        ctx.Process(target=entry, args=(rank, world, port, q, *args), daemon=True)
        for rank in range(world)
    ]
    for p in procs:
        p.start()
    finished: set[int] = set()
    started: set[int] = set()
    result: Any = None
    ok = False
    last_word = time.monotonic()
    try:
        while len(finished) < world:
            if deadline is not None and time.monotonic() > deadline:
                raise TimeLimit(f"{len(finished)} of {world} rank(s) done at its limit of "
                                f"{limit_s:.0f} s; every rank was ended")
            try:
                kind, rank, payload = q.get(timeout=0.2)
            except queue_mod.Empty:
                dead = [r for r, p in enumerate(procs) if r not in finished and not p.is_alive()]
                if dead:
                    try:  # a message may still be in flight from a rank that just exited
                        kind, rank, payload = q.get(timeout=1.0)
                    except queue_mod.Empty:
                        r = dead[0]
                        raise RunFailed(texts.died(r, world, procs[r].exitcode)) from None
                elif time.monotonic() - last_word > timeout_s:
                    raise RunFailed(texts.silent(world, started, finished, timeout_s)) from None
                else:
                    continue
            last_word = time.monotonic()
            if kind == "ready":
                started.add(rank)
            elif kind == "progress":
                started.add(rank)
                on_progress(rank, payload)
            elif kind == "done":
                finished.add(rank)
                if rank == 0:
                    result = payload
            elif kind == "error":
                raise RunFailed(texts.failed(rank, world, payload))
        ok = True
        return result
    finally:
        for p in procs:
            p.join(timeout=5.0 if ok else 0.2)
        for p in procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=2.0)
            if p.is_alive():
                p.kill()
                p.join(timeout=2.0)
        q.close()
        q.join_thread()
