"""Published figures from pipeline-parallelism papers, as plain data.

Pure data: imports only the stdlib.  Every record has a ``source`` string naming the
paper and table.  Nothing here is estimated or derived.  Where a value could not be
read reliably it is left out, and the comments below say so.

HOW THE NUMBERS WERE READ (read this first)
-------------------------------------------
The publisher PDFs were not available directly.  Every table below was read from
text conversions of the papers that are stored in public GitHub repositories (found
through the code index; the repository names were not reported, only index file ids):

* Zero Bubble (Qi et al.), three independent conversions:
    - id 70309061779: a MinerU-style PDF extraction of the ICLR 2024 camera-ready
      (OpenReview tuzTN0eIO5), which has no ZB-V section;
    - id 61003545947: a PDF text extraction of the arXiv 2401.10241 version that has
      the ZB-V section (Sec. 6);
    - id 45548154975: a markdown made by an LLM reading the rendered PDF of
      arXiv 2401.10241v1, also the ZB-V version.
  Tables 3, 4, 5 and the profiled-time table match exactly in all three.  Where
  the LLM-made markdown disagrees with the two PDF extractions (two rows of the
  same-memory table, see ZB_SAME_MEMORY), the PDF extractions are used and the LLM
  copy is treated as wrong.
* Narayanan et al. 2021 (Megatron-LM, SC21), one conversion: id 63285939983, a
  marker-style PDF extraction.  The first and last rows of Table 1 also appear in a
  second, independent note (id 69859008478).  Every row passes the check
  aggregate PFLOP/s ~= TFLOP/s per GPU * #GPUs / 1000 (within rounding).
* Korthikanti et al. 2022, one conversion: id 69442322288, a MinerU-style PDF
  extraction of arXiv 2205.05198.
* Megatron-LM theoretical_memory_usage.py was read straight from the repository
  (NVIDIA/Megatron-LM, commit 00caa53af30912914981c86f39db123961678bbd).
These are copies of the papers, not secondary summaries.  Still, they are not the
typeset originals, so each record's ``via`` field names the copy that was used.

PAGE NUMBERS: none of the conversions keeps reliable page numbers, so pages are
left out.  The one exception is Narayanan Table 1: the conversion puts it just
before a "_page_7_" figure marker (0-based), which suggests PDF p. 8.  That is an
inference and has not been checked.

TABLE NUMBERING DIFFERS BETWEEN ZERO BUBBLE VERSIONS (important):
    content                          ICLR camera-ready    arXiv 2401.10241 (ZB-V version)
    model setups                     Table 3              Table 3
    throughput + memory              Table 4              Table 4
    bubble rates                     Table 5              Table 5
    ZB-V comparison                  --                   Table 6 / 7 / 8
    profiled T_F,T_B,T_W,T_comm      Table 6 (App. D)     Table 9 (App. D)
    post-validation ablation         Table 7 (App. E)     Table 10 (App. E)
    same-memory comparison           Table 8 (App. F)     Table 11 (App. F)
    small m (m <= p)                 Table 9 (App. H)     Table 12 (App. H)
"Table 9" means the profiled times ONLY in the arXiv numbering.  In the ICLR
numbering, Table 9 is the small-m table.

UNITS AND OTHER DOUBTS:
* ZB profiled times: the table header prints no unit.  Values are kept as printed,
  in fields named t_f / t_b / t_w / t_comm with no unit.  Milliseconds is the only
  plausible unit, but that is my inference: for 1.5B with b=6, s=1024, h=2304 and
  3 layers on a middle stage, T_F=18.5 would mean about 136 TFLOP/s on an A100 if
  it were ms.  The paper does not state it.
* ZB Table 4 memory: the row label is "Memory (GB)".  The table does not say
  "peak" and does not say whether it is the maximum over GPUs.  The project issue's
  "1.5B, 1F1B-I: 40 GB" matches this table (Table 4, Memory (GB), 1F1B-I, 1.5B: 40
  for m = 24/32/64).  So the field is named memory_gb, not peak_memory_gb.
* ZB Table 4 has no ZB-H1/ZB-H2 throughput or memory.  ZB-H1/H2 appear only in the
  bubble-rate tables (5 and arXiv 8), and those rates are computed from the profiled
  times, not measured.  Table 4 also has no 1F1B-I in the same-memory table.
* ZB same-memory table: the middle-m rows of 14.6B and 28.3B are printed with
  m = 32 in both PDF extractions.  Their ZB-2p values (1.83 and 1.00) equal Table 4
  at m = 64 and m = 128, so the paper probably has a typo here.  They are recorded
  as printed (32) with m_note set.
* ZB-V Table 6 (arXiv) memory of ZB-2p* for 14.6B is left out.  The PDF extraction
  is garbled at that cell and the LLM copy reads 45 where the extraction's order
  suggests 46.
* Narayanan Table 1: the micro-batch size of these runs is NOT stated in Sec. 5.1
  or in the table.  The number of interleaved chunks (model chunks per device) is
  also NOT stated.  Only the exact wording that exists is recorded
  (MEGATRON_TABLE1_TEXT).
* Korthikanti Fig. 7 (memory as % of the baseline) and Fig. 8 (per-layer
  breakdown) are plots only.  No tabulated memory numbers were found, so none are
  recorded.
"""

from dataclasses import dataclass

# ---------------------------------------------------------------------------
# Source strings
# ---------------------------------------------------------------------------

ZB_PAPER = "Qi, Wan, Huang, Lin. Zero Bubble Pipeline Parallelism. ICLR 2024; arXiv 2401.10241"
ZB_VIA_3 = ("text conversions of the paper (GitHub index ids 70309061779 [ICLR PDF extraction], "
            "61003545947 [arXiv PDF extraction], 45548154975 [LLM-read arXiv v1]); all three agree")
