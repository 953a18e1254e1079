#!/usr/bin/env bash
# One-shot GPU check (< 8 minutes on one GPU): per-op analytic/measured
# ratios of a Llama-like block (bench/gpu_check.py, CUDA events), then
# `pptune probe --quick` on that GPU. Refuses to run without CUDA.
# Usage: bench/gpu_check.sh   (from the repository root, after `make install`)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
PPTUNE=${PPTUNE:-.venv/bin/pptune}
if ! "$PY" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    echo "gpu_check.sh: no CUDA device (or no torch) here; nothing measured" >&2
    exit 2
fi
mkdir -p build bench/results
timeout 300 "$PY" -m bench.gpu_check
timeout 150 "$PPTUNE" probe --quick --device cuda -o build/gpu-check-profile.json \
    | tee bench/results/gpu_check_probe.txt
