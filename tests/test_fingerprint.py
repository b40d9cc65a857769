"""Code fingerprints (hetfl.fingerprint): which files a job kind's output depends on."""

import json
import shutil
from pathlib import Path

import pytest

from hetfl import fingerprint as fp


def test_imports_inside_functions_are_followed():
    """build_from_source imports the partitioner inside the function: a split job depends on it."""
    source = ("import os\nfrom hetfl.data import build\n"
              "def f():\n    from hetfl.data.partition import partition\n")
    assert fp._imports_in(source) == frozenset({"hetfl.data", "hetfl.data.build", "hetfl.data.partition"})
    split = {p.relative_to(fp.PACKAGE).as_posix() for p in fp.closure(fp.ENTRIES["split"])}
    assert {"data/build.py", "data/partition.py", "data/sizes.py", "data/synthetic.py",
            "data/sources.py"} <= split
    train = {p.relative_to(fp.PACKAGE).as_posix() for p in fp.closure(fp.ENTRIES["train"])}
    assert {"pipeline.py", "engine/runner.py", "data/partition.py"} <= train


@pytest.fixture
def package_copy(tmp_path, monkeypatch):
    """hetfl's source tree copied, with the fingerprint module pointed at it and its caches empty."""
    copy = tmp_path / "hetfl"
    shutil.copytree(fp.PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setattr(fp, "PACKAGE", copy)
    for cached in (fp.closure, fp.fingerprint, fp._imports_in, fp.data_fingerprint):
        cached.cache_clear()
    yield copy
    for cached in (fp.closure, fp.fingerprint, fp._imports_in, fp.data_fingerprint):
        cached.cache_clear()


def test_an_edit_changes_exactly_the_kinds_that_depend_on_it(package_copy):
    before = {kind: fp.fingerprint(kind) for kind in fp.ENTRIES}
    with open(package_copy / "data/partition.py", "a") as f:
        f.write("\n_EDITED = True  # an edit of the code (a comment alone changes no fingerprint)\n")
    fp.closure.cache_clear()
    fp.fingerprint.cache_clear()
    after = {kind: fp.fingerprint(kind) for kind in fp.ENTRIES}
    assert after["split"] != before["split"] and after["train"] != before["train"]
    assert after["trace"] == before["trace"]  # the traces never import the partitioner



def test_a_comment_or_blank_line_edit_reruns_nothing_a_code_or_docstring_edit_does(package_copy):
    """A fingerprint hashes a Python file's code_text: an edit of a comment or of blank lines changed every
    training fingerprint whose closure held the file, and so retrained the grid (hours at paper scale)
    for no change of a number. An edit of code, or of a docstring (an argparse description or a caption
    may print one), still reruns."""
    before = {kind: fp.fingerprint(kind) for kind in fp.ENTRIES}
    path = package_copy / "engine/runner.py"
    text = path.read_text()
    first = text.index("\ndef ")
    for edited in (text + "\n# a note on the round loop\n\n\n",  # a comment alone, blank lines
                   text.replace("\ndef ", "\n# why this function\n\ndef ", 1),
                   text[:first] + "  # a trailing comment" + text[first:]):
        path.write_text(edited)
        fp.closure.cache_clear()
        fp.fingerprint.cache_clear()
        assert {kind: fp.fingerprint(kind) for kind in fp.ENTRIES} == before
    for edited in (text + "\n_EDITED = True\n", text.replace('"""', '"""Edited. ', 1)):
        path.write_text(edited)
        fp.closure.cache_clear()
        fp.fingerprint.cache_clear()
        assert fp.fingerprint("train") != before["train"]


def test_code_text_drops_comments_and_blank_lines_outside_strings_only():
    source = (b'"""Doc.\n\n# in the docstring\n"""\n# alone\n\nx = "#not"  # trailing\n'
              b'def f():\n    s = """a\n# in a string\n\nb"""\n    return s  # c\n')
    assert fp.code_text(source) == (b'"""Doc.\n\n# in the docstring\n"""\nx = "#not"\n'
                                    b'def f():\n    s = """a\n# in a string\n\nb"""\n    return s\n')
    assert fp.code_text(b"x = (1,\n") == b"x = (1,\n"  # does not tokenize: hashed as it is


def test_an_edit_of_the_fingerprint_module_itself_reruns_no_job(package_copy):
    """fingerprint.py decides what reruns and what run.json says of the code; it computes no number.
    Being in the training closure (pipeline imports it), any edit of it retrained every run; its own
    changes reach a job's fingerprint only through the files it hashes."""
    before = {kind: fp.fingerprint(kind) for kind in fp.ENTRIES}
    with open(package_copy / "fingerprint.py", "a") as f:
        f.write("\n_EDITED = True  # an edit of the code (a comment alone changes no fingerprint)\n")
    fp.closure.cache_clear()
    fp.fingerprint.cache_clear()
    assert {kind: fp.fingerprint(kind) for kind in fp.ENTRIES} == before
    assert "pipeline.py" in {p.name for p in fp.closure(fp.ENTRIES["train"])}

def test_a_reference_csv_reruns_the_tables_that_read_it_only(package_copy):
    """Every table's and figure's code fingerprint held every reference CSV, so an edit of Table 4's rebuilt
    every table and figure (and each summary run mirroring one). A table rule's `references` param is the
    hash of the CSVs its builder reads (tables.REFERENCES); no figure reads one."""
    from hetfl.reports import tables

    def references():
        fp.data_fingerprint.cache_clear()
        return {t: fp.data_fingerprint(tables.reference_files(t)) for t in tables.BUILDERS}

    before = {kind: fp.fingerprint(kind) for kind in ("table", "figure", "train", "trace")}
    refs = references()
    ref = package_copy / "reports/references/ruan2021_table4_fast_reboot.csv"
    ref.write_text(ref.read_text() + "\n")
    fp.fingerprint.cache_clear()
    after = {kind: fp.fingerprint(kind) for kind in before}
    assert after == before
    changed = {t for t, h in references().items() if h != refs[t]}
    assert changed == {"fast_reboot"}
    assert set(tables.REFERENCES) == set(tables.BUILDERS)
    rules = (Path(__file__).resolve().parents[1] / "workflow/rules/tables.smk").read_text()
    for rule in ("rule table:", "rule table_readings:"):  # both table rules pass it
        assert "references=table_references," in rules.split(rule)[1].split("\nrule ")[0], rule


def test_the_table_registries_name_what_the_builders_modules_hold():
    """tables.py imports no builder, so it names by hand what their modules define: the references
    fedfor_by_e reads (fedfor.PAPER_TABLES') and the Ruan tables with a readings table
    (ruan.READING_COLUMNS); and every builder it names exists."""
    from hetfl.reports import fedfor, ruan, tables

    assert tables.REFERENCES["fedfor_by_e"] == tuple(name for name, _, _ in fedfor.PAPER_TABLES.values())
    assert {t for t, target in tables.READINGS_BUILDERS.items()
            if target.startswith("hetfl.reports.ruan:")} == set(ruan.READING_COLUMNS)
    for target in [*tables.BUILDERS.values(), *tables.READINGS_BUILDERS.values()]:
        assert callable(tables.builder(target)), target


def test_an_edit_of_one_tables_builder_rebuilds_that_table_only(package_copy):
    """hetfl.reports.tables imported every builder and figures every drawing module, so the table, figure
    and report kinds shared one closure of 49 files: an edit of communication_cost.py rebuilt every table,
    figure and report page. A table's code is now the closure of tables.py and its builders' modules
    (tables.job_modules, which the registry names), a figure's that of figures.py and its drawing
    function's module, and each rule passes its own (workflow/rules/tables.smk)."""
    from hetfl.reports import figures, tables

    def fingerprints():
        fp.closure.cache_clear()
        fp.fingerprint.cache_clear()
        return ({t: fp.fingerprint("table", job=t) for t in tables.BUILDERS},
                {f: fp.fingerprint("figure", job=f) for f in figures.FIGURES},
                {kind: fp.fingerprint(kind) for kind in fp.ENTRIES})

    ruan = {"accuracy_difference", "fast_reboot", "crossing_epochs"}
    fedfor = {"fedfor_by_e", "fedfor_concept_shift"}  # they read ruan's own_readings and runs_under
    edits = {  # file -> (the tables, the figures) it rebuilds
        "reports/communication_cost.py": ({"communication_cost"}, {"communication_nonzeros"}),
        "reports/objective_inconsistency.py": ({"objective_inconsistency"}, {"objective_inconsistency"}),
        "reports/multiple_arrivals.py": ({"multiple_arrivals"}, set()),
        "reports/fedfor.py": (fedfor, set()),
        "reports/ruan.py": (ruan | fedfor, set()),
        "reports/fairness.py": ({"fairness", "efl_lambda"}, set(figures.FIGURES)),  # figures: below
        "reports/tables.py": (set(tables.BUILDERS), set(figures.FIGURES)),
    }
    before = fingerprints()
    for rel, (rebuilt, redrawn) in edits.items():
        with open(package_copy / rel, "a") as f:
            f.write("\n_EDITED = True  # an edit of the code (a comment alone changes no fingerprint)\n")
        after = fingerprints()
        assert {t for t, h in after[0].items() if h != before[0][t]} == rebuilt, rel
        assert {f for f, h in after[1].items() if h != before[1][f]} == redrawn, rel
        # a kind's fingerprint without a job is every job's code: it changes with any of theirs
        assert (after[2]["table"] != before[2]["table"]) == bool(rebuilt), rel
        assert (after[2]["figure"] != before[2]["figure"]) == bool(redrawn), rel
        if rel not in ("reports/fairness.py", "reports/tables.py"):  # no report page's code either
            assert after[2]["report"] == before[2]["report"], rel
        before = after
    # every figure's caption asks the EFL figures which runs they draw (figures.drawn_runs,
    # report_pages.hidden_lines_note), so every figure's closure holds efl_figures.py and what it imports
    assert package_copy / "reports/fairness.py" in fp.closure(fp.job_entries("figure", "scheme_curves"))
    rules = (Path(__file__).resolve().parents[1] / "workflow/rules/tables.smk").read_text()
    for rule, param in (("rule table:", 'fingerprint("table", job=wc.table)'),
                        ("rule table_readings:", 'fingerprint("table", job=wc.table)'),
                        ("rule figure:", 'fingerprint("figure", job=wc.figure)')):
        assert f"code=lambda wc: {param}," in rules.split(rule)[1].split("\nrule ")[0], rule


def test_a_job_is_named_where_its_kind_has_a_registry():
    with pytest.raises(ValueError, match="table 'nope' is unknown; allowed: accuracy_difference, bmta"):
        fp.fingerprint("table", job="nope")
    with pytest.raises(ValueError, match="figure 'nope' is unknown; allowed: scheme_curves"):
        fp.fingerprint("figure", job="nope")
    with pytest.raises(ValueError, match="job kind 'train' has no jobs by name"):
        fp.fingerprint("train", job="bmta")
    assert set(fp.REGISTRIES) == {"table", "figure"}


def _reads_table4(*args):
    """A table builder or a figure's drawing function that reads Table 4's reference."""
    from hetfl.reports import references

    return references.load_reference("ruan2021_table4_fast_reboot")


def test_a_table_reading_a_reference_it_does_not_declare_is_refused(monkeypatch, tmp_path):
    """tables.REFERENCES is what a table's rule reruns for: a builder that read another reference would
    be left stale by an edit of it, so build_table refuses the read."""
    from hetfl.reports import references, tables

    monkeypatch.setitem(tables.BUILDERS, "efl_lambda", f"{__name__}:_reads_table4")
    with pytest.raises(RuntimeError, match="ruan2021_table4_fast_reboot.*REFERENCES"):
        tables.build_table("efl_lambda", [], tmp_path / "t")
    monkeypatch.setitem(tables.REFERENCES, "efl_lambda", ("ruan2021_table4_fast_reboot",))
    assert len(tables.build_table("efl_lambda", [], tmp_path / "t"))
    assert len(references.load_reference("ruan2021_table3_accuracy_difference"))  # outside a table build


def test_a_figure_reading_a_reference_is_refused(monkeypatch, tmp_path):
    """No figure reads a paper reference, so the figure rule hashes none: build_figure refuses a read."""
    from hetfl.reports import figures

    monkeypatch.setitem(figures.FIGURES, "scheme_curves",
                        (figures.FIGURES["scheme_curves"][0], f"{__name__}:_reads_table4"))
    monkeypatch.setattr("hetfl.reports.tables.load_event_runs", lambda dirs: None)
    monkeypatch.setattr("hetfl.reports.report_pages.write_figure_caption", lambda *args: None)
    with pytest.raises(RuntimeError, match="figure 'scheme_curves' reads .*ruan2021_table4_fast_reboot"):
        figures.build_figure("scheme_curves", [], tmp_path / "f")


def test_the_trace_fits_csv_is_in_the_trace_fingerprint(package_copy):
    """data.traces draws traces from the (mu, sigma) of ruan2021_table2_fits.csv: an edit of it must rerun
    the trace jobs (Snakemake's code param), as an edit of Table 2's moments does."""
    before = fp.fingerprint("trace")
    fits = package_copy / "reports/references/ruan2021_table2_fits.csv"
    fits.write_text(fits.read_text().replace("0.15603795992429048", "0.25"))
    fp.fingerprint.cache_clear()
    assert fp.fingerprint("trace") != before


def test_every_package_file_an_entry_module_names_is_in_its_data():
    """A package file named by a string literal in a job kind's entry module (reports/references/*.csv)
    is one of that kind's DATA files."""
    import re

    for kind, entries in fp.ENTRIES.items():
        data = {p for pattern in fp.DATA.get(kind, ()) for p in fp.PACKAGE.glob(pattern)}
        for path in filter(None, map(fp.module_file, entries)):
            for name in re.findall(r"[\"'](reports/references/[A-Za-z0-9_.-]+\.csv)[\"']", path.read_text()):
                assert fp.PACKAGE / name in data, f"{kind}: {path.name} reads {name}, not in DATA[{kind!r}]"


def test_a_plugins_algorithm_file_is_in_the_training_fingerprint(tmp_path, monkeypatch):
    """An algorithm registered by a package outside hetfl: its module's file is hashed too, so editing it
    reruns the training (it was left out: "Nothing to be done" with the old results in place)."""
    pkg = tmp_path / "fp_demo_plugin"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "algo.py").write_text("STEP = 0.5\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(fp, "algorithm_modules", lambda algorithms: ("fp_demo_plugin.algo",))
    fp.fingerprint.cache_clear()
    try:
        assert fp.outside_files(["fp_demo_plugin.algo", "hetfl.pipeline"]) == {
            "fp_demo_plugin": pkg / "__init__.py", "fp_demo_plugin.algo": pkg / "algo.py"}
        before = fp.fingerprint("train", ("demo",))
        (pkg / "algo.py").write_text("STEP = 0.25\n")
        fp.fingerprint.cache_clear()
        assert fp.fingerprint("train", ("demo",)) != before
    finally:
        fp.fingerprint.cache_clear()


def test_the_modules_a_plugins_algorithm_imports_from_its_own_package_are_in_the_fingerprint(
        tmp_path, monkeypatch):
    """A plugin's algorithm module that imports its update from a helper module of its own package (an
    audit doubled FedAdam's server step in hetfl_fedadam/ops.py): only the target's own file was hashed, so
    every run stayed "Nothing to be done" and even a forced rerun restored the old checkpoints. The
    package's modules it imports, absolutely or relatively, and the package's __init__ are hashed now;
    other packages' (numpy) are not."""
    pkg = tmp_path / "fp_demo_plugin2"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "algo.py").write_text("import numpy\nfrom fp_demo_plugin2.ops import step\n"
                                 "def f():\n    from .sub import util\n")
    (pkg / "ops.py").write_text("def step(w):\n    return 0.5 * w\n")
    (pkg / "sub" / "util.py").write_text("from ..ops import step\nSCALE = 1\n")
    (pkg / "unused.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(fp, "algorithm_modules", lambda algorithms: ("fp_demo_plugin2.algo",))
    fp.fingerprint.cache_clear()
    try:
        assert fp.outside_files(["fp_demo_plugin2.algo"]) == {
            "fp_demo_plugin2": pkg / "__init__.py", "fp_demo_plugin2.algo": pkg / "algo.py",
            "fp_demo_plugin2.ops": pkg / "ops.py", "fp_demo_plugin2.sub": pkg / "sub" / "__init__.py",
            "fp_demo_plugin2.sub.util": pkg / "sub" / "util.py"}
        seen = fp.fingerprint("train", ("demo",))
        for path, text in ((pkg / "ops.py", "def step(w):\n    return w\n"),
                           (pkg / "sub" / "util.py", "SCALE = 2\n")):
            path.write_text(text)
            fp.fingerprint.cache_clear()
            assert fp.fingerprint("train", ("demo",)) != seen, path.name
            seen = fp.fingerprint("train", ("demo",))
        (pkg / "unused.py").write_text("X = 2\n")  # a module the algorithm does not import
        fp.fingerprint.cache_clear()
        assert fp.fingerprint("train", ("demo",)) == seen
    finally:
        fp.fingerprint.cache_clear()


def test_a_node_without_git_records_the_workflows_commit(monkeypatch):
    """run.json recorded commit "unknown" on cluster nodes without git; the workflow now hands its
    checkout's state to jobs in GIT_ENV, which git_state reads only where git cannot answer."""
    here = fp.git_environ()
    commit, dirty = fp.git_state()
    assert here == {"HETFL_GIT_COMMIT": commit, "HETFL_GIT_DIRTY": str(dirty).lower()}

    def no_git(*args, **kwargs):
        raise FileNotFoundError("git")

    monkeypatch.setattr(fp.subprocess, "run", no_git)
    assert fp.git_state({}) == ("unknown", None)
    assert fp.git_state(here) == (commit, dirty)
    assert fp.git_state({"HETFL_GIT_COMMIT": "abc", "HETFL_GIT_DIRTY": "true"}) == ("abc", True)
    assert fp.git_environ() == {}



def test_local_modules_outside_a_plugins_package_are_in_the_fingerprint(tmp_path, monkeypatch):
    """A plugin whose algorithm imports a helper from a sibling module or package on sys.path (not installed,
    not the plugin's own package): only the plugin's own top-level package was followed, so an edit of
    the helper left every run in place. Every module that is neither the standard library nor an installed
    distribution is followed now, transitively."""
    (tmp_path / "fp_demo_plugin3").mkdir()
    (tmp_path / "fp_demo_plugin3" / "__init__.py").write_text("")
    (tmp_path / "fp_demo_plugin3" / "algo.py").write_text("import json\nfrom fp_demo_helpers import scale\n")
    (tmp_path / "fp_demo_helpers.py").write_text("import fp_demo_deep.inner\nscale = 0.5\n")
    (tmp_path / "fp_demo_deep").mkdir()
    (tmp_path / "fp_demo_deep" / "__init__.py").write_text("")
    (tmp_path / "fp_demo_deep" / "inner.py").write_text("K = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(fp, "algorithm_modules", lambda algorithms: ("fp_demo_plugin3.algo",))
    fp.fingerprint.cache_clear()
    try:
        assert fp.outside_files(["fp_demo_plugin3.algo"]) == {
            "fp_demo_plugin3": tmp_path / "fp_demo_plugin3" / "__init__.py",
            "fp_demo_plugin3.algo": tmp_path / "fp_demo_plugin3" / "algo.py",
            "fp_demo_helpers": tmp_path / "fp_demo_helpers.py",
            "fp_demo_deep": tmp_path / "fp_demo_deep" / "__init__.py",
            "fp_demo_deep.inner": tmp_path / "fp_demo_deep" / "inner.py"}
        seen = fp.fingerprint("train", ("demo",))
        for path, text in ((tmp_path / "fp_demo_helpers.py", "import fp_demo_deep.inner\nscale = 0.25\n"),
                           (tmp_path / "fp_demo_deep" / "inner.py", "K = 2\n")):
            path.write_text(text)
            fp.fingerprint.cache_clear()
            assert fp.fingerprint("train", ("demo",)) != seen, path.name
            seen = fp.fingerprint("train", ("demo",))
    finally:
        fp.fingerprint.cache_clear()


def test_a_plugins_installed_distributions_are_keyed_by_version_and_its_hetfl_modules_are_followed(
        package_copy, tmp_path, monkeypatch):
    """An installed distribution a plugin imports (PyYAML) is keyed by its name and version, not its files;
    torch and numpy, whose versions key a checkpoint already, and the standard library add nothing. A hetfl
    module the plugin imports that training does not (reports/verdicts.py) is in its closure."""
    import importlib.metadata

    import yaml

    plugin = tmp_path / "plugins"
    (plugin / "fp_demo_plugin4").mkdir(parents=True)
    (plugin / "fp_demo_plugin4" / "__init__.py").write_text("")
    (plugin / "fp_demo_plugin4" / "algo.py").write_text(
        "import json\nimport numpy\nimport torch.nn\nimport yaml\n"
        "from hetfl.reports.verdicts import verdict\n")
    monkeypatch.syspath_prepend(str(plugin))
    monkeypatch.setattr(fp, "algorithm_modules", lambda algorithms: ("fp_demo_plugin4.algo",))
    outside = fp.outside_code(["fp_demo_plugin4.algo"])
    assert outside.distributions == {"PyYAML": yaml.__version__}
    assert outside.hetfl == ("hetfl.reports.verdicts",)
    assert set(outside.files) == {"fp_demo_plugin4", "fp_demo_plugin4.algo"}
    seen = fp.fingerprint("train", ("demo",))
    with open(package_copy / "reports/verdicts.py", "a") as f:
        f.write("\n_EDITED = True  # an edit of the code (a comment alone changes no fingerprint)\n")
    fp.closure.cache_clear()
    fp.fingerprint.cache_clear()
    assert fp.fingerprint("train", ("demo",)) != seen
    seen = fp.fingerprint("train", ("demo",))
    real = importlib.metadata.version
    monkeypatch.setattr(importlib.metadata, "version", lambda d: "0.0.test" if d == "PyYAML" else real(d))
    fp.fingerprint.cache_clear()
    assert fp.fingerprint("train", ("demo",)) != seen


def test_the_git_state_is_read_in_one_git_call(monkeypatch):
    """git_state read the commit (git rev-parse HEAD) and the dirty flag (git status) in two calls: two
    reads of the checkout, which a commit between them made disagree (the new commit marked dirty by the
    old one's changes). One `git status --porcelain=v2 --branch` gives both."""
    import subprocess

    expected_commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                                     cwd=fp.PACKAGE).stdout.strip()
    expected_dirty = bool(subprocess.run(["git", "status", "--porcelain", "--", "."], capture_output=True,
                                         text=True, check=True, cwd=fp.PACKAGE).stdout.strip())
    calls = []
    real = subprocess.run

    def counted(*args, **kwargs):
        calls.append(args[0])
        return real(*args, **kwargs)

    monkeypatch.setattr(fp.subprocess, "run", counted)
    assert fp.git_state() == (expected_commit, expected_dirty)
    assert len(calls) == 1, calls


def test_the_git_state_of_a_scratch_checkout(tmp_path, monkeypatch):
    """The commit, and dirty = uncommitted changes under the package's folder only (untracked files
    included); a checkout without a commit has no state to give (the workflow's, else unknown)."""
    import subprocess

    def git(*args):
        return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=tmp_path,
                              capture_output=True, text=True, check=True).stdout.strip()

    git("init", "-q")
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "a.py").write_text("A = 1\n")
    (tmp_path / "other.txt").write_text("x\n")
    monkeypatch.setattr(fp, "PACKAGE", tmp_path / "pkg")
    assert fp.git_state({}) == ("unknown", None)  # no commit yet
    assert fp.git_state({"HETFL_GIT_COMMIT": "abc", "HETFL_GIT_DIRTY": "false"}) == ("abc", False)
    git("add", "-A")
    git("commit", "-q", "-m", "one")
    head = git("rev-parse", "HEAD")
    assert fp.git_state({}) == (head, False)
    (tmp_path / "other.txt").write_text("y\n")  # outside the package: not dirty
    assert fp.git_state({}) == (head, False)
    (tmp_path / "pkg" / "new.py").write_text("B = 2\n")  # untracked inside it
    assert fp.git_state({}) == (head, True)


