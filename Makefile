# The two commands of the README: `make run` and `make test`. Both create .venv and install
# what they need first (Python packages from PyPI; on Debian/Ubuntu, OpenBLAS for the fast CPU path).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml scripts/install_system_deps.sh | cksum | cut -d' ' -f1)

.PHONY: run test test-slow lint bench install clients clean

# The coding agents that `omlx launch`'s tests run for real (npm and PyPI, into .clients/).
CLIENTS_STAMP := .clients/.installed-$(shell cksum < scripts/install_clients.sh | cut -d' ' -f1)

$(STAMP): pyproject.toml scripts/install_system_deps.sh
	bash scripts/install_system_deps.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[test]'
	rm -f $(VENV)/.installed-*
	touch $@

install: $(STAMP)

$(CLIENTS_STAMP): scripts/install_clients.sh
	PYTHON=$(PYTHON) bash scripts/install_clients.sh
	rm -f .clients/.installed-*
	touch $@

clients: $(CLIENTS_STAMP)

run: $(STAMP)
	$(VENV)/bin/omlx serve

# Tests keep everything they write out of ~/.omlx. `test` runs all but the `slow` tests (tests/soak and
# the long runs marked slow elsewhere); `test-slow` runs those.
test: $(STAMP) $(CLIENTS_STAMP)
	OMLX_HOME=$(CURDIR)/.omlx-test $(PY) -m pytest

test-slow: $(STAMP) $(CLIENTS_STAMP)
	OMLX_HOME=$(CURDIR)/.omlx-test $(PY) -m pytest -m slow

# ruff (pyproject's [tool.ruff]): the lint rules and the formatting, checked; .ci/run runs it first.
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: $(STAMP)
	$(PY) benchmarks/bench_engine.py

clean:
	rm -rf $(VENV) *.egg-info
