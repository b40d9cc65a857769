# Config validation and grid expansion only; the logic lives in hetfl.config.
import json
import shlex
import sys

from hetfl.config import ConfigError, expand_runs, validate_config

try:
    _validated = validate_config(config)
except ConfigError as _err:
    sys.exit(f"hetfl: {_err}")
config.clear()
config.update(_validated)

RUNS = {(s.experiment, s.run): s for s in expand_runs(config)}
TABLES = sorted({s.table for s in RUNS.values()} - {"none"})


wildcard_constraints:
    experiment=r"[A-Za-z0-9_.-]+",
    run=r"[A-Za-z0-9_.-]+",
    setting=r"[A-Za-z0-9_.-]+",
    seed=r"\d+",
    traceset=r"T[A-Za-z0-9_.-]+",


def spec_of(wc):
    return RUNS[(wc.experiment, wc.run)]


def split_spec(wc):
    """The first run using this split; all runs sharing a split key agree on its parameters."""
    key = f"{wc.experiment}/{wc.setting}/seed{wc.seed}"
    return next(s for s in RUNS.values() if s.split_key == key)


def split_args(wc):
    s = split_spec(wc)
    if s.dataset == "quadratic":
        return shlex.join(["--dataset", "quadratic", "--a", ",".join(map(str, s.quadratic["a"])),
                           "--b", ",".join(map(str, s.quadratic["b"]))])
    args = ["--dataset", s.dataset, "--alpha", str(s.alpha), "--beta", str(s.beta),
            "--num-devices", str(s.num_devices), "--sizes", json.dumps(s.sizes, sort_keys=True),
            "--test-fraction", str(s.test_fraction)]
    if s.iid:
        args.append("--iid")
    return shlex.join(args)


def train_inputs(wc):
    s = spec_of(wc)
    return {
        "split": f"data_splits/{s.split_key}/split.npz",
        "traces": f"data_splits/traces/{s.trace_key}.npz",
    }


def runs_of_table(table):
    return [f"results/{s.experiment}/{s.run}/run.json" for s in RUNS.values() if s.table == table]


def all_targets():
    """Every table, and the runs of experiments that feed no table (table: none)."""
    tables = [f"reports/tables/{t}.{ext}" for t in TABLES for ext in ("md", "csv", "tex")]
    return tables + runs_of_table("none")
