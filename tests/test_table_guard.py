"""The table builder's guard (hetfl.reports.tables.check_runs): `hetfl table NAME` over run directories
gathered by hand refuses what validation refuses in a config (config.ONE_SOURCE_PER_LABEL,
config.TABLE_CELLS), by the same keys: two sources of one paper label that the table would pair, and two
runs of one seed in one cell, which it would merge or pair twice."""

import copy
import json
from pathlib import Path

import pandas as pd
import pytest
from test_source_labels import CASES, _fake_runs, _renamed, _small  # tests/ is on the path (conftest)

from hetfl.cli import main
from hetfl.config import TABLE_CELLS, expand_runs, load_config, validate_config
from hetfl.reports.tables import BUILDERS, READINGS_BUILDERS, SOURCES, build_table, check_specs


def _refused(table: str, dirs: list[Path], out: Path) -> str:
    with pytest.raises(ValueError) as info:
        build_table(table, dirs, out)
    return str(info.value)


def _where(dirs: list[Path], experiment: str) -> list[str]:
    return [str(d) for d in dirs if d.parent.name == experiment]


@pytest.mark.parametrize("table", CASES)
def test_a_table_of_runs_gathered_by_hand_refuses_two_sources_of_one_label(table, tmp_path):
    """Validation refuses mnist5k's runs beside mnist's under one setting name (test_source_labels), but
    `hetfl table` by hand over both experiments' directories paired them seed by seed as one data set's
    (fairness's Δ vs FedAvg across the sources, Table 3's B vs A). The builder refuses them before writing
    anything, naming the table, a run of each source, both sources, the label and the setting."""
    first, second = CASES[table]
    dirs = _fake_runs(tmp_path / "results", {"first": first, "second": second})
    text = _refused(table, dirs, tmp_path / "out" / table)
    (setting,) = first["settings"]
    assert text.startswith(f"table {table}: runs "), text
    assert any(d in text for d in _where(dirs, "first")) and any(d in text for d in _where(dirs, "second"))
    assert (f"are both the paper's MNIST under setting {setting}, and the table's cells group runs by that "
            "label and setting") in text, text
    assert f"(dataset \"{first['dataset']}\")" in text and f"(dataset \"{second['dataset']}\")" in text, text
    assert ("allowed: runs of one source per paper label and setting (a table from each source's runs, or "
            "the other source under a setting name of its own)") in text, text
    assert not (tmp_path / "out").exists()
    # under a setting name of its own the second source is a row of its own, and the table builds
    apart = _fake_runs(tmp_path / "apart", {"first": first, "second": _renamed(second)})
    build_table(table, apart, tmp_path / "apart_out" / table)
    assert (tmp_path / "apart_out" / f"{table}.md").is_file()


@pytest.mark.parametrize("table", CASES)
def test_a_table_of_runs_gathered_by_hand_refuses_two_runs_of_one_seed_in_one_cell(table, tmp_path):
    """Two experiments that differ in a key no column of the table shows (here eta0) put each seed into one
    cell twice: efl_lambda merged them silently, the others refused deep in the pairing in words of their
    own. The builder refuses them, naming the table, both runs, the cell and what differs."""
    first, _ = CASES[table]
    again = _small(first, eta0=0.123)
    dirs = _fake_runs(tmp_path / "results", {"first": first, "again": again})
    text = _refused(table, dirs, tmp_path / "out" / table)
    assert text.startswith(f"table {table}: runs "), text
    assert any(d in text for d in _where(dirs, "first")) and any(d in text for d in _where(dirs, "again"))
    assert "into one cell (" in text and "seed 0)" in text, text
    eta0 = next(expand_runs(validate_config({"experiments": {"first": first}}))).eta0
    assert f"the two differ in eta0 ({json.dumps(eta0)} in the first, 0.123 in the second)" in text, text
    assert "allowed: one run per seed and cell" in text, text
    assert not (tmp_path / "out").exists()


def test_efl_lambda_reads_only_efl_runs_so_the_guard_does_too(tmp_path):
    """efl_lambda reads the EFL runs alone (config.TABLE_CELLS' `reads`, efl_lambda.with_values): bmta's
    FedAvg runs of the same data set, setting and seed gathered with them are not a clash."""
    first, _ = CASES["efl_lambda"]
    fedavg = _small(first, table="bmta", algorithms=["fedavg"], algorithm_params={}, eta0=0.123)
    dirs = _fake_runs(tmp_path, {"first": first, "fedavg": fedavg})
    build_table("efl_lambda", dirs, tmp_path / "out" / "efl_lambda")


def test_a_ruan_tables_readings_variants_gathered_by_hand_are_not_a_clash(tmp_path):
    """A variant of the readings axis shares its own run's cell; the Ruan tables read the experiments' own
    runs (ruan.own_readings) and the readings table pairs each variant with its own run (ruan.runs_under),
    so a by-hand glob over both is built, not refused."""
    first, _ = CASES["accuracy_difference"]
    exp = {**copy.deepcopy(first), "readings": {"eta0": [0.123]}}
    dirs = []
    for spec in expand_runs(validate_config({"experiments": {"t3": exp}})):
        d = tmp_path / "results" / spec.experiment / spec.run
        d.mkdir(parents=True)
        (d / "run.json").write_text(json.dumps({"spec": spec.to_dict(), "status": "ok"}))
        pd.DataFrame({"round": [1, 2], "metric": "test_accuracy", "value": [0.1, 0.5]}).to_parquet(
            d / "metrics.parquet")
        dirs.append(d)
    assert any("__" in d.name for d in dirs)  # the variants are among them
    build_table("accuracy_difference", dirs, tmp_path / "out" / "t3")
    build_table("accuracy_difference", dirs, tmp_path / "out" / "t3_readings", readings=True)


def test_hetfl_table_by_hand_says_what_it_refuses(tmp_path, capsys):
    """The CLI path a user takes: `hetfl table fairness RUN...` exits non-zero with the guard's message."""
    first, second = CASES["fairness"]
    dirs = _fake_runs(tmp_path / "results", {"first": first, "second": second})
    rc = main(["table", "fairness", "--out", str(tmp_path / "out" / "fairness"), *map(str, dirs)])
    err = capsys.readouterr().err
    assert rc != 0 and "table fairness: runs " in err and "are both the paper's MNIST" in err, err


def test_every_table_has_the_cells_the_guard_checks():
    """The guard checks a table by its TABLE_CELLS entry: a builder without one would go unchecked."""
    assert set(BUILDERS) == set(TABLE_CELLS)


CONFIGS = sorted((Path(__file__).resolve().parents[1] / "workflow/config").rglob("*.yaml"))


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_the_guard_passes_every_table_the_workflow_builds_from_a_shipped_config(path):
    """What validation lets through, the guard lets through: each table's runs as the workflow gives them
    (workflow/rules/common.smk, runs_of_table: the table's and its SOURCES' runs; the main table its
    experiments' own, the readings table every run), each spec as its run.json holds it (JSON)."""
    runs = list(expand_runs(load_config(path)))
    tables = {s.table for s in runs} | {t for t, src in SOURCES.items() if any(s.table == src for s in runs)}
    for table in sorted(tables & set(BUILDERS)):  # table "none": runs that feed no table
        read = [s for s in runs if s.table in (table, SOURCES.get(table))]
        specs = {f"results/{s.experiment}/{s.run}": json.loads(json.dumps(s.to_dict())) for s in read}
        check_specs(table, {where: spec for where, spec in specs.items() if not spec["reading"]})
        if table in READINGS_BUILDERS and any(s.reading for s in read):
            check_specs(table, specs)
