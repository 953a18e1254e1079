"""Built-in model shapes (plain data, each with its source); presets.py
re-exports them beside the GPU specs.

Names are lower-case and stable: scripts depend on them.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum


class Norm(str, Enum):
    """A block's normalization: RMSNorm (Zhang and Sennrich 2019) scales by the root
    mean square with one weight vector; LayerNorm (Ba et al. 2016) centres too and
    has a weight and a bias vector."""

    RMSNORM = "rmsnorm"
    LAYERNORM = "layernorm"


@dataclass(frozen=True)
class ModelShape:
    name: str
    num_blocks: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    seq_len: int
    global_batch: int  # samples (sequences) per optimizer step
    gated_mlp: bool  # SwiGLU (3 matrices) vs GeLU MLP (2 matrices)
    dropout: bool  # GPT-style dropout masks kept for backward
    source: str
    # Mixture of experts (``experts`` 0: a dense model, every block an MLP of
    # ``ffn``). A block is MoE when ``moe_block(i)``: DeepSeek's dense blocks
    # first (``first_k_dense_replace``), then every ``moe_every``-th block from
    # ``moe_offset`` (Hugging Face's deepseek_v3 ``moe_layer_freq``: i % f == 0;
    # qwen3_moe ``decoder_sparse_step`` and llama4 ``interleave_moe_layer_step``:
    # (i + 1) % s == 0, offset s - 1).
    experts: int = 0  # routed experts of a MoE block
    top_k: int = 0  # routed experts per token
    expert_ffn: int = 0  # FFN width of one routed expert
    shared_ffn: int = 0  # FFN width of the shared experts together (count x width)
    first_dense: int = 0  # leading blocks with a dense MLP
    moe_every: int = 1
    moe_offset: int = 0
    mtp_layers: int = 0  # multi-token-prediction blocks after the last block (DeepSeek-V3)
    # Group-limited routing (dispatch.py): the routed experts in ``route_groups``
    # equal groups, each token's experts from ``route_group_topk`` of them (0: none)
    route_groups: int = 0
    route_group_topk: int = 0
    # The router's scores: "softmax" or "sigmoid" (Hugging Face's scoring_func,
    # megatron-core's moe_router_score_function), and ``router_expert_bias``: the top-k
    # chosen on the scores plus a per-expert bias that balances the load without an
    # auxiliary loss (DeepSeek-V3 report, arXiv 2412.19437, sec. 2.1.2; Hugging Face's
    # topk_method "noaux_tc"). Not priced (the router is one hidden x experts GEMM either
    # way); --emit writes them.
    router_score: str = "softmax"
    router_expert_bias: bool = False
    # Attention
    kv_channels: int = 0  # head dimension; 0: hidden / heads (Qwen3 and GPT-OSS set it)
    qk_norm: bool = False  # RMSNorm over each head's query and key (Qwen3)
    # Multi-head latent attention (DeepSeek-V2/V3) when ``kv_lora_rank`` > 0:
    # queries through a ``q_lora_rank`` latent (0: projected directly), keys and
    # values through a ``kv_lora_rank`` latent plus a shared rotary key
    q_lora_rank: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    # Sliding-window attention (GPT-OSS) when ``sliding_window`` > 0: block i
    # attends to all earlier tokens when (i + 1) % full_attention_every == 0
    # (0: never), else to the last ``sliding_window`` tokens
    sliding_window: int = 0
    full_attention_every: int = 0
    # Block style (block_style.py prices it). ``norm`` None: as the other fields
    # imply, LayerNorm for a GPT-style shape (``dropout``), else RMSNorm (what every
    # preset was priced with before the field existed).
    norm: Norm | None = None
    qkv_bias: bool = False  # biases on the query, key and value projections (Qwen2)
    attn_out_bias: bool = False  # a bias on the attention output projection
    mlp_bias: bool = False  # biases on the MLP's projections, experts' included (GPT-OSS)
    # the LM head shares the embedding's matrix (Gemma; Megatron-LM's default): one
    # copy where one stage holds both, else a copy on the last stage (table.py)
    tied_embeddings: bool = False

    def __post_init__(self) -> None:
        if self.norm is not None and not isinstance(self.norm, Norm):  # "rmsnorm" from a file
            object.__setattr__(self, "norm", Norm(self.norm))

    @property
    def head_dim(self) -> int:
        return self.kv_channels or self.hidden // self.heads

    @property
    def moe(self) -> bool:
        return self.experts > 0

    @property
    def mla(self) -> bool:
        return self.kv_lora_rank > 0

    def moe_block(self, i: int) -> bool:
        """Block i (MTP blocks after the last: num_blocks, ...) routes to experts."""
        return (self.moe and i >= self.first_dense
                and i % self.moe_every == self.moe_offset % self.moe_every)

    def sliding_block(self, i: int) -> bool:
        """Block i attends to a sliding window rather than to every earlier token."""
        if self.sliding_window <= 0 or self.mla:
            return False
        return not (self.full_attention_every and (i + 1) % self.full_attention_every == 0)

    @property
    def normalization(self) -> Norm:
        """The block's norm, stated or as ``norm`` None implies."""
        if self.norm is not None:
            return self.norm
        return Norm.LAYERNORM if self.dropout else Norm.RMSNORM

    @property
    def linear_bias(self) -> bool:
        """Every linear layer of the block has a bias (GPT-2/3; Megatron-LM's
        ``add_bias_linear``, its default)."""
        return self.qkv_bias and self.attn_out_bias and self.mlp_bias

    @property
    def rotary(self) -> bool:
        """Rotary position embeddings (Llama family); GPT-2/3 shapes, the ones
        with dropout, add learned positions in the embedding instead."""
        return not self.dropout


