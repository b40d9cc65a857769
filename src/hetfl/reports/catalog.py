"""Where each table and figure belongs in the report: its paper, the paper's own name for it, and which of
its cells carry the verdicts a reader counts.

Keyed like the registries it describes (``hetfl.reports.tables.BUILDERS``, ``hetfl.reports.figures.FIGURES``);
a table or figure registered there but not here still appears in the report, under "Other tables" with its
registry name, and its verdicts are the CSV's whole ``verdict`` column. Pure data and string functions:
Snakemake imports this at parse time (workflow/rules/report.smk) and ``snakemake --report`` calls it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

RUAN = "Ruan et al. (2021), flexible device participation"
MA = "Ma et al. (2022), elastic federated learning (EFL)"
NOTES = "Lecture notes (seed 001): objective inconsistency and fairness"
FEDFOR = "Tian, Smith, Kira (2022), FedFOR"
ELASTICNET = "FedElasticNet (seed 004), communication cost"
OTHER = "Other tables"


@dataclass(frozen=True)
class Rows:
    """The rows of a tidy table whose `column` holds one of `values`: the cells a caption counts. A data
    class, not a lambda, so that a readings table can see which column picks its cells (reading_verdicts)."""

    column: str
    values: tuple[str, ...]

    def __call__(self, tidy: pd.DataFrame) -> pd.DataFrame:
        return tidy[tidy[self.column].isin(self.values)]


@dataclass(frozen=True)
class TableEntry:
    """paper: the report's category; label: the paper's name for the table; cells: the tidy CSV's rows whose
    verdicts the table's caption counts (None: every row)."""

    paper: str
    label: str
    cells: Callable[[pd.DataFrame], pd.DataFrame] | None = None
    #: the columns holding verdicts (most tables have one, ``verdict``)
    columns: tuple[str, ...] = ("verdict",)


@dataclass(frozen=True)
class FigureEntry:
    """label: the paper's name for the figure; what: the sentence the figure's title starts with;
    paper_data: what the paper's figure draws, where its caption says (the caption sets it beside the runs'
    own data sets: make reproduce draws stand-ins)."""

    label: str
    what: str
    paper_data: str = ""


TABLES: dict[str, TableEntry] = {
    # Table 3 counts its cells in percentage points (the CSV also holds the relative form)
    "accuracy_difference": TableEntry(RUAN, "Table 3", Rows("improvement", ("points",))),
    # Tables 4-5 and Figure 5 count their paired cells (event_tables.verdicts_of)
    "fast_reboot": TableEntry(RUAN, "Table 4", Rows("method", ("vanilla_minus_fast",))),
    "crossing_epochs": TableEntry(RUAN, "Table 5", Rows("method", ("include_vs_exclude",))),
    "multiple_arrivals": TableEntry(RUAN, "Figure 5", Rows("method", ("vanilla_minus_fast",))),
    # the caption counts both: each method's BMTA and its paired difference to FedAvg (Δ)
    "bmta": TableEntry(MA, "Table 2", columns=("verdict", "diff_verdict")),
    # the fairness measures of the bmta runs: the paper reports none (every verdict 'not comparable')
    "fairness": TableEntry(NOTES, "Fairness of per-device losses"),
    "efl_lambda": TableEntry(MA, "Figure 2 in numbers", columns=("bmta_verdict", "loss_verdict")),
    "objective_inconsistency": TableEntry(NOTES, "Objective inconsistency (quadratic)"),
    "fedfor_by_e": TableEntry(FEDFOR, "Tables 2-4"),
    "fedfor_concept_shift": TableEntry(FEDFOR, "Table 5"),
    "communication_cost": TableEntry(ELASTICNET, "Non-zeros and entropy"),
}

FIGURES: dict[str, FigureEntry] = {
    "scheme_curves": FigureEntry("Figure 3", "Ruan et al. Figure 3: test accuracy per scheme",
                                 "non-IID EMNIST at |T| = 1, 3, 5, 8"),
    "arrival_curves": FigureEntry("Figure 4 (left)", "Ruan et al. Figure 4 (left): accuracy after an arrival",
                                  "MNIST"),
    "departure_curves": FigureEntry("Figure 4 (right)",
                                    "Ruan et al. Figure 4 (right): loss after a departure",
                                    "SYNTHETIC"),
    "multiple_arrival_curves": FigureEntry("Figure 5", "Ruan et al. Figure 5: accuracy, staggered arrivals",
                                            "non-IID MNIST"),
    "efl_figure1": FigureEntry("Figure 1", "Ma et al. Figure 1: IID vs non-IID test accuracy",
                                 "VGG11 on CIFAR100 and ResNet50 on EMNIST"),
    "efl_figure2": FigureEntry("Figure 2", "Ma et al. Figure 2: EFL with λ = 0 vs the best λ"),
    "efl_figure3": FigureEntry("Figure 3", "Ma et al. Figure 3: test accuracy at a low participation rate",
                               "LSTMs on Sentiment140 and Shakespeare"),
    "objective_inconsistency": FigureEntry("Objective inconsistency",
                                           "Fixed points of FedAvg, FedNova, SCAFFOLD vs the closed forms"),
    "communication_nonzeros": FigureEntry("Non-zeros per round", "Non-zero entries clients send per round"),
}


