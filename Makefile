# Two front doors: `make standalone` starts the system, `make test` runs the tests.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: standalone test sim-explore clean

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	touch $(STAMP)

standalone: $(STAMP)
	$(VENV)/bin/bk standalone

test: $(STAMP)
	$(PY) -m pytest

# The nightly-size exploration (documented in README.md).
sim-explore: $(STAMP)
	$(VENV)/bin/bk sim explore --seeds 10000

clean:
	rm -rf $(VENV) build src/*.egg-info
