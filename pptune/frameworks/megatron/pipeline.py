"""Megatron-LM's pipeline flags -> virtual stages, schedule and layer split.

The rules are Megatron-LM core_r0.16's (validate_args in
megatron/training/arguments.py; megatron-core 0.16.1's TransformerConfig
for the split, re-stated in ``split.py``); what they refuse
becomes an error finding through ``ctx.refuse``.
"""

from __future__ import annotations

from typing import Any

from pptune.frameworks.common.fields import Ctx
from pptune.frameworks.common.shell import Script
from pptune.frameworks.common.versions import FrameworkRefusal
from pptune.frameworks.megatron.flags import FlagReader
from pptune.frameworks.megatron.knobs import Knobs, with_knobs
from pptune.frameworks.megatron.layout import read_layout
from pptune.frameworks.megatron.split import MegatronSplit, megatron_blocks


def pipeline(r: FlagReader, fields: dict[str, Any]) -> None:
    """Virtual stages, schedule and the layer split, as Megatron-LM computes them.

    A ``--pipeline-model-parallel-layout`` states all three (layout.py).
    Otherwise megatron/training/arguments.py validate_args: at most one of the three
    virtual-pipeline flags; --num-layers-per-virtual-pipeline-stage cannot be
    combined with uneven first/last stages and derives vpp from
    (num_layers [+1 embedding] [+1 loss]) / pp; interleaving needs pp > 1
    (pp > 2 with --no-overlap-p2p-communication).
    """
    ctx, flags = r.ctx, r.flags
    pp, layers = fields["pp"] or 1, fields["num_layers"]
    direct = r.number("--num-virtual-stages-per-pipeline-rank")
    per_virtual = r.number("--num-layers-per-virtual-pipeline-stage")
    first = r.number("--decoder-first-pipeline-num-layers", minimum=0)
    last = r.number("--decoder-last-pipeline-num-layers", minimum=0)
    account_emb = flags.has("--account-for-embedding-in-pipeline-split")
    account_loss = flags.has("--account-for-loss-in-pipeline-split")
    # megatron-core's own split rules are applied here (split.py, layout.py): none divides
    # the layers evenly where a layout or first/last counts place them
    ctx.semantics.split_rules = True
    ctx.semantics.details = Knobs(
        microbatch_group=r.number("--microbatch-group-size-per-virtual-pipeline-stage"),
        overlap_p2p=not flags.has("--no-overlap-p2p-communication"),
        megatron_fsdp=flags.has("--use-megatron-fsdp"))
    vpp_flags = [n for n in ("--num-layers-per-virtual-pipeline-stage",
                             "--num-virtual-stages-per-pipeline-rank",
                             "--pipeline-model-parallel-layout") if flags.has(n)]
    if len(vpp_flags) > 1:
        ctx.refuse("megatron-vpp-flags",
                   f"{' and '.join(vpp_flags)} are all given: Megatron-LM validate_args allows "
                   "'No more than one of the following arguments ... at the same time'; keep one")
    if read_layout(r, fields):  # the layout places every layer (layout.py)
        return
    virtual = direct
    uneven = first is not None or last is not None
    if per_virtual is not None and direct is None:
        if uneven:
            ctx.refuse("megatron-uneven-vpp",
                       "--num-layers-per-virtual-pipeline-stage with --decoder-first/last-"
                       "pipeline-num-layers: Megatron-LM validate_args asserts 'please use "
                       "--num-virtual-stages-per-pipeline-rank to specify virtual pipeline "
                       "parallel degree when enable uneven pipeline parallelism'")
            return _schedule(fields, None)
        virtual = _virtual_from_layers(ctx, layers, pp, per_virtual, account_emb + account_loss)
        if virtual is False:  # refused: the split would be refused again, as at vpp 1
            return _schedule(fields, None)
    _schedule(fields, virtual)
    if layers is None:
        return
    split = MegatronSplit(layers, pp, virtual or 1, first, last, account_emb, account_loss)
    if uneven and pp < 2:
        ctx.note("--decoder-first/last-pipeline-num-layers need pp >= 2; ignored")
        return
    try:
        blocks = megatron_blocks(split)
    except FrameworkRefusal as exc:
        ctx.refuse(exc.rule_id, str(exc))
        return
    if len(set(blocks)) > 1:
        fields["stage_layers"] = blocks


def _virtual_from_layers(ctx: Ctx, layers: int | None, pp: int, per_virtual: int,
                         extra: int) -> int | bool | None:
    """The virtual stages --num-layers-per-virtual-pipeline-stage gives (None: 1), or
    False where validate_args refuses it: its two asserts, in its order."""
    if layers is None:
        ctx.note("--num-layers-per-virtual-pipeline-stage without a known --num-layers; "
                 "virtual stages left at 1")
        return None
    total = layers + extra
    counted = f"--num-layers {layers}" + (f" + {extra} for the account-for flags = {total}"
                                          if extra else "")
    if total % pp:
        ctx.refuse("megatron-layers-not-divisible",
                   f"{counted} is not divisible by pp {pp}: Megatron-LM validate_args asserts "
                   "'number of layers of the model must be divisible pipeline model parallel "
                   "size' before it derives the virtual stages from "
                   f"--num-layers-per-virtual-pipeline-stage {per_virtual}; change "
                   "--num-layers or the pipeline size")
        return False
    if (total // pp) % per_virtual:
        ctx.refuse("megatron-layers-not-divisible",
                   f"{counted} over pp {pp} is {total // pp} layers a stage, not a multiple of "
                   f"--num-layers-per-virtual-pipeline-stage {per_virtual}: Megatron-LM "
                   "validate_args asserts 'number of layers per pipeline stage must be "
                   "divisible number of layers per virtual pipeline stage'")
        return False
    vpp = total // pp // per_virtual
    return vpp if vpp > 1 else None


def _schedule(fields: dict[str, Any], virtual: int | None) -> None:
    fields["virtual_stages"] = virtual
    fields["schedule"] = "interleaved-1f1b" if virtual and virtual > 1 else "1f1b"


def environment(ctx: Ctx, script: Script, launched: bool, fsdp: bool = False) -> None:
    """The environment a launch script gives the job, for rules.connections_rule, which
    judges it on the config's GPU (Megatron-LM's CUDA_DEVICE_MAX_CONNECTIONS rules differ
    before and from Blackwell)."""
    value = script.scalars.get("CUDA_DEVICE_MAX_CONNECTIONS")
    with_knobs(ctx, launched=launched, fsdp=fsdp,
               connections=None if value is None else value.strip())