#: the report's subcategory of the split charts (hetfl split-figure), under the paper of the experiment's
#: table
SPLITS = "Data splits"
#: datasets whose samples carry no class, so a split has no label distribution to draw (the quadratic test
#: bed: each client is a curvature and an optimum)
UNLABELLED_DATASETS = frozenset({"quadratic"})


def has_class_labels(dataset: str) -> bool:
    """Whether a dataset's splits have a client × class label distribution (a split chart)."""
    return dataset not in UNLABELLED_DATASETS


def table_entry(table: str) -> TableEntry:
    return TABLES.get(table, TableEntry(OTHER, table))


def category(table: str) -> str:
    """The report category of a table and of everything drawn from its runs: the paper."""
    return table_entry(table).paper


def subcategory(table: str) -> str:
    """The report subcategory: the paper's name for the table and hetfl's
    (``Table 3: accuracy_difference``)."""
    label = table_entry(table).label
    return f"{label}: {table}" if label != table else table


def figure_label(figure: str) -> str:
    entry = FIGURES.get(figure)
    return f"{entry.label} ({figure})" if entry else figure


def figure_title(figure: str, seeds: list[int]) -> str:
    """The figure's own caption line: what it shows and how the band is made, with the seed count."""
    what = FIGURES[figure].what if figure in FIGURES else figure.replace("_", " ")
    counts = sorted(set(seeds))
    n = f"{counts[0]}" if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
    return f"{what}; mean of {n} seed(s), band: 95 % t-CI"


def _verdicts(entry: TableEntry, cells_of: Callable[[pd.DataFrame], pd.DataFrame] | None,
              tidy: pd.DataFrame) -> list[str] | None:
    columns = [c for c in entry.columns if c in tidy]
    if not columns:
        return None
    cells = cells_of(tidy) if cells_of is not None else tidy
    return [str(v) for c in columns for v in cells[c].dropna() if str(v).strip() not in ("", "—")]


def counted_verdicts(table: str, tidy: pd.DataFrame) -> list[str] | None:
    """The verdicts of the cells the table's caption counts ('—' and empty cells, e.g. a baseline's, are not
    verdicts); None for a table without verdicts."""
    entry = table_entry(table)
    return _verdicts(entry, entry.cells, tidy)


def reading_verdicts(table: str, tidy: pd.DataFrame) -> dict[str, list[str]] | None:
    """A readings table's counted verdicts per reading (its ``reading`` column, in the CSV's order), as its
    own caption counts them; None for a table without verdicts.

    Each reading counts the cells the table counts (counted_verdicts), except that a reading setting the
    column those cells are picked by counts the cells of its value: Table 3 counts its points cells, and
    under improvement=relative its relative cells.
    """
    if "reading" not in tidy:
        raise ValueError(f"the readings table of {table} has no 'reading' column; allowed: a CSV that "
                         "`hetfl table --readings` wrote")
    entry = table_entry(table)
    out: dict[str, list[str]] = {}
    for reading, group in tidy.groupby("reading", sort=False):
        key, _, value = str(reading).partition("=")
        cells_of = entry.cells
        if isinstance(cells_of, Rows) and key == cells_of.column:
            cells_of = Rows(key, (value,))
        verdicts = _verdicts(entry, cells_of, group)
        if verdicts is None:
            return None
        out[str(reading)] = verdicts
    return out


def verdict_summary(table: str, csv: str | Path) -> str:
    """One line for the report's listing and its landing page: 'Table 3 · 0 agrees, 1 same direction, ...'."""
    import pandas as pd  # here: Snakemake imports this module at every start

    from hetfl.reports.verdicts import counts_text

    verdicts = counted_verdicts(table, pd.read_csv(csv))
    counts = "no verdicts (paper values shown beside)" if verdicts is None else counts_text(verdicts)
    return f"{table_entry(table).label} · {counts}"
