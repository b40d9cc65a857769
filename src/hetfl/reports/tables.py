"""Paper tables built from run directories (results/ is the only input besides the paper references)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from hetfl.reports import accuracy_difference as ad
from hetfl.reports.references import load_reference
from hetfl.reports.results import collect_runs

DATASET_LABELS = {"synthetic": "SYNTHETIC"}


def _run_dirs(paths: list[Path]) -> list[Path]:
    return [p.parent if p.name == "run.json" else p for p in paths]


def _synthetic_note(runs: pd.DataFrame) -> str:
    parts = []
    for setting, g in runs.groupby("setting", sort=True):
        a, b, iid = g["alpha"].iloc[0], g["beta"].iloc[0], bool(g["iid"].iloc[0])
        variant = ("FedProx's SYNTHETIC-IID generator (one W, b shared by all devices)" if iid else
                   "FedProx's SYNTHETIC(α, β) generator (W_k ~ N(u_k, 1) per device: not IID even at (0,0))")
        parts.append(f"{setting} = SYNTHETIC({a:g},{b:g}) with {variant}")
    first = runs.iloc[0]
    scale = (f"Reduced scale: {int(first['rounds'])} rounds, {runs['seed'].nunique()} seed(s), "
             f"E = {int(first['local_epochs'])}, B = {int(first['batch_size'])}, η_τ = {first['eta0']:g}/τ, "
             f"sizes {first['sizes.distribution']} (scale {first['sizes.size']}, "
             f"index {first['sizes.index']}, cap {first['sizes.max_size']}).")
    return "; ".join(parts) + ". " + scale


def build_accuracy_difference(run_dirs: list[Path], out_stem: Path) -> Path:
    runs = collect_runs(_run_dirs(run_dirs))
    runs["dataset"] = runs["dataset"].map(lambda d: DATASET_LABELS.get(d, str(d).upper()))
    table = ad.accuracy_difference(runs, load_reference("ruan2021_table3_accuracy_difference"))
    caption = ad.default_caption(_synthetic_note(runs), int(runs["rounds"].max()),
                                 int(runs["num_devices"].max()))
    ad.write_tables(table, out_stem, caption)
    return out_stem


BUILDERS = {"accuracy_difference": build_accuracy_difference}


def build_table(name: str, run_dirs: list[Path], out_stem: Path) -> Path:
    if name not in BUILDERS:
        raise ValueError(f"table '{name}' is unknown; allowed: {', '.join(sorted(BUILDERS))}")
    return BUILDERS[name](run_dirs, out_stem)