def test_installed_versions_name_what_each_kind_computes_with():
    """A rule's `versions` param (hetfl.fingerprint.VERSIONS): torch and numpy for training, numpy for
    splits and traces, a distribution not installed as "?"; the tables' kinds have none."""
    from importlib import metadata

    from hetfl.fingerprint import installed_versions

    numpy, torch = (f"{d}=={metadata.version(d)}" for d in ("numpy", "torch"))
    assert installed_versions("train") == f"{numpy} {torch}"
    assert installed_versions("split") == installed_versions("trace") == numpy
    assert installed_versions("trace", ("scipy",)) == f"{numpy} scipy=={metadata.version('scipy')}"
    assert installed_versions("table") == ""
    assert installed_versions("trace", ("no-such-dist-hetfl",)) == f"no-such-dist-hetfl==? {numpy}"


def test_an_edit_of_a_cli_default_reruns_the_jobs_of_its_verb_only(monkeypatch):
    """cli.py is in no closure, and an edit of a default its rule leaves out (`hetfl train --cpu-workers`)
    reran nothing (stop 45's open item): each kind's fingerprint now hashes its verb's defaults."""
    import argparse

    from hetfl import cli

    build = cli.build_parser

    def edited() -> argparse.ArgumentParser:
        parser = build()
        verbs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        verbs.choices["train"].set_defaults(cpu_workers="0")
        return parser

    def fingerprints() -> dict[str, str]:
        fp.cli_defaults.cache_clear()
        fp.fingerprint.cache_clear()
        return {kind: fp.fingerprint(kind) for kind in fp.ENTRIES}

    before = fingerprints()
    assert json.loads(fp.cli_defaults("train"))["cpu_workers"] == "auto"
    monkeypatch.setattr(cli, "build_parser", edited)
    after = fingerprints()
    assert json.loads(fp.cli_defaults("train"))["cpu_workers"] == "0"
    assert {kind for kind in fp.ENTRIES if after[kind] != before[kind]} == {"train"}
    monkeypatch.setattr(cli, "build_parser", build)
    assert fingerprints() == before
    # every kind's rule calls the verb of its name: none is missing from the parser
    assert all(json.loads(fp.cli_defaults(kind.replace("_", "-"))) for kind in fp.ENTRIES)


