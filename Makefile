# make test: a fresh machine to a green test suite. make demo: the main job end to end.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.seqdistill-installed

.PHONY: test demo install clean

install: $(STAMP)

# torch==2.13.0 (the CPU build) only when no torch is importable: a GPU user keeps their own.
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install --quiet torch==2.13.0
	$(BIN)/python -m pip install --quiet -e ".[test]"
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest tests

demo: $(STAMP)
	@echo "make demo: the end-to-end demo (teacher fine-tuning, cache build, MGKD student) arrives"
	@echo "with the trainer (issue 5). Today: build a cache in Python and inspect it with"
	@echo "  $(BIN)/distill-cache info CACHE ; $(BIN)/distill-cache verify CACHE"

clean:
	rm -rf $(VENV) .pytest_cache build *.egg-info
