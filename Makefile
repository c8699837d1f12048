# Two commands for a fresh clone: `make run` (the main job) and `make test` (the test suite).
# Each creates .venv and installs the package with the tested versions in constraints.txt.
PYTHON ?= python3
VENV := .venv
STAMP := $(VENV)/.installed

.PHONY: run test bench docs

$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q -c constraints.txt -e '.[lab,dev,integrations]'
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/gradcomp run

test: $(STAMP)
	$(VENV)/bin/python -m pytest -q

bench: $(STAMP)
	$(VENV)/bin/python -m pytest -q benchmarks --benchmark-enable --benchmark-only

docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict
