"""DeepEP's communication buffers: the bytes each rank holds for the MoE dispatch.

Megatron-core 0.16.1 allocates one ``deep_ep.Buffer`` a process, on its first MoE
dispatch, and keeps it (megatron/core/transformer/moe/fused_a2a.py ``get_buffer``, a
module-level ``_buffer``): for the flex dispatcher's group, the expert-parallel ranks
with the expert-tensor-parallel ones (token_dispatcher.py ``_DeepepManager(group=
self.tp_ep_group)``: ``n = ep x etp`` ranks), and the tokens' hidden bytes
(``get_hidden_bytes``: ``hidden x max(element size, 2)``, 2 h for BF16 or FP8 tokens).
It sizes the buffer as the larger hint of DeepEP's dispatch and combine configs:

    for config in (Buffer.get_dispatch_config(n), Buffer.get_combine_config(n)):
        num_nvl_bytes = max(config.get_nvl_buffer_size_hint(hidden_bytes, n), ...)
        num_rdma_bytes = max(config.get_rdma_buffer_size_hint(hidden_bytes, n), ...)

DeepEP v1.2.1 (deep_ep/buffer.py, csrc/config.hpp, csrc/deep_ep.cpp, csrc/kernels/
configs.cuh): a config is (SMs, NVL send / receive chunk tokens, RDMA send / receive chunk
tokens) for the group's size (``CONFIGS`` below; other sizes assert "Unsupported number of
EP ranks"); the RDMA receive chunk is rounded up to a multiple of the send chunk
(``Config::Config``). With ``c = SMs / 2`` channels (``Buffer.num_sms``, which
megatron-core sets to ``moe_deepep_num_sms``, 20), ``R = max(n / 8, 1)`` RDMA ranks
(nodes) and ``N = min(n, 8)`` NVLink peers, ``K = 128`` the most top-k and the most scales
a token, a 4-byte int, an 8-byte int64 index, 4-byte floats and an 8-byte ``SourceMeta``
(two ints, csrc/kernels/internode.cu), the hints are, each rounded up to 128 bytes:

    NVL   c N (2 R + 3) 4 + c N r_nvl (hidden_bytes + 8 + K 8 + K 4 + K 4)
    RDMA  0 up to 8 ranks (NVLink only); else
          c R (8 x 2 + 2) 2 x 4 + c R r_rdma 2 (hidden_bytes + 8 + K 8 + K 4 + K 4 + 16)

(``r_nvl``, ``r_rdma``: the receive chunks in tokens). The C++ buffer adds to the NVLink
buffer 8 barrier ints and 16 pointers (160 bytes) and allocates a 32 MiB workspace. The
RDMA buffer comes from NVSHMEM's symmetric heap; the heap's own reservation and its
granularity are not counted (the reserve, memory.py, holds them).
"""

from __future__ import annotations

from dataclasses import dataclass

from pptune.costmodel.dispatch import Dispatcher, ExpertParallel

NVL_PEERS = 8  # NUM_MAX_NVL_PEERS (csrc/kernels/configs.cuh)
WORKSPACE_BYTES = 32 * 1024 * 1024  # NUM_WORKSPACE_BYTES
# barrier signals (ints) and the buffer and signal pointer arrays, NVL_PEERS each
NVL_META_BYTES = NVL_PEERS * (4 + 8 + 8)
MAX_TOPK = 128  # kNumMaxTopK
MAX_SCALES = 128  # kNumMaxScales
SOURCE_META_BYTES = 8  # sizeof(SourceMeta): src_rdma_rank, is_token_in_nvl_rank_bits
ALIGN = 128  # both hints are rounded up to 128 bytes


