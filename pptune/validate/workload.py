"""What each rank builds and feeds: the model's layers (the probe's builders), its dtype,
the step's batch and targets, and the loss (no torch at import; torch is passed in).

Every rank builds the layers of its own stages and makes the whole step's batch
(``b * m`` samples) and targets; the last stage's loss is cross-entropy over token
targets (transformers) or a mean square (a ``--module`` model's last output).
"""

from __future__ import annotations

from typing import Any

from pptune.validate.spec import ModelSource, RunSpec


def build_plan(source: ModelSource, device: str, torch: Any) -> Any:
    """The probe's ``ModelPlan`` for this source (layer names, builders, input)."""
    from pptune.probe import models

    dtype = torch_dtype(source.dtype, device, torch)
    if source.hf_config is not None:
        return models.plan_hf_config(source.hf_config, device, dtype, source.seq_len)  # type: ignore[arg-type]
    if source.module is not None:
        return models.plan_module(source.module, device, source.seq_len)
    return models.plan_preset(source.model or "gpt-small", device, dtype, source.seq_len)


def torch_dtype(name: str, device: str, torch: Any) -> Any:
    if name == "auto":
        name = "bf16" if str(device).startswith("cuda") else "fp32"
    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[name]


def loss_fn(output: Any, target: Any) -> Any:
    """Cross-entropy against token targets; a mean-square stand-in for other outputs.

    Transformer presets and --hf-config end in logits (b, s, V) and get fixed
    random token targets (b, s). A --module model's last layer can return
    anything: its loss is ``mean(output ** 2)`` (the target is ignored).
    """
    import torch.nn.functional as F

    if (not target.is_floating_point() and output.dim() == target.dim() + 1
            and output.shape[:-1] == target.shape):
        return F.cross_entropy(output.flatten(0, -2).float(), target.flatten())
    return output.float().square().mean()


def make_batch(plan: Any, spec: RunSpec, torch: Any, device: str) -> tuple[Any, Any]:
    """The whole step's input (b * m samples) and its targets."""
    n = spec.micro_batch_size * spec.microbatches
    x = plan.make_input(n)
    gen = torch.Generator().manual_seed(4321)
    if not x.is_floating_point() and x.dim() == 2:
        vocab = _vocab(plan, torch)
        target = torch.randint(0, vocab, tuple(x.shape), generator=gen).to(device)
    else:
        target = torch.zeros(n, dtype=torch.long, device=device)
    return x, target


def _vocab(plan: Any, torch: Any) -> int:
    """The token targets' range: the transformer's vocabulary, else (a --module model)
    the width of its last layer's last Linear (that layer built once more, then freed)."""
    if getattr(plan, "shape", None) is not None:  # no second copy of the LM head
        return int(plan.shape.vocab)
    head = plan.build_layer(len(plan.layer_names) - 1)
    linears = [m for m in head.modules() if isinstance(m, torch.nn.Linear)]
    vocab = int(linears[-1].out_features) if linears else 2
    del head
    return vocab