ZB_VIA_2 = ("text conversions of the paper (ids 70309061779 [ICLR], 61003545947 [arXiv]); "
            "LLM-read copy 45548154975 disagrees on some cells and was not used")
ZB_VIA_ARXIV = ("arXiv-only ZB-V section: ids 61003545947 [PDF extraction] and "
                "45548154975 [LLM-read]; they agree on every cell recorded")

MEGATRON_PAPER = ("Narayanan et al. Efficient Large-Scale Language Model Training on GPU Clusters "
                  "Using Megatron-LM. SC21; arXiv 2104.04473")
MEGATRON_VIA = ("PDF text conversion (GitHub index id 63285939983); first/last Table 1 rows also "
                "in id 69859008478")

KORTHIKANTI_PAPER = ("Korthikanti et al. Reducing Activation Recomputation in Large Transformer "
                     "Models. arXiv 2205.05198 (MLSys 2023)")
KORTHIKANTI_VIA = "PDF text conversion (GitHub index id 69442322288); single source"


# ---------------------------------------------------------------------------
# 1. Zero Bubble Pipeline Parallelism
# ---------------------------------------------------------------------------

# Setup text, Sec. 5.1 (same wording in all three conversions):
ZB_SETUP_TEXT = (
    "Our experiments utilize up to 32 NVIDIA A100 SXM 80G GPUs distributed across 4 nodes "
    "interconnected by a RoCE RDMA network."
)
ZB_INTERLEAVED_TEXT = (
    "In our interleaved experiments, we always use the maximum number of chunks to ensure "
    "least bubble, i.e. each transformer layer serves as a chunk."
)
ZB_STAGE_LAYER_TEXT = (
    "both the initial and final pipeline stages possess one fewer transformer layer compared "
    "to the intermediate stages."
)
# Bubble rate definition, Sec. 5.3: (cost - m*(T_F+T_B+T_W)) / cost, where cost is the
# largest execution time over all stages computed from the profiled T_F, T_B, T_W and
# T_comm.  The paper says the Table 5 rates are "based on theoretical calculations
# instead of real experiments".

# Table 1 (FLOPs and activation memory per transformer layer for each pass), as printed:
#   F: FLOPs sbh(24h + 4s), activation memory required 0
#   B: FLOPs sbh(24h + 8s), activation memory required sb(34h + 5as)
#   W: FLOPs sbh(24h),      activation memory required 32sbh
# Table 2 (handcrafted schedules):
#   1F1B : bubble (p-1)(T_F+T_B+T_W),  peak activation memory p*M_B
#   ZB-H1: bubble (p-1)(T_F+T_B-T_W),  peak activation memory p*M_B
#   ZB-H2: bubble (p-1)(T_F+T_B-2T_W), peak activation memory (2p-1)*M_B


@dataclass(frozen=True)
class ZBModel:
    model: str
    layers: int
    attention_heads: int
    hidden_size: int
    seq_len: int
    pipeline_stages: int        # column "Pipelines (GPUs)"; one GPU per stage
    micro_batch_size: int
    num_microbatches: tuple     # the three m values used
    source: str
    via: str = ZB_VIA_3


ZB_MODELS = tuple(
    ZBModel(name, n_layers, a, h, s, p, b, ms, f"{ZB_PAPER}, Table 3 (both versions)")
    for (name, n_layers, a, h, s, p, b, ms) in (
        ("1.5B", 22, 24, 2304, 1024, 8, 6, (24, 32, 64)),
        ("6.2B", 30, 32, 4096, 1024, 8, 3, (24, 32, 64)),
        ("14.6B", 46, 40, 5120, 1024, 16, 1, (48, 64, 128)),
        ("28.3B", 62, 48, 6144, 1024, 32, 1, (96, 128, 256)),
    )
)


@dataclass(frozen=True)
class ZBProfiled:
    """Profiled times recorded in ZB-2p runs.  Unit NOT printed in the paper (see module doc)."""
    model: str
    stages: int
    num_microbatches: int
    t_f: float
    t_b: float
    t_w: float
    t_comm: float
    source: str
    via: str = ZB_VIA_3


_ZB_PROF_SRC = f"{ZB_PAPER}, App. D: Table 9 (arXiv numbering) = Table 6 (ICLR numbering)"
ZB_PROFILED = tuple(
    ZBProfiled(*row, source=_ZB_PROF_SRC)
    for row in (
        ("1.5B", 8, 24, 18.522, 18.086, 9.337, 0.601),
        ("1.5B", 8, 32, 18.513, 18.086, 9.331, 0.626),
        ("1.5B", 8, 64, 18.546, 18.097, 9.321, 0.762),
        ("6.2B", 8, 24, 29.718, 29.444, 19.927, 0.527),
        ("6.2B", 8, 32, 29.802, 29.428, 19.530, 0.577),
        ("6.2B", 8, 64, 29.935, 29.621, 19.388, 0.535),
        ("14.6B", 16, 48, 11.347, 11.248, 8.132, 0.377),
        ("14.6B", 16, 64, 11.307, 11.254, 8.101, 0.379),
        ("14.6B", 16, 128, 11.325, 11.308, 8.109, 0.378),
        ("28.3B", 32, 96, 10.419, 10.207, 7.715, 0.408),
        ("28.3B", 32, 128, 10.408, 10.204, 7.703, 0.408),
        ("28.3B", 32, 256, 10.402, 10.248, 7.698, 0.460),
    )
)


@dataclass(frozen=True)
class ZBBubble:
    """Bubble rate (fraction, not %), computed by the paper from profiled times."""
    model: str
    stages: int
    num_microbatches: int
    schedule: str           # "1F1B", "1F1B-I", "ZB-H1", "ZB-H2", "ZB-1p", "ZB-2p", "ZB-V"
    bubble_rate: float
    source: str
    via: str = ZB_VIA_3


