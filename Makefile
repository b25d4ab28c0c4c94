# Every target sets itself up idempotently: a .venv in the repo and, when running as
# root, the Debian packages it uses. Each installs only what it needs, with the exact
# pins of constraints.txt: `make demo` the lab (gameday[lab]), `make setup` / `make test`
# everything the tests use (gameday[dev,workloads] and KServe's own environment).
VENV       := .venv
PY         := $(VENV)/bin/python
PIP        := $(PY) -m pip install -q -c constraints.txt
# what the tests need (dev includes lab); the lab alone is what the demo needs
STAMP      := $(VENV)/.installed
LAB_STAMP  := $(VENV)/.installed-lab
# KServe's model server for the workload tests, in an environment of its own: its pins
# would downgrade packages of the project's. Only `make test` builds it.
KSERVE     := .venv-kserve
KSTAMP     := $(KSERVE)/.installed
MLSERVER   := .venv-mlserver
MSTAMP     := $(MLSERVER)/.installed
# Ray Serve, a self-healing controller and model server for the replacement and RTO tests
RAY        := .venv-ray
RSTAMP     := $(RAY)/.installed
# the lab's Prometheus and the FUSE mount of its weights; the tests add the host
# backend's tools, Redis and the browser that looks at the pages
DEMO_DEBS  := prometheus fuse3
DEBS       := $(DEMO_DEBS) prometheus-alertmanager prometheus-pushgateway stress-ng iptables nftables libnetfilter-queue1 chromium redis-server
PYTHON     ?= $(shell command -v python3.11 || ls /root/.pyenv/versions/3.11*/bin/python3 2>/dev/null | head -1 || command -v python3)
# each bench at a size that runs in seconds (all of them in about 2 min; the benches need
# the lab, and bench/ddp_latency.py the workloads' torch): CI runs them so a bench that
# breaks fails the build (tests/packaging/test_benches_in_make.py keeps the list whole)
SMOKE      := $(PY) bench/run_overhead.py --runs 1 \
           && $(PY) bench/lab_startup.py --runs 1 \
           && $(PY) bench/rto_accuracy.py --trials 1 \
           && $(PY) bench/fanout.py --agents 4 --gpus 2 --racks 2 --rounds 1 \
           && $(PY) bench/fanout.py --agents 4 --gpus 2 --racks 2 --rounds 1 --as-deployed \
           && $(PY) bench/fleet.py --sizes 64,256 --agent-processes 2 --rounds 1 \
           && $(PY) bench/report_scale.py --journals 50 \
           && $(PY) bench/net_link_overhead.py --samples 1 --requests 200 \
           && $(PY) bench/net_latency.py --probes 20 \
           && $(PY) bench/ddp_latency.py --delays 1 --jitter '' --fault-s 1 \
           && $(PY) bench/fault_survival.py --trials 1 --window 2 \
           && $(PY) bench/fault_survival.py --mode in-flight --trials 2 \
           && $(PY) bench/gpu_check.py --deadline-s 60 \
           && $(PY) bench/faultfs_overhead.py --reads 3 --stall-s 0.05 \
           && $(PY) bench/injection_latency.py --trials 1 \
           && $(PY) bench/process_scan.py --items 16 \
           && $(PY) bench/halt.py --agents 4 --gpus 2 --racks 2 --rounds 1 \
           && $(PY) bench/kinds_parse.py --number 200

.PHONY: setup debs demo-debs bytecode demo test bench bench-smoke lint constraints clean

setup: debs $(STAMP) $(KSTAMP) $(MSTAMP) $(RSTAMP) bytecode

# Byte-compile the project's own modules, as pip does for every package it installs: an
# editable install never writes them where PYTHONDONTWRITEBYTECODE is set, and then each
# `gameday` command would compile ~60 modules again (~0.1 s). Up to date: well under 1 s.
bytecode: $(LAB_STAMP)
	@$(PY) -m compileall -q -j0 gameday faults verifiers tests bench >/dev/null

debs:
	@$(MAKE) -s demo-debs DEMO_DEBS="$(DEBS)"

