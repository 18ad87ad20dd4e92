# Revive — make help lists the targets.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
FAULT ?= xid79
FRAMEWORK ?= revive
INTERACTIVE ?= 0
KEEP ?= 0
ACCESS ?= local
PYTEST_ARGS ?=
CHAOS_RUNS ?= 5
CHAOS_POINTS ?=

.PHONY: help venv demo test bench chaos down up lint clean purge

help: ## list targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed -E 's/:.*## /\t/' | sort

$(VENV)/.installed: pyproject.toml
	@command -v python3 >/dev/null || { echo "python3 is missing: apt-get install python3 python3-venv"; exit 1; }
	@test -d $(VENV) || python3 -m venv $(VENV) 2>/dev/null || { rm -rf $(VENV); \
	  [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null && apt-get install -y -qq python3-venv >/dev/null 2>&1 && python3 -m venv $(VENV); } \
	  || { echo "cannot create a venv: install python3-venv (apt-get install python3-venv)"; exit 1; }
	$(PY) -m pip install -q --upgrade pip
	# torch==2.13.0 is pinned and installed with pip: pip takes the CPU wheel on this machine's disk
	# the frameworks extra (transformers, accelerate, pytorch-lightning): tests/e2e/test_frameworks.py, make demo FRAMEWORK=hf|lightning
	$(PY) -m pip install -q -e '.[dev,demo,frameworks]'
	@$(PY) -c "import torch; cpu = torch.version.cuda is None; print(f'torch {torch.__version__}: ' + ('CPU build' if cpu else 'CUDA build ' + torch.version.cuda))"
	@touch $@

venv: $(VENV)/.installed ## create the venv and install Revive with its dev, demo and frameworks extras

demo: venv ## a real recovery on a local Slurm cluster (FAULT=xid79|crash|hang FRAMEWORK=revive|hf|lightning INTERACTIVE=1 KEEP=1 ACCESS=local|ssh)
	$(VENV)/bin/revive demo --fault $(FAULT) --framework $(FRAMEWORK) --access $(ACCESS) $(if $(filter 1,$(INTERACTIVE)),--interactive) $(if $(filter 1,$(KEEP)),--keep)

test: venv ## install what the tests need (venv, Slurm via scripts/cluster-up.sh, scripts/test-deps.sh) and run them
	bash scripts/test-deps.sh
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) -m pytest $(PYTEST_ARGS)

bench: venv ## run every benchmark (all of them, even after a failure) and print its BENCH lines
	@failed=""; for b in benchmarks/bench_*.py benchmarks/accuracy_cases.py benchmarks/second_reader.py; do \
	  echo "== $$b"; $(PY) $$b $(BENCH_ARGS) || failed="$$failed $$b"; done; \
	  if [ -n "$$failed" ]; then echo "bench: failed:$$failed" >&2; exit 1; fi

chaos: venv ## fault injection on the real testbed: every fault point CHAOS_RUNS times (CHAOS_POINTS=a,b for a subset); prints BENCH reliability
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" $(PY) benchmarks/chaos.py --runs $(CHAOS_RUNS) $(if $(CHAOS_POINTS),--points $(CHAOS_POINTS))

lint: venv ## static checks: ruff (E,W,F,I,B,UP) and mypy over every package
	$(VENV)/bin/ruff check revive workflows activities worker runbooks cli tests benchmarks examples
	$(VENV)/bin/mypy

up: venv ## start the local cluster and the Temporal dev server (left running)
	bash scripts/cluster-up.sh && bash scripts/temporal-up.sh

down: ## stop everything the demo or the tests started
	-@for f in /tmp/revive-cluster/revive-state/{worker,monitor}.pid; do [ -f $$f ] && kill -TERM -- -$$(cat $$f) 2>/dev/null; rm -f $$f; done; true
	-bash scripts/temporal-down.sh
	-bash scripts/sshd-down.sh
	-bash scripts/cluster-down.sh

purge: down ## stop everything and delete the cluster and Temporal state (incident histories too)
	-bash scripts/temporal-down.sh --purge
	-bash scripts/sshd-down.sh --purge
	-bash scripts/cluster-down.sh --purge

clean: down ## remove the venv and build outputs
	rm -rf $(VENV) build dist *.egg-info