@dataclass(frozen=True)
class Config:
    """One of DeepEP's recommended configs (deep_ep/buffer.py), tokens a chunk."""

    nvl_send: int
    nvl_recv: int
    rdma_send: int
    rdma_recv: int

    @property
    def rdma_recv_aligned(self) -> int:
        """The receive chunk rounded up to a multiple of the send chunk (Config::Config)."""
        return -(-self.rdma_recv // self.rdma_send) * self.rdma_send


# group size -> (dispatch, combine): Buffer.get_dispatch_config / get_combine_config, v1.2.1
CONFIGS: dict[int, tuple[Config, Config]] = {
    2: (Config(24, 256, 6, 128), Config(10, 256, 6, 128)),
    4: (Config(6, 256, 6, 128), Config(9, 256, 6, 128)),
    8: (Config(6, 256, 6, 128), Config(4, 256, 6, 128)),
    16: (Config(36, 288, 20, 128), Config(4, 288, 12, 128)),
    24: (Config(8, 288, 32, 128), Config(1, 288, 8, 128)),
    32: (Config(32, 288, 32, 128), Config(1, 288, 8, 128)),
    64: (Config(20, 288, 28, 128), Config(1, 288, 20, 128)),
    128: (Config(20, 560, 32, 128), Config(1, 560, 12, 128)),
    144: (Config(32, 720, 12, 128), Config(2, 720, 8, 128)),
    160: (Config(28, 720, 12, 128), Config(2, 720, 8, 128)),
}


def _aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


def nvl_hint(config: Config, hidden_bytes: int, ranks: int, sms: int) -> int:
    """``Config::get_nvl_buffer_size_hint`` (module docstring)."""
    channels, rdma, nvl = sms // 2, max(ranks // NVL_PEERS, 1), min(ranks, NVL_PEERS)
    per_token = (hidden_bytes + SOURCE_META_BYTES + MAX_TOPK * 8 + MAX_TOPK * 4
                 + MAX_SCALES * 4)
    return _aligned(channels * nvl * (2 * rdma + 3) * 4
                    + channels * nvl * config.nvl_recv * per_token)


def rdma_hint(config: Config, hidden_bytes: int, ranks: int, sms: int) -> int:
    """``Config::get_rdma_buffer_size_hint`` (module docstring): 0 within one node."""
    if ranks <= NVL_PEERS:
        return 0
    channels, rdma = sms // 2, ranks // NVL_PEERS
    per_token = 2 * (hidden_bytes + SOURCE_META_BYTES + MAX_TOPK * 8 + MAX_TOPK * 4
                     + MAX_SCALES * 4 + 16)
    return _aligned(channels * rdma * (NVL_PEERS * 2 + 2) * 2 * 4
                    + channels * rdma * config.rdma_recv_aligned * per_token)


def buffer_bytes(hidden: int, ranks: int, sms: int) -> float | None:
    """Bytes DeepEP holds on each rank of an ``ranks``-rank expert group (ep x etp) for
    tokens of ``hidden`` elements, its kernels on ``sms`` SMs: the NVLink and RDMA
    buffers megatron-core's ``get_buffer`` asks for, the metadata and the workspace. None
    for a group size DeepEP has no config for (it refuses it)."""
    if ranks not in CONFIGS:
        return None
    hidden_bytes = 2 * hidden  # get_hidden_bytes: max(element size, 2) a value
    nvl = max(nvl_hint(c, hidden_bytes, ranks, sms) for c in CONFIGS[ranks])
    rdma = max(rdma_hint(c, hidden_bytes, ranks, sms) for c in CONFIGS[ranks])
    return float(nvl + NVL_META_BYTES + WORKSPACE_BYTES + rdma)


def dispatch_buffer_bytes(ex: ExpertParallel | None, hidden: int) -> float:
    """Bytes the dispatcher keeps on each rank with an expert layer: DeepEP's buffers for
    its ep x etp group; 0 for NCCL's all-to-all and the allgather dispatcher, whose
    buffers are NCCL's (the reserve), and for a group size DeepEP has no config for."""
    if ex is None or ex.dispatcher is not Dispatcher.DEEPEP:
        return 0.0
    return buffer_bytes(hidden, ex.ep * ex.etp, ex.dispatch_sms) or 0.0