_ZB_T5_SCHEDULES = ("1F1B", "1F1B-I", "ZB-H1", "ZB-H2", "ZB-1p", "ZB-2p")
_ZB_T5 = (
    ("1.5B", 8, 24, (0.2431, 0.1055, 0.1585, 0.1083, 0.1585, 0.0433)),
    ("1.5B", 8, 32, (0.1985, 0.0818, 0.1242, 0.0837, 0.1242, 0.0039)),
    ("1.5B", 8, 64, (0.1240, 0.0443, 0.0674, 0.0444, 0.0674, 0.0026)),
    ("6.2B", 8, 24, (0.2347, 0.0808, 0.1323, 0.0698, 0.1323, 0.0029)),
    ("6.2B", 8, 32, (0.1898, 0.0628, 0.1045, 0.0559, 0.1045, 0.0022)),
    ("6.2B", 8, 64, (0.1091, 0.0320, 0.0554, 0.0294, 0.0554, 0.0010)),
    ("14.6B", 16, 48, (0.2552, 0.1104, 0.1397, 0.0672, 0.1397, 0.0066)),
    ("14.6B", 16, 64, (0.2082, 0.0852, 0.1088, 0.0516, 0.1088, 0.0054)),
    ("14.6B", 16, 128, (0.1251, 0.0445, 0.0576, 0.0266, 0.0576, 0.0028)),
    ("28.3B", 32, 96, (0.2646, 0.1493, 0.1421, 0.0641, 0.1421, 0.0038)),
    ("28.3B", 32, 128, (0.2168, 0.1164, 0.1106, 0.0490, 0.1106, 0.0029)),
    ("28.3B", 32, 256, (0.1352, 0.0624, 0.0594, 0.0257, 0.0594, 0.0018)),
)
ZB_BUBBLE = tuple(
    ZBBubble(model, p, m, sched, rate, f"{ZB_PAPER}, Table 5 (both versions)")
    for (model, p, m, rates) in _ZB_T5
    for sched, rate in zip(_ZB_T5_SCHEDULES, rates, strict=False)
)

# arXiv-only ZB-V bubble rates, from the ZB-V runs' profiled times (which are not
# tabulated).  Note these use different stage counts from Table 5 (6.2B p=16, 14.6B p=24).
_ZBV_T8_SCHEDULES = ("1F1B", "1F1B-I", "ZB-H1", "ZB-H2", "ZB-V")
_ZBV_T8 = (
    ("6.2B", 16, 48, (0.2668, 0.1499, 0.1536, 0.0823, 0.0697)),
    ("6.2B", 16, 64, (0.2206, 0.1169, 0.1198, 0.0630, 0.0533)),
    ("6.2B", 16, 128, (0.1390, 0.0621, 0.0637, 0.0325, 0.0274)),
    ("14.6B", 24, 72, (0.2699, 0.1519, 0.1439, 0.0628, 0.0638)),
    ("14.6B", 24, 96, (0.2229, 0.1184, 0.1121, 0.0480, 0.0483)),
    ("14.6B", 24, 192, (0.1403, 0.0630, 0.0595, 0.0247, 0.0250)),
    ("28.3B", 32, 96, (0.2676, 0.1509, 0.1429, 0.0629, 0.0593)),
    ("28.3B", 32, 128, (0.2204, 0.1177, 0.1111, 0.0478, 0.0451)),
    ("28.3B", 32, 256, (0.1362, 0.0626, 0.0593, 0.0251, 0.0236)),
)
ZBV_BUBBLE = tuple(
    ZBBubble(model, p, m, sched, rate, f"{ZB_PAPER}, Table 8 (arXiv ZB-V version only)",
             via=ZB_VIA_ARXIV)
    for (model, p, m, rates) in _ZBV_T8
    for sched, rate in zip(_ZBV_T8_SCHEDULES, rates, strict=False)
)


@dataclass(frozen=True)
class ZBThroughput:
    """Measured throughput in samples per GPU per second."""
    model: str
    num_gpus: int
    num_microbatches: int
    micro_batch_size: int
    schedule: str
    samples_per_gpu_per_s: float
    source: str
    via: str = ZB_VIA_3
    m_note: str = ""


@dataclass(frozen=True)
class ZBMemory:
    """Measured memory in GB, as labelled "Memory (GB)" in the paper (peak/max-over-GPUs not stated)."""
    model: str
    num_gpus: int
    num_microbatches: int
    micro_batch_size: int
    schedule: str
    memory_gb: float
    source: str
    via: str = ZB_VIA_3
    m_note: str = ""


_ZB_T4_SRC = f"{ZB_PAPER}, Table 4 'Experiment result details' (both versions)"
_ZB_T4_SETUP = (  # model, #GPU, micro-batch size (Table 3), m values
    ("1.5B", 8, 6, (24, 32, 64)),
    ("6.2B", 8, 3, (24, 32, 64)),
    ("14.6B", 16, 1, (48, 64, 128)),
    ("28.3B", 32, 1, (96, 128, 256)),
)
# Table 4 rows, 12 values each in column order 1.5B(24,32,64) 6.2B(24,32,64)
# 14.6B(48,64,128) 28.3B(96,128,256).
_ZB_T4_THROUGHPUT = {
    "ZB-2p": (14.5, 14.8, 14.9, 4.32, 4.35, 4.39, 1.81, 1.83, 1.85, 0.99, 1.00, 1.00),
    "ZB-1p": (12.9, 13.4, 14.2, 3.88, 4.00, 4.20, 1.61, 1.67, 1.76, 0.87, 0.90, 0.96),
    "1F1B": (11.8, 12.5, 13.6, 3.50, 3.70, 4.03, 1.40, 1.49, 1.64, 0.76, 0.80, 0.88),
    "1F1B-I": (13.1, 13.4, 13.9, 4.01, 4.08, 4.19, 1.54, 1.59, 1.66, 0.82, 0.85, 0.90),
}
_ZB_T4_MEMORY = {
    "ZB-2p": (59, 59, 59, 70, 70, 70, 51, 51, 51, 74, 74, 74),
    "ZB-1p": (32, 32, 32, 42, 42, 42, 33, 33, 33, 44, 44, 44),
    "1F1B": (30, 30, 30, 39, 39, 39, 32, 32, 32, 43, 43, 43),
    "1F1B-I": (40, 40, 40, 48, 48, 48, 39, 39, 39, 58, 58, 58),
}
_ZB_T4_COLS = tuple(
    (model, gpus, b, m) for (model, gpus, b, ms) in _ZB_T4_SETUP for m in ms
)
ZB_THROUGHPUT = tuple(
    ZBThroughput(model, gpus, m, b, sched, vals[i], _ZB_T4_SRC)
    for sched, vals in _ZB_T4_THROUGHPUT.items()
    for i, (model, gpus, b, m) in enumerate(_ZB_T4_COLS)
)
ZB_MEMORY = tuple(
    ZBMemory(model, gpus, m, b, sched, float(vals[i]), _ZB_T4_SRC)
    for sched, vals in _ZB_T4_MEMORY.items()
    for i, (model, gpus, b, m) in enumerate(_ZB_T4_COLS)
)

