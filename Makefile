# Two commands set everything up on a fresh machine: `make demo` and `make test`.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
# torch 2.13.0 is pinned: this machine carries its CPU wheel; any other
# request downloads gigabytes.
TORCH   := torch==2.13.0

.PHONY: install demo test bench lint clean

$(STAMP): pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH) numpy
	$(BIN)/pip install -q -e '.[dev,probe]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/pptune recommend --gpus 8 --timeline

test: $(STAMP)
	$(BIN)/python -m pytest

bench: $(STAMP)
	$(BIN)/python -m bench.run

lint: $(STAMP)
	$(BIN)/ruff check pptune tests bench
	$(BIN)/mypy

clean:
	rm -rf $(VENV) build *.egg-info
