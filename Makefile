# yasgd — the README's two commands are `make train` and `make test`;
# each installs what it needs first (idempotently).
SHELL := /bin/bash
VENV ?= .venv
MXNET ?= mxnet==1.9.1
PY := $(VENV)/bin/python
YASGD := $(VENV)/bin/yasgd
NP ?= 2
CONFIG ?= examples/configs/demo.yaml
OUT ?= results
BENCHES := optimizer allreduce init overlap throughput data largebatch ablation
BENCH_TARGETS := $(addprefix bench-,$(BENCHES))
# Launch N ranks on this host: root needs --allow-run-as-root, more ranks than
# cores need --oversubscribe; each rank gets one OpenMP thread; the launcher
# applies the tuning defaults of jobs/common.sh.
MPIRUN = $(VENV)/bin/python -m yasgd.launch -np $(call shq,$(NP))
PYTEST = $(PY) -m pytest -q -p no:cacheprovider
# A value typed on make's command line (a path, a count) as one word of a recipe's command,
# quoted only where the shell needs it (bash's printf %q): CONFIG="my run.yaml" stays one
# argument
shq = $(shell printf '%q' '$(subst ','\'',$(1))')
# A yes/no variable (QUICK, DRY_RUN): 1, yes or true turns it on; 0, no, false or unset
# leaves it off (QUICK=0 runs the full bench); anything else stops make, naming it
flag = $(if $(or $(word 2,$($(1))),$(filter-out 1 yes true 0 no false,$($(1)))), \
  $(error $(1)=$($(1)): use 1 (on) or 0 (off)),$(filter 1 yes true,$($(1))))
# read before any target runs: a bad value stops make before it installs anything
QUICK_ON := $(call flag,QUICK)
DRY_RUN_ON := $(call flag,DRY_RUN)

.PHONY: install train test test-unit test-multiproc test-e2e test-cluster cluster-rehearsal \
        bench jobs-check clean \
        $(BENCH_TARGETS)

install:
	MXNET=$(call shq,$(MXNET)) bash jobs/install.sh $(if $(DRY_RUN_ON),--dry-run) $(VENV)

train: install
	$(MPIRUN) $(YASGD) train $(call shq,$(CONFIG)) $(ARGS)

test: install
	$(MAKE) --no-print-directory test-unit test-multiproc test-e2e test-cluster

# The unit tests run on one pytest-xdist worker per core, one OpenMP thread each; those
# marked serial (pytest.ini) run afterwards alone. The e2e tests run on two workers, each a
# group of whole files (tests/e2e/conftest.py says which and why).
TEST_WORKERS ?= $(shell nproc)
test-unit:
	OMP_NUM_THREADS=1 $(PYTEST) -n $(TEST_WORKERS) -m "not serial" tests/unit
	OMP_NUM_THREADS=2 $(PYTEST) -m serial tests/unit

test-multiproc:
	$(MPIRUN) $(PYTEST) tests/multiproc

test-e2e:
	$(PYTEST) -n 2 --dist loadgroup tests/e2e

# Two nodes inside this machine (network + UTS namespaces, a veth link, sshd, a
# two-slurmd Slurm): docs/cluster.md, "A two-node rehearsal". Root; skipped with one
# reason where `unshare --net --uts` fails.
test-cluster:
	$(PYTEST) tests/cluster

# A job script rehearsed across the two namespace nodes, then removed:
#   make cluster-rehearsal SCHEDULER=slurm|pbs|uge [SCRIPT=job.sh] [ARGS="k=v ..."]
SCHEDULER ?= slurm
cluster-rehearsal: install
	$(PY) tests/cluster/rehearsal.py --scheduler $(call shq,$(SCHEDULER)) \
	  $(if $(SCRIPT),--script $(call shq,$(SCRIPT)),) $(ARGS)

# a static pattern rule: make skips implicit-rule search for .PHONY targets, so a plain
# `bench-%:` pattern would never run for them
$(BENCH_TARGETS): bench-%: install
	$(YASGD) bench $* --out $(call shq,$(OUT)) $(if $(QUICK_ON),--quick,) $(BENCH_ARGS)

bench: install
	for b in $(BENCHES); do \
	  $(MAKE) --no-print-directory bench-$$b || exit 1; done
	$(PY) -m yasgd.bench.summary --out $(call shq,$(OUT))
	$(PY) -m yasgd.bench.report --results $(call shq,$(OUT)) $(if $(filter examples/results,$(OUT)),,--check || true)

jobs-check: install
	bash jobs/check.sh

clean:
	rm -rf runs results build *.egg-info
