# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
# torch 2.13.0 is pinned: this machine carries its CPU wheel; any other
# request downloads gigabytes.
TORCH   := torch==2.13.0

.PHONY: install demo test test-fast bench lint clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH) numpy
	$(BIN)/pip install -q -e '.[dev,probe]'
	touch $(STAMP)

install: $(STAMP)

# The main job on the embedded default (analytic llama3-8b on h100-sxm), then
# the same job from a profile measured on this machine (CPU, gloo), then a
# short measured tune of its best pipelines (2 gloo ranks, about a minute).
demo: $(STAMP)
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
FAST_DIRS := tests/costmodel tests/costs tests/launch tests/plan tests/check tests/configs \
	tests/report tests/observe tests/validate tests/tune tests/cli tests/test_layers.py
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not slow and not torch and not gpu" $(FAST_DIRS)

bench: $(STAMP)
	$(BIN)/python -m bench.run

lint: $(STAMP)
	$(BIN)/ruff check pptune tests bench
	$(BIN)/mypy

clean:
	rm -rf $(VENV) build *.egg-info