# Post-validation ablation (ZB-2p, samples/GPU/s): post-validation vs all-reduce sync.
# (model, p, m, post_validation, allreduce_sync)
ZB_POST_VALIDATION_ABLATION = (
    ("1.5B", 8, 24, 14.5, 13.11),
    ("6.2B", 8, 24, 4.32, 4.00),
    ("14.6B", 16, 48, 1.81, 1.68),
    ("28.3B", 32, 96, 0.99, 0.91),
)
ZB_POST_VALIDATION_SOURCE = (f"{ZB_PAPER}, App. E: Table 10 (arXiv) = Table 7 (ICLR); "
                             f"via {ZB_VIA_3}")

# Same-memory comparison (micro-batch doubled for 1F1B and ZB-1p).
# Rows: (model, p, m_as_printed, b, samples/GPU/s, memory GB, schedule, m_note)
_TYPO = ("printed m=32 in both PDF extractions; ZB-2p value equals Table 4 at the middle m "
         "(64 for 14.6B, 128 for 28.3B), so probably a typo in the paper")
_ZB_SAME_MEM = (
    ("1.5B", 8, 24, 12, 12.0, 57, "1F1B", ""),
    ("1.5B", 8, 24, 12, 13.0, 61, "ZB-1p", ""),
    ("1.5B", 8, 24, 6, 14.5, 59, "ZB-2p", ""),
    ("1.5B", 8, 32, 12, 12.6, 57, "1F1B", ""),
    ("1.5B", 8, 32, 12, 13.6, 61, "ZB-1p", ""),
    ("1.5B", 8, 32, 6, 14.8, 59, "ZB-2p", ""),
    ("1.5B", 8, 64, 12, 13.8, 57, "1F1B", ""),
    ("1.5B", 8, 64, 12, 14.4, 61, "ZB-1p", ""),
    ("1.5B", 8, 64, 6, 14.9, 59, "ZB-2p", ""),
    ("6.2B", 8, 24, 6, 3.56, 66, "1F1B", ""),
    ("6.2B", 8, 24, 6, 3.95, 71, "ZB-1p", ""),
    ("6.2B", 8, 24, 3, 4.32, 70, "ZB-2p", ""),
    ("6.2B", 8, 32, 6, 3.76, 66, "1F1B", ""),
    ("6.2B", 8, 32, 6, 4.05, 71, "ZB-1p", ""),
    ("6.2B", 8, 32, 3, 4.35, 70, "ZB-2p", ""),
    ("6.2B", 8, 64, 6, 4.09, 66, "1F1B", ""),
    ("6.2B", 8, 64, 6, 4.24, 71, "ZB-1p", ""),
    ("6.2B", 8, 64, 3, 4.39, 70, "ZB-2p", ""),
    ("14.6B", 16, 48, 2, 1.53, 50, "1F1B", ""),
    ("14.6B", 16, 48, 2, 1.73, 51, "ZB-1p", ""),
    ("14.6B", 16, 48, 1, 1.81, 51, "ZB-2p", ""),
    ("14.6B", 16, 32, 2, 1.62, 50, "1F1B", _TYPO),
    ("14.6B", 16, 32, 2, 1.79, 51, "ZB-1p", _TYPO),
    ("14.6B", 16, 32, 1, 1.83, 51, "ZB-2p", _TYPO),
    ("14.6B", 16, 128, 2, 1.78, 50, "1F1B", ""),
    ("14.6B", 16, 128, 2, 1.89, 51, "ZB-1p", ""),
    ("14.6B", 16, 128, 1, 1.85, 51, "ZB-2p", ""),
    ("28.3B", 32, 96, 2, 0.81, 72, "1F1B", ""),
    ("28.3B", 32, 96, 2, 0.93, 74, "ZB-1p", ""),
    ("28.3B", 32, 96, 1, 0.99, 74, "ZB-2p", ""),
    ("28.3B", 32, 32, 2, 0.85, 72, "1F1B", _TYPO),
    ("28.3B", 32, 32, 2, 0.96, 74, "ZB-1p", _TYPO),
    ("28.3B", 32, 32, 1, 1.00, 74, "ZB-2p", _TYPO),
    ("28.3B", 32, 256, 2, 0.94, 72, "1F1B", ""),
    ("28.3B", 32, 256, 2, 1.02, 74, "ZB-1p", ""),
    ("28.3B", 32, 256, 1, 1.00, 74, "ZB-2p", ""),
)
_ZB_SAME_MEM_SRC = f"{ZB_PAPER}, App. F: Table 11 (arXiv) = Table 8 (ICLR)"
ZB_SAME_MEMORY_THROUGHPUT = tuple(
    ZBThroughput(model, p, m, b, sched, thr, _ZB_SAME_MEM_SRC, via=ZB_VIA_2, m_note=note)
    for (model, p, m, b, thr, _mem, sched, note) in _ZB_SAME_MEM
)
ZB_SAME_MEMORY_MEMORY = tuple(
    ZBMemory(model, p, m, b, sched, float(mem), _ZB_SAME_MEM_SRC, via=ZB_VIA_2, m_note=note)
    for (model, p, m, b, _thr, mem, sched, note) in _ZB_SAME_MEM
)

