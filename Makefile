# Two commands do all set-up on a fresh machine:  `make reproduce`  and  `make test`.
PYTHON ?= python3.11
VENV   ?= .venv
CORES  ?= 2
CONFIG ?= workflow/config/quick.yaml
BIN    := $(abspath $(VENV))/bin
STAMP  := $(VENV)/.hetfl-installed
SLURM_STAMP := $(VENV)/.hetfl-slurm-installed

.PHONY: setup reproduce test lint dryrun paper clean slurm-setup slurm-up slurm-down

$(STAMP): requirements.lock pyproject.toml scripts/install-deps
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV) || python3 -m venv $(VENV)
	$(BIN)/python scripts/install-deps requirements.lock  # uv, pip where uv fails (HETFL_INSTALLER=pip: pip)
	touch $(STAMP)

setup: $(STAMP)  ## create .venv with the pinned dependencies and hetfl

reproduce: $(STAMP)  ## run the embedded default grid and build its tables (recovers from an interrupted run)
	PATH=$(BIN):$$PATH $(BIN)/python -m hetfl.reproduce --cores $(CORES) --configfile $(CONFIG)

test: $(STAMP)  ## run the test suite, one worker per core (a test file stays on one worker: its fixtures run once; the workflow files first, tests/conftest.py)
	PATH=$(BIN):$$PATH $(BIN)/python -m pytest -n $(CORES) --dist loadfile --no-loadscope-reorder

lint: $(STAMP)
	$(BIN)/ruff check src tests

dryrun: $(STAMP)  ## list the paper-scale grid without running it
	PATH=$(BIN):$$PATH snakemake -n --cores $(CORES) --configfile workflow/config/paper/ruan2021_table3_synthetic.yaml

$(SLURM_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install -q --disable-pip-version-check -c requirements.lock -e '.[slurm]'
	touch $(SLURM_STAMP)

slurm-setup: $(SLURM_STAMP)  ## add Snakemake's SLURM executor plugin (hetfl[slurm]) to .venv

slurm-up: slurm-setup  ## install and start a SLURM on this machine (root; for tests/test_slurm.py; HETFL_LOCAL_NODES=2: two nodes)
	scripts/slurm-local-up

slurm-down:  ## stop that SLURM's daemons (slurm-up starts them again)
	scripts/slurm-local-down

clean:  ## remove generated data, results and reports (keeps .venv)
	rm -rf data_splits/*/ results/*/ results/mlflow.db reports/tables reports/figures logs .snakemake
