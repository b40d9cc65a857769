# Config validation, grid expansion and target functions only; the logic lives in hetfl.
import json
import os
import re
import sys

from hetfl.algorithms import method_label
from hetfl.config import (DEFAULT_P_INACTIVE, ConfigError, by_cell, check_data, expand_runs,
                          read_config_file, specs_to_json, validate_config)
from hetfl.fingerprint import data_fingerprint, fingerprint, git_environ, installed_versions
from hetfl.reports.catalog import SPLITS as SPLITS_SUBCATEGORY
from hetfl.reports.catalog import has_class_labels
from hetfl.reports.registry import BUILDERS as TABLE_BUILDERS
from hetfl.reports.registry import DRAWN_WHEN as FIGURE_DRAWN_WHEN
from hetfl.reports.registry import FIGURES as FIGURE_REGISTRY
from hetfl.reports.registry import SOURCES as TABLE_SOURCES
from hetfl.reports.registry import reference_files as table_reference_files
from hetfl.scheduling import REPORT_PRIORITY, train_priorities

try:
    for _configfile in workflow.configfiles:  # Snakemake's own YAML reading keeps a twice-given key's last value
        read_config_file(_configfile)
    _validated = validate_config(config)
except ConfigError as _err:
    sys.exit(f"hetfl: {_err}")
config.clear()
config.update(_validated)
# jobs inherit this process's environment (SLURM passes it on), so a node without git still records the
# commit in run.json (hetfl.fingerprint.git_state)
os.environ.update(git_environ())

RUNS = {(s.experiment, s.run): s for s in expand_runs(config)}

_RUN_TABLES = {s.table for s in RUNS.values()} - {"none"}
# plus the tables built from another table's runs (hetfl.reports.registry.SOURCES: fairness from bmta)
TABLES = sorted(_RUN_TABLES | {t for t, src in TABLE_SOURCES.items() if src in _RUN_TABLES})
# Snakemake's priority of each experiment's training jobs; splits, traces, tables, figures and mirrors get
# REPORT_PRIORITY (hetfl.scheduling: the largest MLflow mirrors, which run one at a time, start while others
# still train)
TRAIN_PRIORITY = train_priorities(RUNS.values())
# tables whose experiments have a readings axis also get <table>_readings.{md,csv}
READINGS_TABLES = sorted({s.table for s in RUNS.values() if s.reading} - {"none"})


wildcard_constraints:
    experiment=r"[A-Za-z0-9_.-]+",
    run=r"[A-Za-z0-9_.-]+",
    setting=r"[A-Za-z0-9_.-]+",
    seed=r"\d+",
    traceset=r"T[A-Za-z0-9_.-]+",
    opts=r"(_stratified)?(_pi[0-9.]+)?",


def split_spec(wc):
    """The first run using this split; all runs sharing a split key agree on its parameters."""
    key = f"{wc.experiment}/{wc.setting}/seed{wc.seed}"
    return next(s for s in RUNS.values() if s.split_key == key)


def split_spec_json(wc):
    return json.dumps(split_spec(wc).split_spec(), sort_keys=True)


def run_files(specs, reading=None):
    """run.json of each spec (reading: None = every run, "" = the experiments' own readings only)."""
    return [f"results/{s.experiment}/{s.run}/run.json" for s in specs if reading is None or s.reading == reading]


def metrics_files(run_jsons):
    """metrics.parquet beside each run.json: the table, figure and track jobs read both (hetfl.reports.results
    .collect_runs, hetfl.tracking), so both are their inputs. With run.json alone, a metrics.parquet cut off
    or edited by hand left the tables, figures and MLflow mirror as they were ("Nothing to be done")."""
    return [f[: -len("run.json")] + "metrics.parquet" for f in run_jsons]


def specs_of_table(table):
    """The runs a table's rules read: its own and those of the table it is built from (fairness reads bmta's:
    hetfl.reports.tables.SOURCES)."""
    tables = {table, TABLE_SOURCES.get(table)}
    return [s for s in RUNS.values() if s.table in tables]


def runs_of_table(table, reading=""):
    return run_files(specs_of_table(table), reading)


# A cell = the runs that share a split; each cell trains in one `hetfl train --cell` process (imports and
# the split paid once). Cells of an experiment whose runs have the same names up to (setting, seed) share
# one rule with those two wildcards (usually one rule per experiment; workflow/rules/train.smk).
CELLS = by_cell(RUNS.values())


# figure -> the table whose runs draw it (the registry hetfl.reports.registry.FIGURES), for the tables run
# (and, for a figure in DRAWN_WHEN, only where those runs can draw it: EFL Figure 3 needs |T| > 1)
FIGURES = {f: t for f, (t, _) in FIGURE_REGISTRY.items() if t in TABLES
           and FIGURE_DRAWN_WHEN.get(f, lambda specs: True)([s for s in RUNS.values() if s.table == t])}


def _split_charts():
    """experiment -> the manifests its split chart draws: the experiment's own splits (runs without a
    reading; a reading that changes the data has its own split), a panel per setting in config order, from
    its first seed. Datasets without class labels (quadratic) get no chart."""
    charts = {}
    for experiment in dict.fromkeys(s.experiment for s in RUNS.values()):
        own = [s for s in RUNS.values() if s.experiment == experiment and s.reading == ""]
        if not own or not has_class_labels(own[0].dataset):
            continue
        seed = own[0].seed
        keys = dict.fromkeys(s.split_key for s in own if s.seed == seed)
        charts[experiment] = [f"data_splits/{key}/manifest.json" for key in keys]
    return charts


# experiment -> manifests of its label-distribution chart reports/figures/splits/<experiment>.png
SPLIT_CHARTS = _split_charts()