# Small number of microbatches (m <= p).
_ZB_SMALL_M = (
    ("1.5B", 8, 2, 6, 3.56, 11, "1F1B"),
    ("1.5B", 8, 2, 6, 4.25, 12, "ZB-2p"),
    ("1.5B", 8, 4, 6, 5.74, 18, "1F1B"),
    ("1.5B", 8, 4, 6, 6.92, 19, "ZB-2p"),
    ("1.5B", 8, 8, 6, 8.26, 29, "1F1B"),
    ("1.5B", 8, 8, 6, 9.90, 34, "ZB-2p"),
    ("6.2B", 8, 2, 3, 1.04, 21, "1F1B"),
    ("6.2B", 8, 2, 3, 1.33, 21, "ZB-2p"),
    ("6.2B", 8, 4, 3, 1.69, 28, "1F1B"),
    ("6.2B", 8, 4, 3, 2.16, 29, "ZB-2p"),
    ("6.2B", 8, 8, 3, 2.45, 39, "1F1B"),
    ("6.2B", 8, 8, 3, 3.07, 44, "ZB-2p"),
    ("14.6B", 16, 4, 1, 0.39, 19, "1F1B"),
    ("14.6B", 16, 4, 1, 0.52, 20, "ZB-2p"),
    ("14.6B", 16, 8, 1, 0.65, 24, "1F1B"),
    ("14.6B", 16, 8, 1, 0.85, 24, "ZB-2p"),
    ("14.6B", 16, 16, 1, 0.95, 32, "1F1B"),
    ("14.6B", 16, 16, 1, 1.25, 33, "ZB-2p"),
)
_ZB_SMALL_M_SRC = f"{ZB_PAPER}, App. H: Table 12 (arXiv) = Table 9 (ICLR)"
ZB_SMALL_M_THROUGHPUT = tuple(
    ZBThroughput(model, p, m, b, sched, thr, _ZB_SMALL_M_SRC)
    for (model, p, m, b, thr, _mem, sched) in _ZB_SMALL_M
)
ZB_SMALL_M_MEMORY = tuple(
    ZBMemory(model, p, m, b, sched, float(mem), _ZB_SMALL_M_SRC)
    for (model, p, m, b, _thr, mem, sched) in _ZB_SMALL_M
)

# arXiv-only ZB-V comparison (Table 6).  ZB-2p* uses micro-batch b/2 and 2m microbatches;
# the m and b below are the column headers (i.e. those of 1F1B / ZB-1p / ZB-V).
_ZBV_T6_SRC = f"{ZB_PAPER}, Table 6 (arXiv ZB-V version only); ZB-2p* runs b/2 and 2m"
_ZBV_T6_COLS = (
    ("6.2B", 16, 6, 48), ("6.2B", 16, 6, 64), ("6.2B", 16, 6, 128),
    ("14.6B", 24, 2, 72), ("14.6B", 24, 2, 96), ("14.6B", 24, 2, 192),
    ("28.3B", 32, 2, 96), ("28.3B", 32, 2, 128), ("28.3B", 32, 2, 256),
)
_ZBV_T6_THROUGHPUT = {
    "ZB-V": (4.15, 4.21, 4.35, 1.85, 1.88, 1.93, 1.01, 1.02, 1.06),
    "ZB-2p*": (4.36, 4.37, 4.45, 1.84, 1.84, 1.85, 1.00, 1.00, 1.01),
    "ZB-1p": (3.87, 4.00, 4.29, 1.72, 1.78, 1.89, 0.94, 0.97, 1.03),
    "1F1B": (3.38, 3.57, 3.91, 1.52, 1.61, 1.76, 0.82, 0.87, 0.95),
}
# None = cell left out (ambiguous in the sources, see module doc).
_ZBV_T6_MEMORY = {
    "ZB-V": (64, 64, 64, 45, 45, 45, 71, 71, 71),
    "ZB-2p*": (63, 64, 65, None, None, None, 72, 72, 72),
    "ZB-1p": (62, 62, 62, 46, 46, 46, 73, 73, 73),
    "1F1B": (61, 61, 61, 44, 44, 44, 69, 69, 69),
}
ZBV_THROUGHPUT = tuple(
    ZBThroughput(model, gpus, m, b, sched, vals[i], _ZBV_T6_SRC, via=ZB_VIA_ARXIV)
    for sched, vals in _ZBV_T6_THROUGHPUT.items()
    for i, (model, gpus, b, m) in enumerate(_ZBV_T6_COLS)
)
ZBV_MEMORY = tuple(
    ZBMemory(model, gpus, m, b, sched, float(vals[i]), _ZBV_T6_SRC, via=ZB_VIA_ARXIV)
    for sched, vals in _ZBV_T6_MEMORY.items()
    for i, (model, gpus, b, m) in enumerate(_ZBV_T6_COLS)
    if vals[i] is not None
)