def test_parsed_sources_are_kept_on_disk_by_their_bytes(tmp_path, monkeypatch):
    """_parsed keeps a file's code_text and imports in parse_cache_dir, named by the sha256 of its bytes:
    another process reads them instead of tokenizing and parsing again; an edited file is another entry;
    an entry cut short is computed again and replaced; an unwritable cache changes no result; a file
    that does not parse still hashes as it is and still raises where its imports are asked for."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert fp.parse_cache_dir() == tmp_path / "cache/hetfl/sources"
    source = b"import os\nfrom hetfl.data import build  # a comment\n\nx = 1\n"
    fp._parsed.cache_clear()
    fp._imports_in.cache_clear()
    expect_code, expect_imports = b"import os\nfrom hetfl.data import build\nx = 1\n", \
        frozenset({"hetfl.data", "hetfl.data.build"})
    assert fp.code_text(source) == expect_code
    (entry,) = fp.parse_cache_dir().iterdir()
    fp._parsed.cache_clear()  # as in a new process: read from the entry, nothing computed
    fp._imports_in.cache_clear()
    with monkeypatch.context() as m:
        m.setattr(fp, "_code_text", lambda s: pytest.fail("tokenized again"))
        m.setattr(fp, "_import_names", lambda s: pytest.fail("parsed again"))
        assert fp.code_text(source) == expect_code
        assert fp._imports_in(source.decode()) == expect_imports
    edited = source.replace(b"x = 1", b"x = 2")
    assert fp.code_text(edited) == expect_code.replace(b"x = 1", b"x = 2")
    assert len(list(fp.parse_cache_dir().iterdir())) == 2
    entry.write_text(entry.read_text()[:20])  # cut short
    fp._parsed.cache_clear()
    assert fp.code_text(source) == expect_code
    assert json.loads(entry.read_text())["imports"] == ["hetfl.data", "hetfl.data.build", "os"]
    broken = b"x = (1,\n"
    assert fp.code_text(broken) == broken
    fp._parsed.cache_clear()
    assert fp.code_text(broken) == broken  # from its entry
    with pytest.raises(SyntaxError):
        fp._imports_in(broken.decode())
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "file"))  # no directory can be made there
    fp._parsed.cache_clear()
    fp._imports_in.cache_clear()
    assert fp.code_text(source) == expect_code and fp._imports_in(source.decode()) == expect_imports
    fp._parsed.cache_clear()
    fp._imports_in.cache_clear()


def test_a_fingerprint_is_the_same_from_an_empty_and_a_full_parse_cache(package_copy, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    kinds = sorted(fp.ENTRIES)
    fp._parsed.cache_clear()
    cold = [fp.fingerprint(kind) for kind in kinds]
    assert any(fp.parse_cache_dir().iterdir())
    for cached in (fp._parsed, fp._imports_in, fp.closure, fp.fingerprint):
        cached.cache_clear()
    assert [fp.fingerprint(kind) for kind in kinds] == cold
    fp._parsed.cache_clear()
