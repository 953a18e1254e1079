"""The GPUs a torchtitan job runs on, and its data-parallel degree.

A job file has no key for the GPU count: torchtitan takes the world size from the
launcher and asserts that ``data_parallel_replicate_degree x data_parallel_shard_degree
x context_parallel_degree x tensor_parallel_degree x pipeline_parallel_degree`` is it,
a shard degree of -1 taking the rest (torchtitan 0.2.2
torchtitan/distributed/parallel_dims.py ``ParallelDims._validate``). The count
check-config judges the degrees against is, first found: ``--gpus``; the launch a
comment of the file states (``recommend --emit torchtitan`` writes one,
frameworks/common/launched.py); else none, and the world is the degrees' product,
which a note says was inferred and from what.
"""

from __future__ import annotations

from typing import Any

from pptune.frameworks.common.fields import MAX_DEVICES, Ctx, whole
from pptune.frameworks.common.launched import stated_launch
from pptune.frameworks.torchtitan.table import Table

FLAG_MEANS = "a GPU count (torchtitan takes it from the launcher)"


def launched_gpus(ctx: Ctx, fields: dict[str, Any]) -> None:
    """``fields["gpus"]`` from the file's launch comment where --gpus gives none (a note
    says which, and Semantics.gpus_from where the count came from); where --gpus gives
    another count, a note that the flag was priced over the comment's; --gpus without a
    comment, said by ``data_parallel``'s note (one note, not two)."""
    launch = stated_launch(ctx.text, ctx)
    flag = ctx.flags.gpus
    if launch is None:
        if flag is not None:  # data_parallel says it, with the shard degree it resolves
            fields["gpus"] = flag
        return
    if flag is None:
        fields["gpus"] = launch.gpus
        ctx.semantics.gpus_from = launch.said()
        ctx.note(f"gpus {launch.gpus} from {launch.said()} (torchtitan takes the GPU count "
                 "from the launcher; --gpus overrides it)")
    elif flag != launch.gpus:
        ctx.note(f"--gpus {flag} over the {launch.gpus} GPUs of {launch.said()}")


def data_parallel(ctx: Ctx, par: Table, fields: dict[str, Any]) -> tuple[int | None, bool]:
    """(dp, sharded?) from the replicate and shard degrees; shard -1 means "the rest".
    FSDP runs when the shard degree or context parallelism is above 1: torchtitan
    shards over the shard and cp ranks together (parallel_dims.py ``fsdp_enabled``:
    ``dp_shard_enabled or cp_enabled``, the "fsdp" mesh)."""
    replicate = par.count("data_parallel_replicate_degree", 1, maximum=MAX_DEVICES) or 1
    shard_raw = par.data.get("data_parallel_shard_degree", -1)
    cp = fields["cp"] or 1
    if not is_rest(shard_raw):
        shard = whole(ctx, "parallelism.data_parallel_shard_degree", shard_raw,
                      maximum=MAX_DEVICES, fix="use -1 (the remaining GPUs) or a degree >= 1")
        _inferred(ctx, fields, replicate, shard)
        if fields.get("gpus") is not None and ctx.semantics.gpus_from is None:
            ctx.note(f"gpus {fields['gpus']} from --gpus: torchtitan takes the GPU count from "
                     "the launcher")
        return replicate * shard, shard > 1 or cp > 1
    gpus = fields.get("gpus")
    source = (f"--gpus {gpus}" if ctx.semantics.gpus_from is None
              else f"gpus {gpus} from {ctx.semantics.gpus_from}")
    others = replicate * (fields["tp"] or 1) * (fields["pp"] or 1) * (fields["cp"] or 1)
    if gpus is not None and gpus % others == 0:
        shard = gpus // others
        # "gpus N from --gpus" as the generic note says it (calibrate names a log's count)
        said = (f"gpus {gpus} from --gpus; data_parallel_shard_degree -1 resolved to {shard} = "
                f"{gpus}" if ctx.semantics.gpus_from is None else
                f"data_parallel_shard_degree -1 resolved to {shard}: {source}")
        ctx.note(f"{said} / (replicate {replicate} x tp x pp x cp = {others})")
        return replicate * shard, shard > 1 or cp > 1
    if gpus is None:
        ctx.note("data_parallel_shard_degree is -1 (the remaining GPUs); dp left unset: pass "
                 "--gpus to resolve it; FSDP sharding assumed")
    else:
        ctx.note(f"data_parallel_shard_degree is -1 but {source} is not a multiple of "
                 f"replicate x tp x pp x cp = {others}; dp left unset; FSDP sharding assumed")
    return None, True


def _inferred(ctx: Ctx, fields: dict[str, Any], replicate: int, shard: int) -> None:
    """Where neither --gpus nor a launch comment gives the GPU count, the note that the
    world priced is the degrees' product."""
    if fields.get("gpus") is not None:
        return
    degrees = {"data_parallel_replicate_degree": replicate,
               "data_parallel_shard_degree": shard,
               "context_parallel_degree": fields["cp"] or 1,
               "tensor_parallel_degree": fields["tp"] or 1,
               "pipeline_parallel_degree": fields["pp"] or 1}
    world = replicate * shard * degrees["context_parallel_degree"] * degrees[
        "tensor_parallel_degree"] * degrees["pipeline_parallel_degree"]
    ctx.note(f"gpus {world} inferred from the degrees: "
             + " x ".join(f"{key} {value}" for key, value in degrees.items())
             + "; no launch comment of the file gives a GPU count (torchtitan takes it from "
             "the launcher): --gpus checks the degrees against yours")


def is_rest(value: Any) -> bool:
    """torchtitan's -1: "the remaining ranks" (shard degree) or "derive it" (global batch)."""
    return type(value) is int and value == -1
