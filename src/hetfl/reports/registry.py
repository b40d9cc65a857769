"""The table and figure registries: each table's builder and each figure's drawing function, named
("module:function"), not imported, with what the workflow needs to know of them.

Snakemake reads these at every start (workflow/rules/common.smk), a cluster job's included, and
hetfl.fingerprint asks them which modules a job runs (REGISTRIES). They lived beside the builders, in
hetfl.reports.tables and hetfl.reports.figures, which import pandas: 0.3-0.4 s of every start. Those modules,
the table and figure jobs' entries, import them from here, so this module imports nothing but the
standard library and hetfl.reports.references' paths.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from hetfl.reports.references import package_file

#: table -> its builder, "module:function" (run_dirs, out_stem) -> out_stem. Named, not imported: a
#: builder's module is imported when its table is built (hetfl.reports.tables.builder), so `hetfl table
#: NAME` runs the code of NAME's builder and hetfl.reports.tables only, which is what its rules' code
#: fingerprint hashes (table_job_modules)
BUILDERS: dict[str, str] = {
    "accuracy_difference": "hetfl.reports.ruan:build_accuracy_difference",
    "fast_reboot": "hetfl.reports.ruan:build_fast_reboot",
    "crossing_epochs": "hetfl.reports.ruan:build_crossing_epochs",
    "bmta": "hetfl.reports.bmta:build",
    "fairness": "hetfl.reports.fairness:build",
    "efl_lambda": "hetfl.reports.efl_lambda:build",
    "objective_inconsistency": "hetfl.reports.objective_inconsistency:build",
    "fedfor_by_e": "hetfl.reports.fedfor:build",
    "communication_cost": "hetfl.reports.communication_cost:build",
    "fedfor_concept_shift": "hetfl.reports.fedfor:build_concept_shift",
    "multiple_arrivals": "hetfl.reports.multiple_arrivals:build_multiple_arrivals",
}
#: tables built from the runs of another table as well as their own: the workflow builds `fairness`
#: whenever the config has `bmta` runs (workflow/rules/common.smk), from those runs
SOURCES = {"fairness": "bmta"}
#: tables with a readings axis: <table>_readings.{md,csv} (hetfl table NAME --readings), each builder
#: (table, run_dirs, out_stem) -> out_stem named as BUILDERS' are (Ruan's: the tables of ruan.READING_COLUMNS)
READINGS_BUILDERS: dict[str, str] = {
    **{name: "hetfl.reports.ruan:build_readings" for name in ("accuracy_difference", "fast_reboot",
                                                              "crossing_epochs")},
    "fedfor_by_e": "hetfl.reports.fedfor:build_readings",
    "fedfor_concept_shift": "hetfl.reports.fedfor:build_readings",
}
#: table -> the reference tables (reports/references/<name>.csv) its builder and its readings table read.
#: A table's rules rerun when one of these changes and for no other (workflow/rules/tables.smk, the
#: `references` param: every table held every CSV, and an edit of one rebuilt them all); build_table
#: refuses the read of any other (references.reading_only), which an edit would leave stale.
REFERENCES: dict[str, tuple[str, ...]] = {
    "accuracy_difference": ("ruan2021_table3_accuracy_difference",),
    "fast_reboot": ("ruan2021_table4_fast_reboot",), "crossing_epochs": ("ruan2021_table5_crossing_epochs",),
    "bmta": ("ma2022_efl_table2_bmta",), "fairness": (), "efl_lambda": (), "objective_inconsistency": (),
    "fedfor_by_e": ("tian2022_fedfor_table2_imbalanced_cifar10", "tian2022_fedfor_table3_domainnet",
                    "tian2022_fedfor_table4_digits"),  # fedfor.PAPER_TABLES': the one its runs reproduce
    "communication_cost": (), "fedfor_concept_shift": ("tian2022_fedfor_table5_concept_shift",),
    "multiple_arrivals": ()}


def table_job_modules(table: str | None = None) -> tuple[str, ...]:
    """The modules of `table`'s builders (its table's and its readings table's; every table's with None):
    what building it imports beyond hetfl.reports.tables, whose import closures its rules' code fingerprint
    adds to that module's (hetfl.fingerprint.REGISTRIES)."""
    if table is not None and table not in BUILDERS:
        raise ValueError(f"table '{table}' is unknown; allowed: {', '.join(sorted(BUILDERS))}")
    names = BUILDERS if table is None else (table,)
    targets = [BUILDERS[t] for t in names] + [READINGS_BUILDERS[t] for t in names if t in READINGS_BUILDERS]
    return tuple(sorted({t.partition(":")[0] for t in targets}))


def reference_files(table: str) -> tuple[str, ...]:
    """The files of REFERENCES[table], relative to the hetfl package (hetfl.fingerprint.data_fingerprint)."""
    return tuple(package_file(name) for name in REFERENCES[table])


#: figure name -> (the table whose runs draw it, its drawing function (runs, out), "module:function"). The
#: workflow draws a figure whenever its table is in the config (workflow/rules/common.smk); `hetfl figure`
#: takes these names; hetfl.reports.catalog.FIGURES names the paper's figure and the title's first
#: sentence. A drawing function is named, not imported: its module is imported when the figure is drawn
#: (hetfl.reports.figures.drawing), so a figure's code fingerprint is hetfl.reports.figures' closure and
#: its drawing module's (figure_job_modules): an edit of communication_cost.py redraws
#: communication_nonzeros, not every figure.
FIGURES: dict[str, tuple[str, str]] = {
    "scheme_curves": ("accuracy_difference", "hetfl.reports.figures:_scheme_figure"),
    "arrival_curves": ("fast_reboot", "hetfl.reports.figures:arrival_curves"),
    "departure_curves": ("crossing_epochs", "hetfl.reports.figures:departure_curves"),
    "multiple_arrival_curves": ("multiple_arrivals", "hetfl.reports.figures:multiple_arrival_curves"),
    # Ma et al. Figure 1: IID vs non-IID curves; Figure 2: λ = 0 vs best λ; Figure 3: low participation
    "efl_figure1": ("bmta", "hetfl.reports.efl_figures:figure1"),
    "efl_figure2": ("efl_lambda", "hetfl.reports.efl_figures:figure2"),
    "efl_figure3": ("bmta", "hetfl.reports.efl_figures:figure3"),
    "objective_inconsistency": ("objective_inconsistency", "hetfl.reports.objective_inconsistency:draw"),
    "communication_nonzeros": ("communication_cost", "hetfl.reports.communication_cost:draw_nonzeros"),
}


def figure_job_modules(name: str | None = None) -> tuple[str, ...]:
    """The module of figure `name`'s drawing function (every figure's with None): what drawing it imports
    beyond hetfl.reports.figures, whose import closure its rule's code fingerprint adds to that module's
    (hetfl.fingerprint.REGISTRIES)."""
    if name is not None and name not in FIGURES:
        raise ValueError(f"figure '{name}' is unknown; allowed: {', '.join(FIGURES)}")
    names = FIGURES if name is None else (name,)
    return tuple(sorted({FIGURES[n][1].partition(":")[0] for n in names}))


#: figures drawn only where the config's runs of their table can draw them (figure -> predicate over those
#: runs' RunSpecs); every other figure is drawn whenever its table is run
DRAWN_WHEN: dict[str, Callable[[Iterable[Any]], bool]] = {
    "efl_figure3": lambda specs: any(s.num_traces > 1 for s in specs),
}