# arXiv-only Table 7 (microbatch size doubled, samples/GPU/s):
# (model, #GPU, m, schedule, thr at smaller b, thr at larger b, b_small, b_large, delta as printed)
ZBV_MICROBATCH_ABLATION = (
    ("6.2B", 16, 64, "ZB-V", 4.13, 4.21, 3, 6, "1.94%"),
    ("6.2B", 16, 64, "ZB-1p", 3.91, 4.00, 3, 6, "2.30%"),
    ("6.2B", 16, 64, "1F1B", 3.48, 3.57, 3, 6, "2.59%"),
    ("14.6B", 24, 96, "ZB-V", 1.75, 1.88, 1, 2, "7.43%"),
    ("14.6B", 24, 96, "ZB-1p", 1.65, 1.78, 1, 2, "7.88%"),
    ("14.6B", 24, 96, "1F1B", 1.47, 1.61, 1, 2, "9.52%"),
    ("28.3B", 32, 128, "ZB-V", 0.95, 1.02, 1, 2, "6.32%"),
    ("28.3B", 32, 128, "ZB-1p", 0.90, 0.97, 1, 2, "5.56%"),
    ("28.3B", 32, 128, "1F1B", 0.80, 0.87, 1, 2, "8.75%"),
)
ZBV_MICROBATCH_ABLATION_SOURCE = f"{ZB_PAPER}, Table 7 (arXiv ZB-V version only); via {ZB_VIA_ARXIV}"


# ---------------------------------------------------------------------------
# 2. Narayanan et al. 2021 (Megatron-LM, SC21), Table 1
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class MegatronRow:
    params_billion: float
    attention_heads: int
    hidden_size: int
    layers: int
    tensor_parallel: int
    pipeline_parallel: int
    num_gpus: int
    batch_size: int
    tflops_per_gpu: float
    pct_of_peak: float           # percent, e.g. 52.0 means 52%
    aggregate_pflops: float
    source: str
    via: str = MEGATRON_VIA


_MEG_T1_SRC = (f"{MEGATRON_PAPER}, Table 1 'Weak-scaling throughput for GPT models ranging from "
               "1 billion to 1 trillion parameters', Sec. 5.1 (page ~8, inferred, unverified)")
MEGATRON_TABLE1 = tuple(
    MegatronRow(*row, source=_MEG_T1_SRC)
    for row in (
        (1.7, 24, 2304, 24, 1, 1, 32, 512, 137, 44.0, 4.4),
        (3.6, 32, 3072, 30, 2, 1, 64, 512, 138, 44.0, 8.8),
        (7.5, 32, 4096, 36, 4, 1, 128, 512, 142, 46.0, 18.2),
        (18.4, 48, 6144, 40, 8, 1, 256, 1024, 135, 43.0, 34.6),
        (39.1, 64, 8192, 48, 8, 2, 512, 1536, 138, 44.0, 70.8),
        (76.1, 80, 10240, 60, 8, 4, 1024, 1792, 140, 45.0, 143.8),
        (145.6, 96, 12288, 80, 8, 8, 1536, 2304, 148, 47.0, 227.1),
        (310.1, 128, 16384, 96, 8, 16, 1920, 2160, 155, 50.0, 297.4),
        (529.6, 128, 20480, 105, 8, 35, 2520, 2520, 163, 52.0, 410.2),
        (1008.0, 160, 25600, 128, 8, 64, 3072, 3072, 163, 52.0, 502.0),
    )
)

MEGATRON_SEQ_LEN = 2048
MEGATRON_VOCAB = 51200
MEGATRON_A100_PEAK_TFLOPS = 312  # "peak device throughput of an A100 GPU with 16-bit precision is 312 teraFLOP/s" (Sec. 5)

# Exact wording, Sec. 5.1 and Appendix (via MEGATRON_VIA).  The micro-batch size and the
# number of interleaved model chunks for the Table 1 runs are NOT given anywhere in Sec. 5.1
# or Table 1.
MEGATRON_TABLE1_TEXT = {
    "schedule": ("In particular, we use the interleaved pipeline schedule with the scatter/gather "
                 "optimization enabled."),  # Sec. 5.1; no chunk count given
    "vocab_seq": ("All models use a vocabulary size (denoted by V) of 51,200 (multiple of 1024) "
                  "and a sequence length (s) of 2048."),  # Sec. 5.1
    "params_formula": "P = 12 l h^2 (1 + 13/(12h) + (V+s)/(12 l h))   (Eq. 2, Sec. 5.1)",
    "flops_formula": "F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h))   (Eq. 3, Sec. 5.1; per iteration, B = global batch)",
    "recompute_eq3": ("We also note that equation (3) assumes activation recomputation and takes into "
                      "account the floating-point operations associated with the extra forward pass."),
    "recompute_appendix": ("In addition, we are using activation recomputation, which requires an "
                           "additional forward pass before the backward pass."),  # Appendix
    "appendix_layer_flops": ("each transformer layer results in 24Bsh^2 + 4Bs^2h FLOPs for the forward "
                             "pass ... total number of FLOPs per transformer layer is "
                             "4 x (24Bsh^2 + 4Bs^2h) = 96Bsh^2(1 + s/(6h)); logit layer 6BshV in total"),
    "throughput_scope": ("Note that throughput is measured for end-to-end training, i.e., includes all "
                         "operations including data loading, optimizer steps, communication, and logging."),
    "hardware": ("Each cluster node has 8 NVIDIA 80-GB A100 GPUs, connected to each other by NVLink and "
                 "NVSwitch. Each node has eight NVIDIA Mellanox 200Gbps HDR Infiniband HCAs for "
                 "application communication"),
    "training_time": "End-to-end training time ~= 8TP/(nX)   (Eq. 4)",
}
# Micro-batch sizes that ARE stated elsewhere in the paper (not for Table 1):
#   Sec. 5.2 / Table 2: PTD-P rows use microbatch size 1; ZeRO-3 rows 4/2/1.
#   Sec. 5.3.1 weak scaling (Fig. 11): "a microbatch size of 1".
#   Sec. 5.4.2/5.4.3 (Figs. 14, 15): "microbatch size equal to 1".
#   Sec. 5.5 (Fig. 16, 91B, (t,p)=(8,8)): "the best microbatch size is 2 for this model".
MEGATRON_SOURCE_NOTE = f"{MEGATRON_PAPER}; via {MEGATRON_VIA}"


