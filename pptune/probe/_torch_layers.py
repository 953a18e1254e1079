"""Standard decoder-only transformer layers, written in plain torch.

Imported only from inside probe functions (it imports torch at the top).
Every layer takes the model's ``ModelShape`` (pptune.costmodel.presets, the
one record of a model's sizes); two flavours, chosen by its ``gated_mlp``:
- GPT-2/3 (Radford et al. 2019; Brown et al. 2020): learned positions,
  pre-LayerNorm, biases, GeLU MLP with 2 matrices, dropout after attention
  and MLP (its masks are kept for backward, as in training);
- Llama (Touvron et al. 2023; Dubey et al. 2024): RMSNorm, no biases, SwiGLU
  MLP with 3 matrices, grouped-query attention (``kv_heads < heads``).
  Rotary position embedding is left out: a few elementwise ops on q and k,
  small next to the matrix products.
Attention is ``scaled_dot_product_attention(is_causal=True)``, as training
code uses it, so the score matrix is not kept for backward.

A mixture-of-experts block (``ModelShape.moe_block``) replaces the MLP by a
router and routed experts on this rank (no expert parallelism), as Mixtral's
and Qwen3-MoE's Hugging Face code runs them (``MixtralSparseMoeBlock``): a
linear router, softmax, top-k with the k weights renormalised to sum to 1,
then each expert's MLP over the tokens routed to it (gathered, computed,
weighted and scattered back with ``index_add_``), plus shared experts (a dense
MLP of ``shared_ffn``) seeing every token when the model has them.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from pptune.costmodel.presets import ModelShape

GPT_DROPOUT = 0.1  # GPT-2's resid_pdrop / embd_pdrop


def _norm(s: ModelShape) -> nn.Module:
    return nn.RMSNorm(s.hidden, eps=1e-5) if s.gated_mlp else nn.LayerNorm(s.hidden)


def _dropout(p: float) -> nn.Module:
    return nn.Dropout(p) if p > 0 else nn.Identity()


class Embedding(nn.Module):
    """Token ids (batch, seq) int64 -> hidden states (batch, seq, hidden)."""

    def __init__(self, s: ModelShape, dropout_p: float) -> None:
        super().__init__()
        self.tok = nn.Embedding(s.vocab, s.hidden)
        self.pos = None if s.gated_mlp else nn.Embedding(s.seq_len, s.hidden)
        self.drop = _dropout(dropout_p)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.tok(ids)
        if self.pos is not None:
            h = h + self.pos(torch.arange(ids.shape[1], device=ids.device))
        return self.drop(h)


class Attention(nn.Module):
    def __init__(self, s: ModelShape) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = s.heads, s.kv_heads, s.head_dim
        bias = not s.gated_mlp
        self.qkv = nn.Linear(s.hidden, (s.heads + 2 * s.kv_heads) * s.head_dim, bias=bias)
        self.proj = nn.Linear(s.heads * s.head_dim, s.hidden, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, _ = x.shape
        h, kv, hd = self.heads, self.kv_heads, self.head_dim
        q, k, v = self.qkv(x).split([h * hd, kv * hd, kv * hd], dim=-1)
        q = q.view(b, t, h, hd).transpose(1, 2)
        k = k.view(b, t, kv, hd).transpose(1, 2)
        v = v.view(b, t, kv, hd).transpose(1, 2)
        if kv != h:
            k = k.repeat_interleave(h // kv, dim=1)
            v = v.repeat_interleave(h // kv, dim=1)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.proj(o.transpose(1, 2).reshape(b, t, h * hd))


class MLP(nn.Module):
    def __init__(self, s: ModelShape, ffn: int | None = None) -> None:
        super().__init__()
        self.gated = s.gated_mlp
        width = s.ffn if ffn is None else ffn
        if self.gated:
            self.up = nn.Linear(s.hidden, 2 * width, bias=False)  # gate and up, fused
            self.down = nn.Linear(width, s.hidden, bias=False)
        else:
            self.up = nn.Linear(s.hidden, width)
            self.down = nn.Linear(width, s.hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.gated:
            gate, up = self.up(x).chunk(2, dim=-1)
            return self.down(F.silu(gate) * up)
        return self.down(F.gelu(self.up(x)))


class MoE(nn.Module):
    """Router, top-k routed experts and shared experts (module docstring)."""

    def __init__(self, s: ModelShape) -> None:
        super().__init__()
        self.top_k = s.top_k
        self.router = nn.Linear(s.hidden, s.experts, bias=False)
        self.experts = nn.ModuleList(MLP(s, s.expert_ffn) for _ in range(s.experts))
        self.shared = MLP(s, s.shared_ffn) if s.shared_ffn else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        probs = F.softmax(self.router(flat), dim=-1, dtype=torch.float32)
        weights, chosen = torch.topk(probs, self.top_k, dim=-1)
        weights = (weights / weights.sum(dim=-1, keepdim=True)).to(x.dtype)
        out = torch.zeros_like(flat)
        for e, expert in enumerate(self.experts):
            token, slot = torch.where(chosen == e)
            if token.numel():
                out.index_add_(0, token, expert(flat[token]) * weights[token, slot, None])
        if self.shared is not None:
            out = out + self.shared(flat)
        return out.reshape(shape)


class Block(nn.Module):
    """Pre-norm decoder block: x + attn(norm(x)), then x + mlp(norm(x)); the MLP is a
    mixture of experts in the model's MoE blocks."""

    def __init__(self, s: ModelShape, dropout_p: float, index: int = 0) -> None:
        super().__init__()
        self.norm1, self.attn, self.drop1 = _norm(s), Attention(s), _dropout(dropout_p)
        mlp: nn.Module = MoE(s) if s.moe_block(index) else MLP(s)
        self.norm2, self.mlp, self.drop2 = _norm(s), mlp, _dropout(dropout_p)

    def routed_parameters(self) -> list[nn.Parameter]:
        """The routed experts' weights (sharded over expert parallelism in a plan)."""
        return list(self.mlp.experts.parameters()) if isinstance(self.mlp, MoE) else []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop1(self.attn(self.norm1(x)))
        return x + self.drop2(self.mlp(self.norm2(x)))


class Head(nn.Module):
    """Final norm and LM head: hidden states -> logits (batch, seq, vocab). No loss."""

    def __init__(self, s: ModelShape) -> None:
        super().__init__()
        self.norm = _norm(s)
        self.lm_head = nn.Linear(s.hidden, s.vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.norm(x))
