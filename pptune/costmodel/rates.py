"""What the per-op model runs at (``Rates``: one GPU's peaks and measured
fractions) and how a layer is split (``Parallel``: tensor, sequence and context
parallelism, the attention kernel, the tensor-parallel links and precision).
ops.py prices every op from these two records."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum

from pptune.costmodel import nvfp4, precision
from pptune.costmodel.context import AttentionRates, CpComm, CpLinks
from pptune.costmodel.keys import Precision
from pptune.costmodel.loss import CrossEntropy
from pptune.costmodel.precision import Fp8Casts, Fp8Kernels, Fp8Recipe, TorchaoRecipe
from pptune.costmodel.presets import GpuSpec
from pptune.costmodel.sharding import MEGATRON_GRAD_BYTES
from pptune.costmodel.tp_overlap import TpOverlap

MAIN_GRAD_BYTES = MEGATRON_GRAD_BYTES  # Megatron-LM's default FP32 main_grad (sharding.py)


class Swiglu(str, Enum):
    """How a gated MLP's SiLU-and-multiply runs (ops.activation_ops).

    fused: one kernel each way that keeps only its input and reruns the SiLU in
    its backward (megatron-core's ``bias_swiglu_impl``, the default of
    ``--bias-swiglu-fusion``; torch.compile's partitioner makes the same of the
    elementwise chain); eager: PyTorch's ``silu`` then ``mul`` uncompiled (torchtitan
    without ``[compile]``, Megatron-LM with ``--no-bias-swiglu-fusion``), which keep
    the SiLU's output for the multiply's backward as well."""

    FUSED = "fused"
    EAGER = "eager"


class WgradAccum(str, Enum):
    """Where a weight GEMM's gradient goes (kernels.linear, kernels.grad_add), at the
    width of the ``main_grad`` it goes into (``Accumulation``: 4 bytes FP32, Megatron-LM's
    default; 2 BF16 under ``--grad-reduce-in-bf16``, where DDP's gradient buffer takes the
    parameters' dtype: megatron-core distributed/distributed_data_parallel.py
    ``grad_dtype = torch.float if grad_reduce_in_fp32 else param.dtype``).

    fused: accumulated into ``main_grad`` by the GEMM itself, its epilogue reading and
    writing the ``main_grad`` element: 4 + 4 bytes an output element in FP32, 2 + 2 in BF16
    (Megatron-LM's default ``gradient_accumulation_fusion``: megatron-core
    tensor_parallel/layers.py ``LinearWithGradAccumulationAndAsyncCommunication.backward``
    calls apex's ``fused_weight_gradient_mlp_cuda.wgrad_gemm_accum_fp32`` for an FP32
    ``main_grad`` and ``wgrad_gemm_accum_fp16`` for a BF16 one, whose cuBLAS GEMM (apex
    csrc/megatron/fused_weight_gradient_dense_16bit_prec_cuda.cu, ``gemmex_wrapper_fp16``)
    takes C in CUDA_R_16BF with beta 1; extensions/transformer_engine.py builds TELinear,
    TELayerNormColumnParallelLinear and TEGroupedLinear with ``fuse_wgrad_accumulation``,
    whose wgrad GEMM (Transformer Engine pytorch/module/linear.py) has ``out=main_grad``,
    ``out_dtype=main_grad.dtype`` and ``accumulate=True``: beta 1 at ``main_grad``'s width);
    unfused: the GEMM writes a BF16 ``param.grad`` (2) and a kernel of its own adds it into
    ``main_grad`` every micro-batch, reading 2 and reading and writing the ``main_grad``
    element (2 + 4 + 4 = 10 bytes a weight element in FP32, 2 + 2 + 2 = 6 in BF16)
    (``--no-gradient-accumulation-fusion``: distributed/distributed_data_parallel.py
    ``_make_backward_post_hook``, ``param.main_grad.add_(param.grad.data)``), as it does
    for megatron-core's router (moe/router.py ``router_gating_linear``) and the embedding
    (ends.embedding_ops) either way; bf16: the BF16 gradient alone, as autograd leaves it
    (torchtitan, DeepSpeed, torch FSDP2)."""

    BF16 = "bf16"
    FUSED = "fused"
    UNFUSED = "unfused"

    @property
    def main_grad(self) -> bool:
        """A Megatron-LM ``main_grad`` the hook adds unfused gradients into."""
        return self is not WgradAccum.BF16


@dataclass(frozen=True)
class Accumulation:
    """Where weight gradients go (``how``) and the width of the ``main_grad`` they go
    into (``main_grad_bytes``: 4 FP32, 2 BF16), with the bytes each way moves
    (WgradAccum's docstring)."""

    how: WgradAccum = WgradAccum.BF16
    main_grad_bytes: float = MAIN_GRAD_BYTES

    @property
    def out_bytes(self) -> float:
        """Bytes the weight GEMM's epilogue moves an output element: the ``main_grad``
        element read and written (fused), else the BF16 gradient written."""
        return 2.0 * self.main_grad_bytes if self.how is WgradAccum.FUSED else 2.0

    @property
    def add_bytes(self) -> float:
        """Bytes the separate accumulation kernel moves a weight element (0: none): the
        BF16 gradient read, the ``main_grad`` element read and written."""
        return 2.0 + 2 * self.main_grad_bytes if self.how is WgradAccum.UNFUSED else 0.0

    @property
    def main_grad(self) -> bool:
        return self.how.main_grad

    def unfused(self) -> Accumulation:
        """A gradient DDP's hook adds into the ``main_grad`` whatever the GEMMs do (the
        router's, the embedding's): unfused where there is a ``main_grad``."""
        return dataclasses.replace(self, how=WgradAccum.UNFUSED) if self.main_grad else self


@dataclass(frozen=True)
class Rates:
    """What the ops run at: one GPU's peaks, achieved fractions and overrides."""

    peak_flops: float
    hbm_bytes_per_s: float  # achieved, not the datasheet figure
    sm_count: int
    gemm_fraction: float
    attention_fraction: float
    launch_s: float
    gemm_efficiency: float | None = None  # user override (--efficiency)
    fp8_peak_flops: float | None = None  # dense FP8 (precision.py); None: no FP8
    fp8_gemm_fraction: float | None = None
    low_input_bytes: float = 1.0  # a low-precision GEMM input element (NVFP4: nvfp4.py)
    causal_attention: tuple[tuple[int, float], ...] = ()  # share of peak by kernel length
    full_attention: tuple[tuple[int, float], ...] = ()

    @classmethod
    def of(cls, gpu: GpuSpec, efficiency: float | None = None,
           gemm_precision: Precision = Precision.BF16) -> Rates:
        """The GPU's rates; under NVFP4 the low-precision GEMMs' peak, fraction and input
        bytes are FP4's (precision.gemm_peak, nvfp4.py), else FP8's."""
        if gemm_precision is Precision.NVFP4:
            peak, fraction = precision.gemm_peak(gemm_precision, gpu)
            return dataclasses.replace(cls.of(gpu, efficiency), fp8_peak_flops=peak,
                                       fp8_gemm_fraction=fraction,
                                       low_input_bytes=nvfp4.COPY_BYTES)
        return cls(
            peak_flops=gpu.peak_flops, hbm_bytes_per_s=gpu.hbm_bytes_per_s * gpu.hbm_fraction,
            sm_count=gpu.sm_count, gemm_fraction=gpu.gemm_fraction,
            attention_fraction=gpu.attention_fraction, launch_s=gpu.launch_s,
            gemm_efficiency=efficiency, fp8_peak_flops=gpu.fp8_peak_flops,
            fp8_gemm_fraction=gpu.fp8_gemm_fraction, causal_attention=gpu.causal_attention,
            full_attention=gpu.full_attention,
        )

    def attention(self) -> AttentionRates:
        return AttentionRates(self.peak_flops, self.attention_fraction,
                              self.causal_attention, self.full_attention)

    def with_sms(self, sms: int) -> Rates:
        """The same GPU with a kernel confined to ``sms`` of its SMs: the tensor-core
        peaks in proportion, the tile waves counted on ``sms`` (ops.gemm); HBM
        bandwidth is the whole GPU's (a streaming kernel on a fraction of the SMs
        still reaches most of it; only GEMMs are confined here)."""
        if sms == self.sm_count:
            return self
        share = sms / self.sm_count
        fp8 = self.fp8_peak_flops * share if self.fp8_peak_flops is not None else None
        return dataclasses.replace(self, sm_count=sms, peak_flops=self.peak_flops * share,
                                   fp8_peak_flops=fp8)


@dataclass(frozen=True)
class Parallel:
    """How the layer is split: tensor parallelism, sequence parallelism,
    attention kernel, and the tensor-parallel group's collective and
    point-to-point links."""

    tp: int = 1
    sequence_parallel: bool = False
    flash_attention: bool = True
    tp_latency_s: float = 20e-6
    tp_busbw_bytes_per_s: float = 450e9
    tp_comm_overlap: bool = False  # collectives pipelined with their GEMM (--tp-comm-overlap)
    cp: int = 1  # context parallelism: the sequence over cp ranks (context.py)
    cp_comm: CpComm = CpComm.P2P  # how they exchange K/V (--cp-comm-type)
    cp_links: CpLinks | None = None  # where the cp group sits; None: nothing priced
    precision: Precision = Precision.BF16  # of the block's GEMMs (precision.py)
    # Transformer Engine's per-GEMM overlap (tp_overlap.py) when tp_comm_overlap and
    # sequence parallelism are on; None: its v1.13 defaults
    tp_overlap: TpOverlap | None = None
    tp_p2p_latency_s: float = 10e-6  # one userbuffers copy between TP peers (ring exchange)
    tp_p2p_bytes_per_s: float = 396.4e9  # pairwise NVLink copy (presets.py fabric)
    cross_entropy: CrossEntropy = CrossEntropy.FUSED  # the loss's kernels (loss.py)
    swiglu: Swiglu = Swiglu.FUSED  # a gated MLP's activation kernels (Swiglu)
    fp8_kernels: Fp8Kernels = Fp8Kernels.TE  # whose FP8 linears (precision.py)
    fp8_params: bool = False  # FP8 weights handed to the linears (no weight casts in them)
    wgrad_accum: WgradAccum = WgradAccum.BF16  # where weight gradients go (WgradAccum)
    torchao_recipe: TorchaoRecipe = TorchaoRecipe.TENSORWISE  # torchao's scaling (precision.py)
    # Transformer Engine's scaling recipe (precision.py: block scaling's scales)
    fp8_recipe: Fp8Recipe = Fp8Recipe.DELAYED
    main_grad_bytes: float = MAIN_GRAD_BYTES  # the main_grad's width (Accumulation)
    fp8_casts: Fp8Casts = Fp8Casts.FUSED  # torchao's casts compiled or eager (precision.py)

    @property
    def accumulation(self) -> Accumulation:
        """Where the weight gradients go, at the ``main_grad``'s width."""
        return Accumulation(self.wgrad_accum, self.main_grad_bytes)

    @property
    def saved_input_bytes(self) -> float:
        """Bytes a GEMM input element is saved as (precision.saved_input_bytes)."""
        return precision.saved_input_bytes(self.precision, self.fp8_kernels, self.fp8_recipe)

    @property
    def gemm_input_bytes(self) -> float:
        """Bytes an FP8 GEMM's input element occupies (precision.gemm_input_bytes)."""
        return precision.gemm_input_bytes(self.precision, self.fp8_recipe)

    @property
    def cast_bytes(self) -> float:
        """Bytes an FP8 cast moves an element (precision.cast_bytes_per_element)."""
        return precision.cast_bytes_per_element(self.fp8_recipe, self.precision)

    @property
    def fp8(self) -> bool:
        return precision.is_low(self.precision)

    @property
    def nvfp4(self) -> bool:
        """NVFP4 GEMMs: Transformer Engine's NVFP4 casts (nvfp4.py)."""
        return self.precision is Precision.NVFP4

    @property
    def fp8_wgrad(self) -> bool:
        """The linears' weight-gradient GEMMs in FP8: not under torchao's
        rowwise_with_gw_hp, which runs them in BF16 (precision.py)."""
        return self.fp8 and not (self.fp8_kernels is Fp8Kernels.TORCHAO
                                 and self.torchao_recipe is TorchaoRecipe.ROWWISE_WITH_GW_HP)
