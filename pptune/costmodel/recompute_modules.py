"""Which modules a search recomputes when it tries Megatron-LM's selective recomputation
by module (``Recompute.MODULES``: ``--recompute-granularity selective
--recompute-modules ...``).

The set is the modules below, where megatron-core accepts them for the model
(megatron-core 0.16.1, transformer_config.py and transformer_layer.py); the
analytic model also prices ``moe``, ``shared_experts`` and ``layernorm``
(analytic.RECOMPUTE_MODULES) where a config states them, but the search leaves
them out: ``moe`` reruns the whole MoE layer and its all-to-alls, and the other
two drop little beside what the set drops:

- ``mla_up_proj``: with multi-head latent attention only;
- ``mlp``: the MLP of the dense blocks (megatron-core skips it on MoE blocks),
  where a model has dense blocks beside its MoE ones;
- ``moe_act``: the routed experts' activation, with grouped expert GEMMs
  (``--moe-grouped-gemm``) and not under the delayed FP8 recipe, which refuses
  it (pptune writes ``--fp8-recipe delayed`` for ``fp8``).

A dense model without MLA has none: its searched recomputation stays full,
selective (every N-th block) and per stage. Recomputing every module that
applies is one choice, not a search over subsets: each saves activations at
the price of a forward part rerun in B, and the search weighs it against the
other recomputations and against none.
"""

from __future__ import annotations

from pptune.costmodel.analytic import RECOMPUTE_MLP, RECOMPUTE_MOE_ACT
from pptune.costmodel.attention import MLA_UP_PROJ
from pptune.costmodel.keys import Precision
from pptune.costmodel.presets import ModelShape


def searched_modules(m: ModelShape, precision: Precision,
                     grouped_gemm: bool = True) -> tuple[str, ...]:
    """The modules ``Recompute.MODULES`` recomputes on ``m`` (module docstring), sorted."""
    if not (m.moe or m.mla):
        return ()
    out = []
    if m.mla:
        out.append(MLA_UP_PROJ)
    if m.moe and any(not m.moe_block(i) for i in range(m.num_blocks)):
        out.append(RECOMPUTE_MLP)
    if m.moe and grouped_gemm and precision is not Precision.FP8:
        out.append(RECOMPUTE_MOE_ACT)
    return tuple(sorted(out))