demo-debs:
	@missing=""; for p in $(DEMO_DEBS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ]; then \
	    echo "installing Debian packages:$$missing"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing >/dev/null; \
	  else \
	    echo "missing Debian packages:$$missing — run: sudo apt-get install --no-install-recommends$$missing"; exit 1; \
	  fi; \
	fi

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(LAB_STAMP): pyproject.toml constraints.txt | $(PY)
	$(PIP) -e '.[lab]'
	touch $(LAB_STAMP)

# dev includes lab: the lab's stamp is fresh too
$(STAMP): pyproject.toml constraints.txt | $(PY)
	$(PIP) -e '.[dev,workloads,hf,lightning]'
	touch $(STAMP) $(LAB_STAMP)

$(KSTAMP):
	test -x $(KSERVE)/bin/python || $(PYTHON) -m venv $(KSERVE)
	$(KSERVE)/bin/python -m pip install -q 'kserve==0.21.0'
	touch $(KSTAMP)

# Seldon's MLServer, for the RTO tests against a second real model server
$(MSTAMP):
	test -x $(MLSERVER)/bin/python || $(PYTHON) -m venv $(MLSERVER)
	$(MLSERVER)/bin/python -m pip install -q 'mlserver==1.7.1'
	touch $(MSTAMP)

$(RSTAMP):
	test -x $(RAY)/bin/python || $(PYTHON) -m venv $(RAY)
	$(RAY)/bin/python -m pip install -q 'ray[serve]==2.60.0'
	touch $(RSTAMP)

demo: demo-debs $(LAB_STAMP) bytecode
	$(VENV)/bin/gameday run experiments/gpu-ecc-dbe-reshard.yaml --target lab --html

# the suite on TEST_WORKERS pytest-xdist workers (its tests mostly wait on real
# processes, servers and signals, so more workers than this machine's 2 cores); each
# module stays on one worker (its lab started once); what a test leaves on the host is
# named by its worker (tests/node/net_support.py); TEST_WORKERS=0: one process. The
# modules marked `alone` (Ray Serve's dozen processes) run after, by themselves: beside
# the other real servers' timing tests on two cores they made those fail
TEST_WORKERS ?= 3
test: setup
	$(PY) -m pytest -q -n $(TEST_WORKERS) --dist loadfile -m 'not alone'
	$(PY) -m pytest -q -m alone

bench: debs $(STAMP) bytecode
	$(PY) bench/run_overhead.py
	$(PY) bench/lab_startup.py
	$(PY) bench/rto_accuracy.py
	$(PY) bench/fanout.py
	$(PY) bench/fanout.py --as-deployed
	$(PY) bench/fleet.py
	$(PY) bench/report_scale.py
	$(PY) bench/net_link_overhead.py
	$(PY) bench/net_latency.py
	$(PY) bench/ddp_latency.py
	$(PY) bench/fault_survival.py --trials 50
	$(PY) bench/fault_survival.py --mode in-flight --trials 10
	$(PY) bench/gpu_check.py
	$(PY) bench/faultfs_overhead.py
	$(PY) bench/injection_latency.py --trials 20
	$(PY) bench/process_scan.py
	$(PY) bench/halt.py
	$(PY) bench/kinds_parse.py

bench-smoke: debs $(STAMP) bytecode
	$(SMOKE)

lint: $(STAMP)
	$(VENV)/bin/ruff check gameday faults verifiers tests bench
	$(VENV)/bin/mypy

# Re-pin constraints.txt: what gameday[dev,workloads,hf,lightning] resolves to today, in a fresh venv
constraints:
	rm -rf build/pin && $(PYTHON) -m venv build/pin
	build/pin/bin/pip install -q --upgrade pip && build/pin/bin/pip install -q '.[dev,workloads,hf,lightning]'
	{ sed -n '/^#/p' constraints.txt; build/pin/bin/pip freeze --exclude-editable \
	  | grep -v '^gameday[= @]' | sed 's/+cpu$$//' | LC_ALL=C sort -f; } > constraints.txt.new
	mv constraints.txt.new constraints.txt && rm -rf build/pin

clean:
	-$(VENV)/bin/gameday lab down 2>/dev/null
	rm -rf .gameday journals
