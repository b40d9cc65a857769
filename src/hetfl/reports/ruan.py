"""Ruan et al. (2021) Tables 3–5 from run directories, and each table under every reading of its
readings axis.

A cell's numbers come from accuracy_difference (Table 3) and event_tables (Tables 4–5); this module adds
what a reader needs to trust them: whether the set-up is the paper's (reports.setups), what the traces
actually gave (E[K_τ], P(complete) per trace, from the runs' run.json), the verdict counts, the readings
used, and the commits of the runs read. docs/readings.md explains every reading.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from hetfl.reports import accuracy_difference as ad
from hetfl.reports import event_tables as ev
from hetfl.reports.references import PRINT_RESOLUTION, load_reference
from hetfl.reports.setups import setup_differences
from hetfl.reports.tables import (  # the notes every table states live with the registries
    PARTICIPATION_READINGS,
    load_event_runs,
    load_runs,
    participation_note,
    provenance_note,
    scale_note,
    settings_note,
)
from hetfl.reports.verdicts import RULE_TEXT, VERDICTS, counts_text, interval_text, verdict_counts
from hetfl.reports.writers import markdown, write_frame_tables

#: reading columns (flattened run-spec names) each table states, in its CSV and its readings table
READING_COLUMNS = {
    "accuracy_difference": ["local_work", "completion", "trace_assignment", "p_inactive", "local_epochs",
                            "eta0", "iid", "partition.label_choice"],
    "fast_reboot": ["local_work", "completion", "trace_assignment", "local_epochs", "eta0",
                    "partition.label_choice", "event.boost", "event.boost_decay"],
    "crossing_epochs": ["local_work", "completion", "trace_assignment", "local_epochs", "eta0",
                        "event.departure_test_set"],
}
#: what decides each reading's default (docs/readings.md quotes the sentences)
READING_BASIS = {
    "local_work": "paper: footnote 1, E local updates (steps)",
    "completion": "unpublished: nearest = round(f·E), so what devices submit keeps Table 2's moments",
    "trace_assignment": "paper: §5.1 'randomly assigned a trace' (random)",
    "p_inactive": "unpublished (0.05)",
    "local_epochs": "unpublished for SYNTHETIC (5, the E of Figure 1)",
    "eta0": "paper: §5.1 states η0 per dataset",
    "iid": "ambiguous: 'α = β = 0 for the IID case' (FedProx's IID variant, iid = true)",
    "label_choice": "paper: §5.1 'one label chosen uniformly at random' (random)",
    "departure_test_set": "paper: Figure 4 caption (include on all data, exclude on the remaining)",
    "boost": "paper: §4.2 p^l + δ^l (additive)",
    "boost_decay": "unpublished: §5.3 'decays to p^l by O(τ^−2)' (shifted, 2p^l/(τ − τ0 + 1)²)",
    "improvement": "paper: §5.2 'the differences in the test accuracies' (points)",
}


def with_setups(runs: pd.DataFrame, table: str) -> pd.DataFrame:
    """runs plus `setup` (the departures from the paper's stated set-up) and `comparable`."""
    runs = runs.copy()
    runs["setup"] = [tuple(setup_differences(r, table)) for _, r in runs.iterrows()]
    runs["comparable"] = runs["setup"].map(len) == 0
    return runs


def own_readings(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs under their experiments' own readings (a by-hand glob may include readings variants)."""
    return runs[runs["reading"].fillna("") == ""] if "reading" in runs else runs


def comparability_note(runs: pd.DataFrame) -> str:
    parts = []
    for (dataset, setting), g in runs.groupby(["dataset_name", "setting"], sort=True):
        diffs = sorted({d for setup in g["setup"] for d in setup})
        if diffs:
            parts.append(f"{dataset} {setting}: {'; '.join(diffs)}")
    if not parts:
        return "Every cell's set-up is the paper's as far as the paper states it."
    return "Not comparable (set-up differs from the paper's): " + " | ".join(parts) + "."


#: readings a run's spec records only where they are not the default (config._events), so that specs made
#: before the reading existed stay as they were: a missing value is this one
UNRECORDED_DEFAULTS = {"event.boost_decay": "shifted"}


def reading_values(runs: pd.DataFrame, table: str) -> dict[str, str]:
    """The value of each reading column over the runs ('a|b' when they differ)."""
    out = {}
    for col in READING_COLUMNS[table]:
        if col not in runs and col not in UNRECORDED_DEFAULTS:
            continue
        column = runs[col] if col in runs else pd.Series([None] * len(runs), dtype=object)
        vals = sorted({str(v) if not pd.isna(v) else UNRECORDED_DEFAULTS.get(col, "") for v in column} - {""})
        out[col] = "|".join(vals) if vals else "—"
    return out


def _attach_readings(tidy: pd.DataFrame, runs: pd.DataFrame, keys: list[str], table: str,
                     run_keys: list[str] | None = None) -> pd.DataFrame:
    """One column per reading with the value the cell's runs used."""
    run_keys = run_keys or keys
    values = {k: reading_values(g, table) for k, g in runs.groupby(run_keys, sort=True)}
    rows = [values.get(tuple(r[k] for k in keys), {}) for _, r in tidy.iterrows()]
    return pd.concat([tidy.reset_index(drop=True), pd.DataFrame(rows)], axis=1)


# --- the three tables ------------------------------------------------------------------------------------
def compute_accuracy_difference(runs: pd.DataFrame) -> pd.DataFrame:
    name = "ruan2021_table3_accuracy_difference"
    tidy = ad.accuracy_difference(runs, load_reference(name), PRINT_RESOLUTION[name])
    return _attach_readings(tidy, runs, ["dataset", "setting", "num_traces"], "accuracy_difference")


def compute_fast_reboot(runs: pd.DataFrame) -> pd.DataFrame:
    tidy = ev.fast_reboot(runs, load_reference("ruan2021_table4_fast_reboot"))
    return _attach_readings(tidy, runs, ["dataset", "setting", "tau0"], "fast_reboot",
                            ["dataset", "setting", "event_round"])


def compute_crossing(runs: pd.DataFrame) -> pd.DataFrame:
    tidy = ev.crossing(runs, load_reference("ruan2021_table5_crossing_epochs"))
    return _attach_readings(tidy, runs, ["dataset", "setting", "tau0"], "crossing_epochs",
                            ["dataset", "setting", "event_round"])


def table_verdicts(table: str, tidy: pd.DataFrame) -> list[str]:
    """The cells a caption counts: Table 3 in points, Table 4's vanilla − fast, Table 5's crossings."""
    if table == "accuracy_difference":
        return [str(v) for v in tidy.loc[tidy["improvement"] == "points", "verdict"]]
    return ev.verdicts_of(tidy)


#: which cells a caption's verdict counts are of, where the table shows other verdicts too
COUNTED = {"fast_reboot": " (of the vanilla − fast cells; each policy's own count has its verdict beside it, "
                          "not counted)",
           "accuracy_difference": " (of the percentage-point cells)"}


def _notes(runs: pd.DataFrame, table: str, tidy: pd.DataFrame, settings_note: str) -> str:
    readings = reading_values(runs, table)
    return " ".join(filter(None, [
        settings_note,
        scale_note(runs),
        "Readings (docs/readings.md): " + ", ".join(f"{k} = {v}" for k, v in readings.items()) + ".",
        comparability_note(runs),
        participation_note(runs),
        f"Verdicts: {counts_text(table_verdicts(table, tidy))}{COUNTED.get(table, '')}.",
        provenance_note(runs),
    ]))


def build_accuracy_difference(run_dirs: list[Path], out_stem: Path) -> Path:
    runs = own_readings(with_setups(load_runs(run_dirs), "accuracy_difference"))
    tidy = compute_accuracy_difference(runs)
    caption = ad.default_caption(_notes(runs, "accuracy_difference", tidy, settings_note(runs)),
                                 int(runs["rounds"].max()), int(runs["num_devices"].max()))
    write_frame_tables(tidy, ad.paper_layout(tidy), out_stem, caption)
    return out_stem


def build_fast_reboot(run_dirs: list[Path], out_stem: Path) -> Path:
    runs = own_readings(with_setups(load_event_runs(run_dirs), "fast_reboot"))
    tidy = compute_fast_reboot(runs)
    caption = ("Reproduction of Ruan et al. (2021), Table 4: global epochs from the arrival round τ0 on "
               "(round τ0 is the first) until the global test accuracy is back at its level of round τ0 − 1, "
               "with fast reboot (the arriving device's coefficient boosted to 3·p^l at τ0, decaying as "
               "2p^l/(τ − τ0 + 1)² (the event.boost_decay reading), composed with the scheme as the "
               "event.boost reading says) and vanilla reboot; the learning rate restarts at "
               "η0/(τ − τ0 + 1) in both. From τ0 on the test set includes the arriving device's holdout. "
               "The cell is the paired per-seed difference vanilla − fast (rounds fast reboot saves; same "
               "seed, split and traces); each method's own count is shown beside it. Cells: mean [95 % "
               "Student-t CI] over seeds; a seed that did not recover within the R rounds observed counts as "
               "'> R' and the CI follows the bounds rule ([R + 1, ∞) per censored seed; no mean is made up). "
               "Verdicts (hetfl.reports.verdicts), vanilla − fast (a difference): " + RULE_TEXT["difference"]
               + "; each method's count (a level): " + RULE_TEXT["level"] + ". "
               + _notes(runs, "fast_reboot", tidy, settings_note(runs)))
    write_frame_tables(tidy, ev.layout(tidy, ["dataset", "setting"]), out_stem, caption)
    return out_stem


def build_crossing_epochs(run_dirs: list[Path], out_stem: Path) -> Path:
    runs = own_readings(with_setups(load_event_runs(run_dirs), "crossing_epochs"))
    tidy = compute_crossing(runs)
    test_sets = {
        "paper": "as the paper's Figure 4: 'include' on every device's holdout (the original objective), "
                 "'exclude' on the remaining devices' holdout",
        "remaining": "both options on the holdout of the devices that remain after the departure",
        "all": "both options on the holdout of all devices, the departed one included",
    }
    which = "; ".join(test_sets.get(t, t) for t in sorted(runs["event.departure_test_set"].dropna().unique()))
    caption = ("Reproduction of Ruan et al. (2021), Table 5: global epochs from the departure round τ0 on "
               "(round τ0 is the first) until the test loss of the 'exclude' option (objective shifted to "
               "the remaining devices, coefficients renormalised, learning rate restarted) drops below that "
               "of 'include' (the departed device "
               f"stays in the objective, sends nothing). Test data: {which} (docs/readings.md). Cells: mean "
               "[95 % Student-t CI] over seeds of the per-seed crossing round; a seed whose curves did not "
               "cross within the R rounds observed (the shorter of its two curves) counts as '> R' (bounds "
               "rule: [R + 1, ∞)). Verdicts (hetfl.reports.verdicts), a crossing round being a level: "
               + RULE_TEXT["level"] + ". "
               + _notes(runs, "crossing_epochs", tidy, settings_note(runs)))
    write_frame_tables(tidy, crossing_layout(tidy), out_stem, caption)
    return out_stem


def crossing_layout(tidy: pd.DataFrame) -> pd.DataFrame:
    """Table 5's people's layout: a row per (data set, α, β, τ0), as the paper's rows, and per setting too
    where two settings share a data set label and (α, β): a real source's settings all have α = β = 0, and
    two sources of one label (mnist, mnist5k) under setting names of their own were one row, the later
    setting's cells written over the earlier's."""
    keys = ["dataset", "alpha", "beta"]
    if len(tidy) and tidy.groupby(keys)["setting"].nunique().max() > 1:
        keys = ["dataset", "setting", "alpha", "beta"]
    return ev.layout(tidy, keys)


# --- readings tables ----------------------------------------------------------------------------------------
def _loaders() -> dict[str, tuple[Callable[[list[Path]], pd.DataFrame],
                                  Callable[[pd.DataFrame], pd.DataFrame]]]:
    return {"accuracy_difference": (load_runs, compute_accuracy_difference),
            "fast_reboot": (load_event_runs, compute_fast_reboot),
            "crossing_epochs": (load_event_runs, compute_crossing)}


def runs_under(runs: pd.DataFrame, reading: str) -> pd.DataFrame:
    """The runs that make up the table under `reading` ('key=value'): the variant run where one was made;
    the experiment's own run where the reading cannot change it (config._variant says which); cells whose
    variant was not run (readings_grid) are left out."""
    from hetfl.config import RunSpec, _variant

    default = own_readings(runs)
    if not reading:
        return default
    key, _, text = reading.partition("=")
    value = _typed(text)
    variants = runs[runs["reading"] == reading]
    by_name = {(r["experiment"], r["run"]): i for i, r in variants.iterrows()}
    keep = []
    for i, r in default.iterrows():
        spec = RunSpec.from_dict(json.loads((Path(r["run_dir"]) / "run.json").read_text())["spec"])
        var = _variant(spec, key, value)
        if var is None:
            keep.append(default.loc[[i]])
        elif (var.experiment, var.run) in by_name:
            keep.append(variants.loc[[by_name[(var.experiment, var.run)]]])
    return pd.concat(keep) if keep else default.iloc[:0]


def _typed(text: str) -> bool | int | float | str:
    """A reading's value as the config had it ('true' -> True, '5' -> 5, '0.1' -> 0.1)."""
    if text in ("true", "false"):
        return text == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def readings_table(table: str, run_dirs: list[Path]) -> pd.DataFrame:
    """Every cell under every reading the runs hold ('' = the experiments' own), tidy, with a `reading`
    column; Table 3 also lists its relative form as the reading improvement=relative."""
    load, compute = _loaders()[table]
    runs = with_setups(load(run_dirs), table)
    readings = [""] + sorted(r for r in runs["reading"].fillna("").unique() if r)
    parts = []
    for reading in readings:
        tidy = compute(runs_under(runs, reading))
        if table == "accuracy_difference":
            rel = tidy[tidy["improvement"] == "relative"].assign(reading="improvement=relative")
            tidy = tidy[tidy["improvement"] == "points"]
            parts.append(tidy.assign(reading=reading or "paper/default"))
            if not reading:
                parts.append(rel)
        else:
            parts.append(tidy.assign(reading=reading or "paper/default"))
    return pd.concat(parts, ignore_index=True)


def _readings_md(table: str, tidy: pd.DataFrame) -> str:
    cells = tidy
    if table == "fast_reboot":
        cells = tidy[tidy["method"] == ev.DIFFERENCE]
    keys = {"accuracy_difference": ["dataset", "setting", "num_traces", "comparison"],
            "fast_reboot": ["dataset", "setting", "tau0"],
            "crossing_epochs": ["dataset", "setting", "tau0"]}[table]
    order = list(dict.fromkeys(cells["reading"]))
    wide = cells.assign(text=[f"{interval_text(_iv(r))} · {r['verdict']}" for _, r in cells.iterrows()])
    # a cell the readings grid did not run under a reading is said so, not printed as "nan"
    wide = wide.pivot_table(index=keys, columns="reading", values="text", aggfunc="first")[order]
    wide = wide.fillna("— (not run)")
    # a reading's row says why the *default* is what it is: the alternative departs from that
    summary = pd.DataFrame([{"reading": r, "basis": ("the default's: " + READING_BASIS[r.split("=")[0]]
                                                     if r.split("=")[0] in READING_BASIS else "the defaults"),
                             **verdict_counts([str(v) for v in cells.loc[cells["reading"] == r, "verdict"]])}
                            for r in order], columns=["reading", "basis", *VERDICTS])
    return ("Verdict counts per reading (each reading changes one thing from the defaults):\n\n"
            + markdown(summary) + "\n\nEvery cell under every reading (mean [95 % CI] · verdict):\n\n"
            + markdown(wide.reset_index()) + "\n")


def _iv(row: pd.Series):
    from hetfl.reports.verdicts import Interval

    n_never = int(row["n_never"]) if "n_never" in row and pd.notna(row["n_never"]) else 0
    return Interval(row["reproduced_mean"], row["reproduced_std"], row["ci_low"], row["ci_high"],
                    int(row["n_seeds"]), n_never)


def readings_notes(table: str, run_dirs: list[Path]) -> str:
    """What every caption states (docs/readings.md) for the readings table: the participation each reading
    that changes it measured (completion=floor: T_30 completes 6 % of rounds, not the default's 18 %) and
    the commits of every run read. The readings captions stated neither (an audit)."""
    load, _ = _loaders()[table]
    runs = load(run_dirs)
    notes = []
    for reading in sorted(r for r in runs["reading"].fillna("").unique() if r):
        if reading.partition("=")[0] in PARTICIPATION_READINGS:
            text = participation_note(runs_under(runs, reading))
            if text:
                notes.append(f"Under {reading}: {text[0].lower()}{text[1:]}")
    return "".join(" " + n for n in [*notes, provenance_note(runs)])


def build_readings(table: str, run_dirs: list[Path], out_stem: Path) -> Path:
    """<stem>.csv (tidy: every cell under every reading) and <stem>.md (a column per reading)."""
    from hetfl.io import atomic_write_text

    tidy = readings_table(table, run_dirs)
    caption = (f"Sensitivity of {table} to the readings of the paper (docs/readings.md): each column "
               "changes one reading from the defaults, on the same seeds, splits and grid; 'paper/default' "
               "is the main table. Where a reading cannot change a run (e.g. trace assignment with |T| = 1) "
               "the default run stands in." + readings_notes(table, run_dirs))
    out_stem = Path(out_stem)
    atomic_write_text(out_stem.with_name(out_stem.name + ".csv"), tidy.to_csv(index=False))
    atomic_write_text(out_stem.with_name(out_stem.name + ".md"), caption + "\n\n" + _readings_md(table, tidy))
    return out_stem