def all_targets():
    """Every table (and readings table) and figure, the split charts, every run's files, the mirrors.

    Every run's run.json and metrics.parquet are targets themselves: Snakemake does not remake a deleted
    file whose consumers exist, so a deleted metrics.parquet would stay deleted (an audit found it). As a
    target it is made again (resumed from its final checkpoint).
    So is each split's manifest.json, which a training job reads beside split.npz (hetfl.data.build
    .check_split): deleted, it stayed deleted and the next training job that read the split failed."""
    tables = [f"reports/tables/{t}.{ext}" for t in TABLES for ext in ("md", "csv", "tex")]
    tables += [f"reports/tables/{t}_readings.{ext}" for t in READINGS_TABLES for ext in ("md", "csv")]
    figures = [f"reports/figures/{f}.png" for f in FIGURES]
    figures += [f"reports/figures/splits/{e}.png" for e in SPLIT_CHARTS]
    mirrors = [f"results/{e}/mlflow.json" for e in sorted({s.experiment for s in RUNS.values()})]
    runs = [f"results/{s.experiment}/{s.run}/{name}" for s in RUNS.values()
            for name in ("run.json", "metrics.parquet")]
    manifests = [f"data_splits/{key}/manifest.json"
                 for key in dict.fromkeys(s.split_key for s in RUNS.values())]
    return tables + figures + runs + manifests + mirrors


# ---- helpers of splits.smk, tables.smk, track.smk and report.smk (snakemake --lint wants functions apart from rules) ----


def split_job_resources():
    """split_large's resources (hetfl.cluster.split_resources: memory for its experiment's source, a time
    limit, the CPU partition); CLUSTER and the functions come from cluster.smk, included after this file."""
    return {name: (lambda wc, attempt, name=name: split_resources(
        config["experiments"][wc.experiment]["dataset"], CLUSTER, attempt)[name])
            for name in split_resource_names(CLUSTER)}


def trace_assignment(wc):
    return "stratified" if "_stratified" in wc.opts else "random"


def trace_p_inactive(wc):
    found = re.search(r"_pi([0-9.]+)", wc.opts)
    return found.group(1) if found else "0.05"


def trace_versions(wc):
    """The trace rule's `versions` param: numpy's (hetfl.fingerprint.VERSIONS), and scipy's where the
    traces' (mu, sigma) are fitted in the job (a p_inactive other than the default, whose fits
    reports/references/ruan2021_table2_fits.csv holds; hetfl.data.traces)."""
    fitted = float(trace_p_inactive(wc)) != DEFAULT_P_INACTIVE
    return installed_versions("trace", ("scipy",) if fitted else ())


def method_labels(table):
    """The names that table's rows and legends print for its runs' algorithms (hetfl.algorithms.method_label),
    as one string: a table or figure rule's `labels` param. A plugin's label lives in its own package,
    outside every table's and figure's code fingerprint, so a new label left the old one in the tables."""
    names = sorted({s.algorithm for s in specs_of_table(table)})
    return ";".join(f"{name}={method_label(name)}" for name in names)


def table_references(wc):
    """The hash of the reference CSVs table wc.table reads (hetfl.reports.tables.REFERENCES): its rules'
    `references` param, so an edit of one CSV rebuilds the tables that read it and no other."""
    return data_fingerprint(table_reference_files(wc.table))


def experiment_table(experiment):
    """The table an experiment's runs feed ("none" for none)."""
    return next(s.table for s in RUNS.values() if s.experiment == experiment)


def reports_of_experiment(experiment):
    """What the experiment's summary run carries (docs/tracking.md): the table its runs feed, the tables
    built from that table's runs (fairness from bmta's: hetfl.reports.tables.SOURCES), the figures drawn
    from it, and the experiment's split chart, each figure with its caption."""
    table = experiment_table(experiment)
    if table == "none":
        return []
    built = [table] + [t for t, source in TABLE_SOURCES.items() if source == table and t in TABLES]
    tables = [f"reports/tables/{t}.{ext}" for t in built for ext in ("md", "csv", "tex")]
    if table in READINGS_TABLES:
        tables += [f"reports/tables/{table}_readings.{ext}" for ext in ("md", "csv")]
    figures = [f"reports/figures/{f}.{ext}" for f, t in FIGURES.items() if t == table
               for ext in ("png", "svg", "caption.html")]
    if experiment in SPLIT_CHARTS:
        figures += [f"reports/figures/splits/{experiment}.{ext}" for ext in ("png", "caption.html")]
    return tables + figures


def report_targets():
    tables = [f"reports/report/tables/{n}.html" for n in REPORT_TABLES]
    return ["reports/report/fidelity.html", *tables] if tables else []


#: the rules that make a split (workflow/rules/splits.smk): split on this host, split_large as a cluster job
SPLIT_RULES = ("split", "split_large")


def split_experiments():
    """The experiments whose split jobs this run starts, from Snakemake's plan (None, meaning all of them,
    where this Snakemake's DAG has no needrun_jobs)."""
    plan = getattr(workflow.dag, "needrun_jobs", None)
    return None if plan is None else {j.wildcards.experiment for j in plan() if j.rule.name in SPLIT_RULES}


# The data those split jobs read (a prepared copy of domainnet or digit5, a local copy that is there but
# unreadable, offline a hub source's copy in the datasets cache), checked before any job starts: a split job found it only after other jobs had run. onstart
# runs once the plan is made and never in a dry run (-n), so a dry run and a run whose splits are already
# made need no data (hetfl.config.check_data; docs/datasets.md).
onstart:
    try:
        check_data(config, experiments=split_experiments())
    except ConfigError as _err:
        sys.exit(f"hetfl: {_err}")