@dataclass(frozen=True)
class MegatronTable1Script:
    """How each Table 1 run was launched: the paper's own reproduction script,
    NVIDIA/Megatron-LM examples/sc21/run_table_1.sh (read from the repository at
    commits cf547dea839f709ec2f147da0679d663da3c20da and 79a3bb6bf2c85b748c46749dd0695e23310d4e16;
    the two differ only in the recomputation flag's name), with CONFIG.sh's common flags
    (``--fp16 --loss-scale 8192``, ``--seq-length 2048``; no
    ``--accumulate-allreduce-grads-in-fp32``) and SRUN.sh's container
    ``nvcr.io/nvidia/pytorch:20.12-py3``."""
    params_billion: float        # joins MEGATRON_TABLE1
    micro_batch_size: int        # MBS
    layers_per_virtual_stage: object  # --num-layers-per-virtual-pipeline-stage, None: not interleaved
    ddp_impl: str                # --DDP-impl: "torch" (PyTorch DDP) or "local" (Megatron's)
    source: str = ("NVIDIA/Megatron-LM examples/sc21/run_table_1.sh (every row: "
                   "--activations-checkpoint-method uniform, later --recompute-method uniform: "
                   "full recomputation, one layer per checkpoint)")


MEGATRON_TABLE1_SCRIPT = tuple(
    MegatronTable1Script(*row)
    for row in (
        (1.7, 16, None, "torch"),
        (3.6, 16, None, "torch"),
        (7.5, 16, None, "torch"),
        (18.4, 8, None, "torch"),
        (39.1, 4, None, "local"),
        (76.1, 2, 5, "local"),
        (145.6, 2, 5, "local"),
        (310.1, 1, 3, "local"),
        (529.6, 1, 1, "local"),
        (1008.0, 1, None, "local"),
    )
)


# ---------------------------------------------------------------------------
# 3. Korthikanti et al. 2022 (arXiv 2205.05198)
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class KorthikantiActivationFormula:
    """Table 2: activation memory per transformer layer, in BYTES (16-bit activations,
    1-byte dropout masks).  Restated as  s*b*h*(c_const + c_over_t/t + c_attn*a*s/(h*t)).
    For 'no parallelism' set t=1.  `formula` is the printed form."""
    configuration: str
    formula: str
    c_const: float
    c_over_t: float
    c_attn: float
    source: str
    via: str = KORTHIKANTI_VIA


_KT2_SRC = f"{KORTHIKANTI_PAPER}, Table 2 'Activations memory, in bytes, per transformer layer'"
KORTHIKANTI_TABLE2 = tuple(
    KorthikantiActivationFormula(*row, source=_KT2_SRC)
    for row in (
        ("no parallelism", "sbh(34 + 5as/h)", 34, 0, 5),
        ("tensor parallel (baseline)", "sbh(10 + 24/t + 5as/(ht))", 10, 24, 5),
        ("tensor + sequence parallel", "sbh(34/t + 5as/(ht))", 0, 34, 5),
        ("tensor parallel + selective activation recomputation", "sbh(10 + 24/t)", 10, 24, 0),
        ("tensor parallel + sequence parallel + selective activation recomputation",
         "sbh(34/t)", 0, 34, 0),
        ("full activation recomputation", "sbh(2)", 2, 0, 0),
    )
)
# Related text (Sec. 4.2.3, 4.3, 5):
#  - 1F1B: the first stage stores p microbatches of L/p layers = L layers:
#    total = (s b h L / t)(34 + 5as/h)   (Eq. 5, with TP+SP).
#  - Interleaved schedule: multiply by (1 + (p-1)/(p m)), m = number of interleaving stages.
#  - Extra (embeddings, last LN, output layer): (s b h L / t)(p/L + delta_{p=1} (4/L)(1 + v/h)).
#  - Selective recompute + SP: total = 34 s b h L / t   (Eq. 6).
#  - Full recompute, ignoring activations outside transformer layers: 2 s b h L.
#  - Recompute "can introduce as much as 30-40% computational time overhead".
#  - GPT-3: 5as/h = 80; MT-NLG: 5as/h = 64; selective recompute saves 70% / 65% of
#    activation memory at 2.7% / 1.6% FLOPs overhead.
#  - Appendix A: model FLOPs per iteration = 72 B L s h^2 (1 + s/(6h) + v/(12hL))   (Eq. 7),
#    hardware FLOPs (selective recompute) = 72 B L s h^2 (1 + s/(3h) + v/(12hL))   (Eq. 8),
#    B = microbatch size in the appendix text; ratio ~ 1 + s/(6h)   (Eq. 9).
#  - Appendix B: output-tensor deallocation saves s*b*h*r per rank; 530B first stage
#    s*b*h*p = 2.73 GB.


@dataclass(frozen=True)
class KorthikantiConfig:
    model: str
    attention_heads: int
    hidden_size: int
    layers: int
    tensor_parallel: int
    pipeline_parallel: int
    num_gpus: int
    global_batch_size: int
    micro_batch_size: int
    source: str
    via: str = KORTHIKANTI_VIA


_KT3_SRC = (f"{KORTHIKANTI_PAPER}, Table 3 'Model configurations used during evaluation' "
            "(no data parallelism)")
