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

# The suite on 2 pytest-xdist workers: the project's machines and CI have 2 cores, and a fixed
# count runs the same way on each (`-n auto` counts cores, physical ones where psutil is there).
# --dist loadfile: a file's tests in one worker; conftest.py also keeps the testbed's files in
# one and hands out the long files first. More workers: `make test TEST_WORKERS=4`; one file
# alone, no workers: .venv/bin/python -m pytest tests/test_x.py
TEST_WORKERS ?= 2

test: $(STAMP)
	$(VENV)/bin/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile

bench: $(STAMP)
	$(VENV)/bin/python -m pytest -q benchmarks --benchmark-enable --benchmark-only

docs: $(STAMP)
	$(VENV)/bin/mkdocs build --strict