MODELS: dict[str, ModelShape] = {
    m.name: m
    for m in [
        # The CPU demo model: the block measured in docs/measured.md
        # (d=256, 4 heads, ffn 1024, seq 128, 8k vocabulary).
        ModelShape("gpt-small", 6, 256, 4, 4, 1024, 8192, 128, 32, False, True,
                   "pptune CPU demo size (docs/measured.md)"),
        # The CPU demo mixture of experts: gpt-small's width with Mixtral's layout in
        # miniature (RMSNorm, SwiGLU experts, 8 routed experts, top-2; Jiang et al. 2024
        # table 1), for probe and validate on a CPU (docs/measured.md).
        ModelShape("moe-small", 4, 256, 4, 4, 512, 8192, 128, 32, True, False,
                   "pptune CPU demo size, Mixtral's layout (docs/measured.md)",
                   experts=8, top_k=2, expert_ffn=512),
        # Brown et al. 2020, "Language Models are Few-Shot Learners", table 2.1
        # (layers, d_model, batch in tokens / 2048); heads as Megatron-LM's
        # GPT-3 examples use them (d_head 128).
        ModelShape("gpt3-1.3b", 24, 2048, 16, 16, 8192, 50257, 2048, 512, False, True,
                   "Brown et al. 2020 table 2.1 (GPT-3 XL)"),
        ModelShape("gpt3-13b", 40, 5120, 40, 40, 20480, 50257, 2048, 1024, False, True,
                   "Brown et al. 2020 table 2.1 (GPT-3 13B; d_model 5120 as in Megatron-LM)"),
        ModelShape("gpt3-175b", 96, 12288, 96, 96, 49152, 50257, 2048, 1536, False, True,
                   "Brown et al. 2020 table 2.1 (GPT-3 175B)"),
        # Llama 3 model cards / Dubey et al. 2024 table 3 (layers, model dim,
        # FFN dim, heads, KV heads, vocabulary 128,256); sequence 8192; global
        # batch 512 x 8192 = 4M tokens (the paper's 405B batch, assumed here).
        ModelShape("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192, 512, True, False,
                   "Dubey et al. 2024 table 3 (Llama 3 8B)"),
        ModelShape("llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192, 512, True, False,
                   "Dubey et al. 2024 table 3 (Llama 3 70B)"),
        # Mixtures of experts. Sequence length and global batch: the published
        # recipe each cites (NVIDIA's NeMo / dgxc-benchmarking runs).
        # Jiang et al. 2024, "Mixtral of Experts", table 1 (dim 4096, 32 layers,
        # head_dim 128, hidden_dim 14336, 32 heads, 8 KV heads, vocabulary 32000,
        # 8 experts, top-2); NVIDIA/NeMo nemo/collections/llm/gpt/model/mixtral.py
        # MixtralConfig8x7B (seq_length 4096); GBS 256 of NeMo 25.02's
        # Mixtral-8x7B row (docs.nvidia.com NeMo performance summary).
        ModelShape("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, 4096, 256, True, False,
                   "Jiang et al. 2024 table 1; NVIDIA/NeMo mixtral.py MixtralConfig8x7B",
                   experts=8, top_k=2, expert_ffn=14336),
        # NVIDIA/NeMo mixtral.py MixtralConfig8x22B (56 layers, hidden 6144, 48
        # heads, 8 query groups, FFN 16384, seq_length 65536); vocabulary 32768:
        # mistralai/mistral-inference README ("mixtral-8x22B-v0.3 ... extended
        # vocabulary of 32768 tokens"); GBS 64 of NeMo 25.02's Mixtral-8x22B row.
        ModelShape("mixtral-8x22b", 56, 6144, 48, 8, 16384, 32768, 65536, 64, True, False,
                   "NVIDIA/NeMo mixtral.py MixtralConfig8x22B; mistral-inference README",
                   experts=8, top_k=2, expert_ffn=16384),
        # NVIDIA/NeMo nemo/collections/llm/gpt/model/qwen3.py (commit 00558c4f):
        # Qwen3MoEConfig (128 experts, top-8, kv_channels 128, QK layernorm,
        # vocabulary 151936), Qwen3Config30B_A3B (48 layers, hidden 2048, 32
        # heads, 4 query groups, moe_ffn_hidden_size 768) and Qwen3Config235B_A22B
        # (94 layers, hidden 4096, 64 heads, 4 groups, 1536); the Hugging Face
        # configs Qwen/Qwen3-30B-A3B and Qwen/Qwen3-235B-A22B they cite. Sequence
        # 4096 and GBS: NVIDIA/dgxc-benchmarking qwen3/pretrain/README.md
        # (commit 841f546; 30B on 8 GPUs GBS 512, 235B on 256 GPUs GBS 8192).
        ModelShape("qwen3-30b-a3b", 48, 2048, 32, 4, 6144, 151936, 4096, 512, True, False,
                   "NVIDIA/NeMo qwen3.py Qwen3Config30B_A3B (Qwen/Qwen3-30B-A3B config.json)",
                   experts=128, top_k=8, expert_ffn=768, kv_channels=128, qk_norm=True),
        ModelShape("qwen3-235b-a22b", 94, 4096, 64, 4, 12288, 151936, 4096, 8192, True, False,
                   "NVIDIA/NeMo qwen3.py Qwen3Config235B_A22B (Qwen/Qwen3-235B-A22B config.json)",
                   experts=128, top_k=8, expert_ffn=1536, kv_channels=128, qk_norm=True),
        # deepseek-ai/DeepSeek-V3 inference/configs/config_671B.json (commit
        # 4c2fdb8f): 61 layers, dim 7168, inter_dim 18432, moe_inter_dim 2048,
        # 3 dense layers, 128 heads, 256 routed + 1 shared expert, 8 activated,
        # q_lora_rank 1536, kv_lora_rank 512, qk_nope 128, qk_rope 64, v_head 128,
        # vocabulary 129280, n_expert_groups 8, n_limited_groups 4; DeepSeek-V3
        # technical report (arXiv 2412.19437) sec. 4.2: MTP depth 1, sequence 4096,
        # batch ramped to 15360; sec. 2.1.2: each token to at most 4 nodes, sigmoid
        # affinity scores and the auxiliary-loss-free bias (its Hugging Face config.json,
        # tests/data/hf/deepseek-v3-config.json: scoring_func sigmoid, topk_method noaux_tc).
        ModelShape("deepseek-v3", 61, 7168, 128, 128, 18432, 129280, 4096, 15360, True, False,
                   "deepseek-ai/DeepSeek-V3 inference/configs/config_671B.json; "
                   "DeepSeek-V3 report sec. 4.2",
                   experts=256, top_k=8, expert_ffn=2048, shared_ffn=2048, first_dense=3,
                   mtp_layers=1, kv_channels=128, q_lora_rank=1536, kv_lora_rank=512,
                   qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128,
                   route_groups=8, route_group_topk=4, router_score="sigmoid",
                   router_expert_bias=True),
        # openai/gpt-oss gpt_oss/torch/model.py ModelConfig (commit 7b583341): 36
        # layers, 128 experts, 4 per token, vocabulary 201088, hidden 2880,
        # intermediate 2880, head_dim 64, 64 heads, 8 KV heads, sliding window
        # 128 on every other layer (AttentionBlock: layer_idx % 2 == 0),
        # initial_context_length 4096; GBS 1280: NVIDIA/dgxc-benchmarking
        # gpt-oss/pretrain/README.md (H100, 64 GPUs, GBS = GPUs x 20). Biases: the
        # same model.py's AttentionBlock qkv and out (torch.nn.Linear, bias on) and
        # MLPBlock's mlp1_bias and mlp2_bias per expert.
        ModelShape("gpt-oss-120b", 36, 2880, 64, 8, 2880, 201088, 4096, 1280, True, False,
                   "openai/gpt-oss gpt_oss/torch/model.py ModelConfig",
                   experts=128, top_k=4, expert_ffn=2880, kv_channels=64, sliding_window=128,
                   full_attention_every=2, qkv_bias=True, attn_out_bias=True, mlp_bias=True),
        # xai-org/grok-1 run.py (commit 7050ed20): emb_size 48 x 128 = 6144,
        # widening_factor 8 (model.py ffn_size: 8 x 6144 x 2/3 = 32768, a gated
        # GeLU), key_size 128, 48 query and 8 KV heads, 64 layers, 8 experts, 2
        # selected, vocabulary 128 x 1024, sequence_len 8192; GBS 1024:
        # NVIDIA/dgxc-benchmarking grok1/README_314b.md (v25.02, 512 GPUs).
        ModelShape("grok-1", 64, 6144, 48, 8, 32768, 131072, 8192, 1024, True, False,
                   "xai-org/grok-1 run.py and model.py",
                   experts=8, top_k=2, expert_ffn=32768),
        # meta-llama/Llama-4-Scout-17B-16E config.json text_config (tests/data/hf
        # llama4-scout-17b-16e-config.json): 48 layers, hidden 5120, 40 heads, 8 KV heads, 16
        # routed experts top-1 and one shared expert, each 8192 wide, every layer MoE
        # (interleave_moe_layer_step 1), vocabulary 202048, sequence 8192
        # (rope_scaling original_max_position_embeddings); torchtitan 0.2.2's llama4
        # "17bx16e" flavor is this shape (torchtitan/models/llama4/__init__.py
        # llama4_args, model/model.py TransformerBlock: 4 x 5120 x 2/3 x 1.2 / (top-1 + 1
        # shared) rounded up to 2048 = 8192). No published batch: 512, as for a Hugging
        # Face config (costs/modelspec.py).
        ModelShape("llama4-scout", 48, 5120, 40, 8, 16384, 202048, 8192, 512, True, False,
                   "meta-llama/Llama-4-Scout-17B-16E config.json; torchtitan llama4 17bx16e",
                   experts=16, top_k=1, expert_ffn=8192, shared_ffn=8192),
        # Dense models of today's published runs (bench/published_modern.py).
        ModelShape("llama3.1-405b", 126, 16384, 128, 8, 53248, 128256, 8192, 512, True, False,
                   "Dubey et al. 2024 table 3 (Llama 3 405B; NVIDIA's NeMo recipes run it "
                   "with 16 query groups)"),
        # Touvron et al. 2023 ("Llama 2"), table 1 and the released config.json
        # files: sequence 4,096, vocabulary 32,000, 4M-token batches (1,024 x 4,096).
        ModelShape("llama2-7b", 32, 4096, 32, 32, 11008, 32000, 4096, 1024, True, False,
                   "Touvron et al. 2023 (Llama 2 7B config.json)"),
        ModelShape("llama2-13b", 40, 5120, 40, 40, 13824, 32000, 4096, 1024, True, False,
                   "Touvron et al. 2023 (Llama 2 13B config.json)"),
        ModelShape("llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096, 1024, True, False,
                   "Touvron et al. 2023 (Llama 2 70B config.json, grouped-query attention)"),
        # NVIDIA NeMo-Framework-Launcher launcher_scripts/conf/training (commit
        # 48af207b, Aug 2024): gpt3/5b.yaml, gpt3/20b.yaml (GPT-2 BPE 50,257
        # vocabulary, learned positions, dropout 0.1, FFN 4h); nemotron/
        # nemotron_8b.yaml, nemotron_22b.yaml, nemotron_15b.yaml, nemotron_340b.yaml
        # (squared-ReLU MLP, RoPE, no dropout, 256k SentencePiece vocabulary).
        ModelShape("gpt3-5b", 24, 4096, 32, 32, 16384, 50257, 2048, 2048, False, True,
                   "NeMo-Framework-Launcher conf/training/gpt3/5b.yaml"),
        ModelShape("gpt3-20b", 44, 6144, 48, 48, 24576, 50257, 2048, 2048, False, True,
                   "NeMo-Framework-Launcher conf/training/gpt3/20b.yaml"),
        ModelShape("nemotron3-8b", 32, 4096, 32, 32, 16384, 256000, 4096, 256, False, False,
                   "NeMo-Framework-Launcher conf/training/nemotron/nemotron_8b.yaml"),
        ModelShape("nemotron3-22b", 40, 6144, 48, 48, 24576, 256000, 4096, 256, False, False,
                   "NeMo-Framework-Launcher conf/training/nemotron/nemotron_22b.yaml"),
        # Parmar et al. 2024 (Nemotron-4 15B technical report, table 1) and
        # Nvidia 2024 (Nemotron-4 340B technical report, table 1): 32 / 96
        # layers, hidden 6,144 / 18,432, 48 / 96 heads, 8 KV heads, sequence 4,096.
        ModelShape("nemotron4-15b", 32, 6144, 48, 8, 24576, 256000, 4096, 2304, False, False,
                   "Parmar et al. 2024 table 1 (Nemotron-4 15B)"),
        ModelShape("nemotron4-340b", 96, 18432, 96, 8, 73728, 256000, 4096, 2304, False, False,
                   "Nvidia 2024 table 1 (Nemotron-4 340B)"),
    ]
}


def _architecture(shape: ModelShape) -> ModelShape:
    """The shape without what a run chooses (sequence, batch, multi-token-prediction
    layers: torchtitan builds DeepSeek-V3 without them) or names it; the head dimension
    as priced (MLA prices its own head dimensions, not ``kv_channels``)."""
    return dataclasses.replace(shape, name="", source="", seq_len=0, global_batch=0,
                               mtp_layers=0, kv_channels=0 if shape.mla else shape.head_dim,
                               norm=shape.normalization)


def preset_of(shape: ModelShape) -> str | None:
    """The preset of ``shape``'s architecture (a Hugging Face config of a preset's
    model names it so), or None."""
    arch = _architecture(shape)
    return next((name for name, m in MODELS.items() if _architecture(m) == arch), None)