KORTHIKANTI_CONFIGS = tuple(
    KorthikantiConfig(*row, source=_KT3_SRC)
    for row in (
        ("22B", 64, 6144, 48, 8, 1, 8, 4, 4),
        ("175B (GPT-3)", 96, 12288, 96, 8, 8, 64, 64, 1),
        ("530B (MT-NLG)", 128, 20480, 105, 8, 35, 280, 280, 1),
        ("1T", 160, 25600, 128, 8, 64, 512, 512, 1),
    )
)
KORTHIKANTI_EVAL_TEXT = (
    "We use the interleaving schedule with three interleaving stages (m = 3) for the 175B and "
    "530B models. For all the cases, sequence length is set to s = 2048 and vocabulary size is "
    "set to v = 51200."  # Sec. 6; hardware: Selene, 8x 80GB A100 per node
)
KORTHIKANTI_SEQ_LEN = 2048
KORTHIKANTI_VOCAB = 51200


@dataclass(frozen=True)
class KorthikantiLayerTime:
    """Table 4: one transformer layer of the 22B model, milliseconds."""
    experiment: str
    forward_ms: float
    backward_ms: float
    combined_ms: float
    overhead_pct: object  # float percent, or None where the table prints "-"
    source: str
    via: str = KORTHIKANTI_VIA


_KT4_SRC = (f"{KORTHIKANTI_PAPER}, Table 4 'Time to complete the forward and backward pass of a "
            "single transformer layer of the 22B model'")
KORTHIKANTI_LAYER_TIMES = tuple(
    KorthikantiLayerTime(*row, source=_KT4_SRC)
    for row in (
        ("Baseline no recompute", 7.7, 11.9, 19.6, None),
        ("Sequence Parallelism", 7.2, 11.8, 19.0, -3.0),
        ("Baseline with recompute", 7.7, 19.5, 27.2, 39.0),
        ("Selective Recompute", 7.7, 13.2, 20.9, 7.0),
        ("Selective + Sequence", 7.2, 13.1, 20.3, 4.0),
    )
)


@dataclass(frozen=True)
class KorthikantiIteration:
    """Table 5: end-to-end iteration time (seconds) and utilisation (percent)."""
    model: str
    full_recompute_iter_s: float
    present_work_iter_s: float
    throughput_increase_pct: float
    mfu_pct: float
    hfu_pct: float
    source: str
    via: str = KORTHIKANTI_VIA


_KT5_SRC = f"{KORTHIKANTI_PAPER}, Table 5 'End-to-end iteration time' (configs of Table 3, no DP)"
KORTHIKANTI_ITERATIONS = tuple(
    KorthikantiIteration(*row, source=_KT5_SRC)
    for row in (
        ("22B", 1.42, 1.10, 29.0, 41.5, 43.7),
        ("175B", 18.13, 13.75, 31.8, 51.4, 52.8),
        ("530B", 49.05, 37.83, 29.7, 56.0, 57.0),
        ("1T", 94.42, 71.49, 32.1, 56.3, 57.0),
    )
)
# Sec. 6.3 text: 530B scaled to 8-way DP (2240 GPUs): iteration 37.83 s -> 39.15 s,
# MFU 56.0% -> 54.2%.


# ---------------------------------------------------------------------------
# 4. Megatron-LM megatron/training/theoretical_memory_usage.py (summary only)
# ---------------------------------------------------------------------------
# Read from NVIDIA/Megatron-LM, megatron/training/theoretical_memory_usage.py at commit
# 00caa53af30912914981c86f39db123961678bbd (the code may differ at other commits).
#
# compute_weight_and_optimizer_memory(args):
#   * per-layer params (dense) = 2*h*(ffn_hidden*gated_mult + norm_size) + self_attn_term,
#     where self_attn_term = 2*h*h*((1 + n_query_groups/n_heads) * (kv_channels*n_heads/h));
#     gated_mult = 3/2 with SwiGLU else 1; norm_size = 1 (RMSNorm) or 2 (LayerNorm).
#     MoE layers use moe_ffn_hidden*num_experts (+ shared expert ffn); MLA has its own term.
#   * embedding = h * padded_vocab (x2 if untied); final norm = norm_size*h.
#   * most-loaded shard = (transformer_block/pp + mtp_block + embedding) / tp
#     (+ another embedding/tp if untied and pp == 1).
#   * bytes/param = 18 without distributed optimizer, else 6 + 12/dp.
#   * weight_and_optimizer_bytes = most_loaded_shard_params * bytes/param.
#
# compute_activation_memory(args, num_microbatches)  [used when sequence_parallel and
# recompute_granularity == 'selective'; comment cites Table 2 of arXiv 2205.05198]:
#   * per layer = s*b*h*(18 + 4*ffn_hidden/h)   (= 34 s b h when ffn_hidden = 4h), times L.
#   * + 8*s*b*pp (input to embedding, pp microbatches in flight)
#     + s*b*h*pp (embedding dropout).
#   * interleaved (virtual pp = v): times (1 + (pp-1)/(pp*v)).
#   * non-interleaved and pp > 1: times min(1, num_microbatches/pp).
#   * pp == 1: + s*b*h*4*(1 + vocab/h) (output layer input + CE logits).
#   * divide everything by tp.  This is the FIRST pipeline stage (maximum footprint).
#
# compute_activation_memory_without_sp(args, num_microbatches)  [all other cases]:
#   * per layer = s*b*h*(10 + 24/tp), times L (NOT divided by tp at the end).
#   * same embedding terms, interleave factor and min(1, m/pp) discount as above.
#   * pp == 1: + 2*(s*b*vocab/tp + s*b*h) bytes (logits + final LN output).
#   * times 1.05 overhead factor ("buffer for optimizer and miscellaneous temporaries").
#   * Note: no 5as/h attention term in either path; both assume selective recompute or
#     flash attention in effect.
#
# report_theoretical_memory: total = weight_and_optimizer + activation, in MB
# (NUM_BYTES_IN_MEGABYTE = 1024*1024).
MEGATRON_THEORETICAL_MEMORY_SOURCE = (
    "NVIDIA/Megatron-LM megatron/training/theoretical_memory_usage.py @ "
    "00caa53af30912914981c86f39db123961678bbd (read directly from the repository)"
)
