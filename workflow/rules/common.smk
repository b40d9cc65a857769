# Config validation and grid expansion only; the logic lives in hetfl.config.
import json
import sys

from hetfl.config import ConfigError, expand_runs, validate_config
from hetfl.reports.figures import FIGURES as FIGURE_REGISTRY
from hetfl.reports.tables import BUILDERS as TABLE_BUILDERS
from hetfl.reports.tables import SOURCES as TABLE_SOURCES

try:
    _validated = validate_config(config)
except ConfigError as _err:
    sys.exit(f"hetfl: {_err}")
config.clear()
config.update(_validated)

RUNS = {(s.experiment, s.run): s for s in expand_runs(config)}
_RUN_TABLES = {s.table for s in RUNS.values()} - {"none"}
# plus the tables built from another table's runs (hetfl.reports.tables.SOURCES: fairness from bmta)
TABLES = sorted(_RUN_TABLES | {t for t, src in TABLE_SOURCES.items() if src in _RUN_TABLES})


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


def split_spec_json(wc):
    return json.dumps(split_spec(wc).split_spec(), sort_keys=True)


def train_inputs(wc):
    s = spec_of(wc)
    return {
        "split": f"data_splits/{s.split_key}/split.npz",
        "traces": f"data_splits/traces/{s.trace_key}.npz",
    }


def runs_of_table(table):
    tables = {table, TABLE_SOURCES.get(table)}
    return [f"results/{s.experiment}/{s.run}/run.json" for s in RUNS.values() if s.table in tables]


# figure -> the table whose runs draw it (the registry hetfl.reports.figures.FIGURES), for the tables run
FIGURES = {f: t for f, (t, _) in FIGURE_REGISTRY.items() if t in TABLES}


def all_targets():
    """Every table and figure, and the runs of experiments that feed no table (table: none)."""
    tables = [f"reports/tables/{t}.{ext}" for t in TABLES if t != "none" for ext in ("md", "csv", "tex")]
    figures = [f"reports/figures/{f}.png" for f in FIGURES]
    mirrors = [f"results/{e}/mlflow.json" for e in sorted({s.experiment for s in RUNS.values()})]
    return tables + figures + runs_of_table("none") + mirrors
