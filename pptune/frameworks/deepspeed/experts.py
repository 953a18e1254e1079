"""DeepSpeed's expert parallelism as a JSON config states it: AutoEP.

What a config can state (DeepSpeed 0.19.8): the ``"expert_parallel"`` section
(deepspeed/runtime/config.py ``get_expert_parallel_config``,
deepspeed/module_inject/auto_ep_config.py ``parse_autoep_config``): ``enabled``
(default false), ``autoep_size`` (the expert-parallel size, default 1) and
``expert_tensor_parallel_size`` (default 1). AutoEP replaces the MoE layers of a
Hugging Face model it has a preset for (module_inject/auto_ep_presets: mixtral,
qwen3_moe, deepseek_v2, deepseek_v3) with expert-parallel ones. What it cannot
state: DeepSpeed's own ``deepspeed.moe.layer.MoE(..., ep_size=...)`` layers take
their expert-parallel size in the model code, which no config names (pass the
model's experts with --model or --hf-config; their ep is then 1 as far as the
file says).

AutoEP's rules (auto_ep_folding.py ``build_folding_spec`` and
``validate_folding_global``): ``autoep_size x expert_tensor_parallel_size`` must
divide the ranks of a pipeline stage (judged with every framework's, in
pptune.check.experts); ``expert_tensor_parallel_size`` other than 1 "is not
supported yet"; with AutoTP (``tensor_parallel.autotp_size`` > 1) it needs
``autoep_size`` > 1 and supports pp 1 only.
"""

from __future__ import annotations

from typing import Any

from pptune.frameworks.common.fields import CAPS, Ctx, show, whole

SECTION = "expert_parallel"
CITE = "(deepspeed/module_inject/auto_ep_folding.py validate_folding_global)"


def read_experts(ctx: Ctx, data: dict[str, Any], fields: dict[str, Any]) -> None:
    """ep and etp from ``"expert_parallel"``; AutoEP's refusals as error findings."""
    section = data.get(SECTION)
    if section is None:
        return
    if not isinstance(section, dict):
        raise ctx.bad(f"{SECTION} is {show(section)}; expected a mapping such as "
                      "{\"enabled\": true, \"autoep_size\": 8}")
    enabled = section.get("enabled", False)
    if not isinstance(enabled, bool):
        raise ctx.bad(f"{SECTION}.enabled is {show(enabled)}; expected true or false")
    ep = whole(ctx, f"{SECTION}.autoep_size", section.get("autoep_size", 1), cap=CAPS["ep"])
    etp = whole(ctx, f"{SECTION}.expert_tensor_parallel_size",
                section.get("expert_tensor_parallel_size", 1), cap=CAPS["etp"])
    if not enabled:
        if ep > 1:
            ctx.note(f"{SECTION}.autoep_size {ep} ignored: {SECTION}.enabled is not true "
                     "(AutoEP off)")
        return
    fields.update(ep=ep, etp=etp)
    if etp != 1:
        ctx.refuse("deepspeed-autoep-etp",
                   f"{SECTION}.expert_tensor_parallel_size {etp}: DeepSpeed raises "
                   "'expert_tensor_parallel_size ... is reserved for expert-internal tensor "
                   f"parallelism and is not supported yet' {CITE}; use 1")
    tp, pp = fields.get("tp") or 1, fields.get("pp") or 1
    if tp > 1 and ep == 1:
        ctx.refuse("deepspeed-autoep-tp",
                   f"AutoEP with tensor_parallel.autotp_size {tp} and autoep_size 1: DeepSpeed "
                   "raises 'AutoEP+AutoTP folding requires expert_parallel.autoep_size > 1' "
                   f"{CITE}")
    if tp > 1 and pp > 1:
        ctx.refuse("deepspeed-autoep-pp",
                   f"AutoEP with tensor_parallel.autotp_size {tp} and pp {pp}: DeepSpeed raises "
                   f"'AutoEP+AutoTP folding currently supports pp_size=1 only' {CITE}")
