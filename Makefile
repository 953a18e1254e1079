# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
# torch 2.13.0 is pinned: this machine carries its CPU wheel; any other
# request downloads gigabytes.
TORCH   := torch==2.13.0

.PHONY: install demo test test-fast bench lint clean peers

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH) numpy
	$(BIN)/pip install -q -e '.[dev,probe]'
	$(BYTECODE)
	touch $(STAMP)

install: $(STAMP)

# An editable install leaves pptune's own modules uncompiled (pip compiles only what
# it copies), and a shell with PYTHONDONTWRITEBYTECODE set never caches them: every
# command would compile ~80 modules first (~0.2 s). Compile them ahead, as a wheel
# install does; only changed files are recompiled.
BYTECODE = $(BIN)/python -m compileall -q pptune

# The main job on the embedded default (analytic llama3-8b on h100-sxm), then
# the same job from a profile measured on this machine (CPU, gloo), then a
# short measured tune of its best pipelines (2 gloo ranks, about a minute).
demo: $(STAMP)
	@$(BYTECODE)
	$(BIN)/pptune recommend --gpus 8 --timeline
	@mkdir -p build
	$(BIN)/pptune probe --quick -o build/demo-profile.json
	$(BIN)/pptune recommend --gpus 2 --profile build/demo-profile.json --timeline
	rm -rf build/tune
	$(BIN)/pptune tune --gpus 2 --pp 2 --profile build/demo-profile.json --global-batch 4 \
		--micro-batch-sizes 1 --max-trials 3 --warmup 1 --steps 3 -o build/tune

# The whole suite: process spawning, torch, and GPU tests where there is a GPU.
test: $(STAMP)
	$(BIN)/python -m pytest

# The pure core and the CLI: no torch, no spawned process (~20 s on 2 idle cores).
FAST_DIRS := tests/costmodel tests/options tests/costs tests/launch tests/plan tests/check tests/frameworks \
	tests/report tests/observe tests/validate tests/tune tests/cli tests/test_layers.py
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow and not torch and not gpu" $(FAST_DIRS)

bench: $(STAMP)
	$(BIN)/python -m bench.run

# The frameworks' own validation, on CPU, judging the test configs and every
# file `recommend --emit` writes (not part of `make test`): a separate venv
# with DeepSpeed, megatron-core and torchtitan beside the same torch.
PEERS   := .venv-peers
PSTAMP  := $(PEERS)/.installed

$(PSTAMP): pyproject.toml
	$(PY) -m venv $(PEERS)
	$(PEERS)/bin/pip install -q --upgrade pip
	$(PEERS)/bin/pip install -q $(TORCH) numpy
	DS_BUILD_OPS=0 $(PEERS)/bin/pip install -q deepspeed==0.19.8 megatron-core==0.16.1 transformers==5.2.0
	$(PEERS)/bin/pip install -q --no-deps torchtitan==0.2.2
	$(PEERS)/bin/pip install -q tyro einops tomli fsspec tokenizers torchdata datasets tensorboard pillow
	$(PEERS)/bin/pip install -q -e .
	touch $(PSTAMP)

peers: $(PSTAMP)
	$(PEERS)/bin/python -m bench.peers.run

# Regenerate what the docs compute rather than state: docs/cli.md from the app,
# docs/accuracy.md and docs/benchmarks.md from bench/results/, and every
# `<!-- example: pptune ... -->` block in README.md and docs/ (bench/docs.py).
.PHONY: docs
docs: $(STAMP)
	$(BIN)/python -m bench.docs

# What CI runs before the tests (.ci/run): ruff over the code, tests and benchmarks,
# then mypy, strict, over the whole package ([tool.mypy] in pyproject.toml). The
# tools' versions are pinned in pyproject's dev extra.
lint: $(STAMP)
	$(BIN)/ruff check pptune tests bench
	$(BIN)/mypy

clean:
	rm -rf $(VENV) $(PEERS) build *.egg-info
