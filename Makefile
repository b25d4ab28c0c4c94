# Every target sets itself up idempotently: a .venv in the repo and, when running as
# root, the Debian packages the lab and the tests use.
VENV      := .venv
PY        := $(VENV)/bin/python
STAMP     := $(VENV)/.installed
# KServe's model server for the workload tests, in an environment of its own: its pins
# would downgrade packages of the project's
KSERVE    := .venv-kserve
KSTAMP    := $(KSERVE)/.installed
DEBS      := prometheus prometheus-alertmanager prometheus-pushgateway fuse3 stress-ng iptables nftables chromium redis-server
PYTHON    ?= $(shell command -v python3.11 || ls /root/.pyenv/versions/3.11*/bin/python3 2>/dev/null | head -1 || command -v python3)

.PHONY: setup debs bytecode demo test bench lint clean

setup: debs $(STAMP) $(KSTAMP) bytecode

# Byte-compile the project's own modules, as pip does for every package it installs: an
# editable install never writes them where PYTHONDONTWRITEBYTECODE is set, and then each
# `gameday` command would compile ~60 modules again (~0.1 s). Up to date: well under 1 s.
bytecode: $(STAMP)
	@$(PY) -m compileall -q -j0 gameday faults verifiers tests bench >/dev/null

debs:
	@missing=""; for p in $(DEBS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	  else \
	    echo "missing Debian packages:$$missing — run: sudo apt-get install --no-install-recommends$$missing"; exit 1; \
	  fi; \
	fi

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev,host,workloads,hf,lightning]'
	touch $(STAMP)

$(KSTAMP):
	test -x $(KSERVE)/bin/python || $(PYTHON) -m venv $(KSERVE)
	$(KSERVE)/bin/python -m pip install -q 'kserve==0.21.0'
	touch $(KSTAMP)

demo: setup
	$(VENV)/bin/gameday run experiments/gpu-ecc-dbe-reshard.yaml --target lab
	@journal=$$(ls -t journals/*-gpu-ecc-dbe-reshard-*.json | head -1); \
	  $(VENV)/bin/gameday report "$$journal" --format html -o "$${journal%.json}.html" && \
	  echo "report: $(CURDIR)/$${journal%.json}.html"

test: setup
	$(PY) -m pytest -q

bench: setup
	$(PY) bench/run_overhead.py
	$(PY) bench/lab_startup.py
	$(PY) bench/rto_accuracy.py
	$(PY) bench/fanout.py
	$(PY) bench/report_scale.py
	$(PY) bench/net_link_overhead.py
	$(PY) bench/fault_survival.py --trials 50
	$(PY) bench/gpu_check.py
	$(PY) bench/faultfs_overhead.py
	$(PY) bench/injection_latency.py --trials 20
	$(PY) bench/process_scan.py

lint: setup
	$(VENV)/bin/ruff check gameday faults verifiers tests bench
	$(VENV)/bin/mypy

clean:
	-$(VENV)/bin/gameday lab down 2>/dev/null
	rm -rf .gameday journals
