"""The report as a researcher sees it: `snakemake --report` on the tiny workflow holds every table (and
readings table), figure and split chart of the run, each with its caption, grouped by paper, and opens on the
fidelity summary (main tables totalled, readings per reading); with Chromium present, its first page renders
to a non-blank screenshot."""

import base64
import html
import json
import re
import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from conftest import run_tiny_workflow  # tests/conftest.py (pytest puts tests/ on the path)

from hetfl.reports import catalog, report_pages
from hetfl.reports.figures import FIGURES, ONE_TRACE_NOTE
from hetfl.reports.tables import BUILDERS

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")


def _entry(report: str, path: str) -> dict:
    """The report's JSON record of one result (Snakemake embeds them keyed by path)."""
    key = json.dumps(path) + ": "
    at = report.find(key)
    assert at >= 0, f"{path} is not in the report"
    return json.JSONDecoder().raw_decode(report, at + len(key))[0]


@pytest.fixture(scope="module")
def report_html(workflow_dir):
    proc = run_tiny_workflow(workflow_dir, "--report", "reports/report.html")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return (workflow_dir / "reports/report.html").read_text()


@pytest.mark.slow
def test_every_table_and_figure_is_in_the_report_with_its_caption(workflow_dir, report_html):
    tables = sorted(p.stem for p in (workflow_dir / "reports/tables").glob("*.md"))
    figures = sorted(p.stem for p in (workflow_dir / "reports/figures").glob("*.png"))
    assert "accuracy_difference_readings" in tables and "scheme_curves" in figures  # the tiny grid's
    for name in tables:
        entry = _entry(report_html, f"reports/report/tables/{name}.html")
        caption = (workflow_dir / f"reports/tables/{name}.md").read_text().split("\n\n")[0]
        assert html.escape(caption[:200]) in entry["caption"], name  # the table's own caption
        assert "Verdicts: " in entry["caption"]
        base = report_pages.base_table(name)
        assert catalog.subcategory(base) in report_html
    for name in figures:
        entry = _entry(report_html, f"reports/figures/{name}.png")
        assert catalog.figure_label(name) in entry["caption"] and "95 % Student-t" in entry["caption"], name
    assert ONE_TRACE_NOTE in _entry(report_html, "reports/figures/scheme_curves.png")["caption"]
    # the landing page opens on the fidelity summary: every table and its verdict counts
    assert "Fidelity summary" in report_html and "all counted cells" in report_html
    fidelity = _entry(report_html, "reports/report/fidelity.html")["caption"]
    for name in tables:
        assert f"{name}.html" in fidelity


def _script_var(report: str, script_id: str):
    """The JSON value of `<script id="<script_id>"> var <name> = ...;` in Snakemake's report template."""
    at = report.index(" = ", report.index(f'<script id="{script_id}">')) + len(" = ")
    return json.JSONDecoder().raw_decode(report, at)[0]


def _hrefs(fragment: str) -> list[str]:
    class Hrefs(HTMLParser):
        def __init__(self):
            super().__init__()
            self.found = []

        def handle_starttag(self, tag, attrs):
            self.found += [value for key, value in attrs if key == "href"]

    parser = Hrefs()
    parser.feed(fragment)
    return parser.found


@pytest.mark.slow
def test_every_link_in_the_report_leads_somewhere(report_html):
    """Snakemake's report shows an HTML result in an iframe of its data: URL: a relative href has no base
    there and a javascript: href runs in the frame's window, without the report's `app`, so a result's page
    may hold only #anchors and absolute web links. A caption and the landing page are in the report's own
    document, where javascript:app.showResultInfo('<path>') opens the result keyed <path> (docs/report.md)."""
    results, landing = (_script_var(report_html, name) for name in ("results", "workflow-desc"))
    opened = []
    for where, fragment in [("landing page", landing), *((f"{p} caption", r["caption"] or "")
                                                          for p, r in results.items())]:
        for href in _hrefs(fragment):
            target = re.fullmatch(r"javascript:app\.showResultInfo\('([^']*)'\)", href)
            assert target and target.group(1) in results, (where, href)
            opened.append(target.group(1))
    assert "reports/report/tables/accuracy_difference.html" in opened  # the fidelity caption's links
    for path, result in results.items():
        if result["mime_type"] == "text/html":
            page = base64.b64decode(result["data_uri"].split(";base64,", 1)[1]).decode()
            for href in _hrefs(page):
                assert href.startswith(("#", "https://", "http://")), (path, href)


def _categories(report: str) -> dict:
    """The report's menu: {category: {subcategory: [result paths]}}."""
    key = "var categories = "
    return json.JSONDecoder().raw_decode(report, report.index(key) + len(key))[0]


@pytest.mark.slow
def test_every_split_chart_is_in_the_report_with_its_caption(workflow_dir, report_html):
    """One chart per experiment of the tiny grid (a panel per setting, seed 0), under its paper's category,
    subcategory "Data splits", its caption stating each setting's split as the manifest has it."""
    charts = sorted((workflow_dir / "reports/figures/splits").glob("*.png"))
    assert [c.stem for c in charts] == ["tiny_table3", "tiny_table4", "tiny_table5"]
    menu = _categories(report_html)[catalog.RUAN][catalog.SPLITS]
    assert sorted(menu) == [f"reports/figures/splits/{c.name}" for c in charts]
    for chart in charts:
        caption = _entry(report_html, f"reports/figures/splits/{chart.name}")["caption"]
        assert f"Data splits: {chart.stem}" in caption and "seed 0" in caption
        manifests = sorted((workflow_dir / "data_splits" / chart.stem).glob("*/seed0/manifest.json"))
        assert manifests, chart.stem
        for manifest in manifests:  # the tiny grid has one setting per experiment, all SYNTHETIC
            m = json.loads(manifest.read_text())
            sizes, held = m["train_sizes"], (np.array(m["label_histogram"]) > 0).sum(axis=1)
            row = (f"<tr><td>{manifest.parent.parent.name}</td><td>0</td><td>{len(sizes)}</td>"
                   f"<td>{min(sizes)} / {np.median(sizes):g} / {max(sizes)}</td>"
                   f"<td>{held.min()} / {np.median(held):g} / {held.max()}</td>"
                   f"<td>{m['global_test_size']}</td>"
                   f"<td>SYNTHETIC(α = {m['alpha']}, β = {m['beta']}); sizes {m['sizes']['distribution']}")
            assert row in caption, (chart.stem, row)


@pytest.mark.slow
def test_report_first_page_screenshot_is_not_blank(workflow_dir, report_html, tmp_path):
    if CHROMIUM is None:
        pytest.skip("no Chromium on this machine (Debian package chromium): no screenshot of the report")
    shot = tmp_path / "report.png"
    subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--no-first-run",
                    f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1400,1000",
                    "--virtual-time-budget=5000", f"--screenshot={shot}",
                    (workflow_dir / "reports/report.html").as_uri()],
                   capture_output=True, timeout=120, check=False)
    assert shot.is_file(), "chromium wrote no screenshot"
    import matplotlib.image as mpimg

    pixels = mpimg.imread(shot)[..., :3]
    # non-blank: more than a background colour (text and the menu give many distinct values)
    assert np.unique((pixels * 255).astype(np.uint8).reshape(-1, 3), axis=0).shape[0] > 50
    assert pixels.std() > 0.02


def test_table_page_colours_verdicts_and_keeps_the_caption(tmp_path):
    md = ("Caption with |T| = 1 and a <tag>.\n\n| dataset | cell |\n|:--|:--|\n"
          "| MNIST | 1.0 [0.5, 1.5] · agrees |\n| A\\|B | 2.0 · disagrees |\n")
    (tmp_path / "t.md").write_text(md)
    pd.DataFrame({"verdict": ["agrees", "disagrees"]}).to_csv(tmp_path / "t.csv", index=False)
    report_pages.write_table_page("t", tmp_path / "t.md", report_pages.verdict_line("t", tmp_path / "t.csv"),
                                  tmp_path / "t")
    page = (tmp_path / "t.html").read_text()
    assert "Caption with |T| = 1 and a &lt;tag&gt;." in page
    agrees = report_pages.VERDICT_COLOURS["agrees"]
    assert f'<td style="background:{agrees}">1.0 [0.5, 1.5] · agrees</td>' in page
    assert f'background:{report_pages.VERDICT_COLOURS["disagrees"]}">2.0 · disagrees' in page
    assert "<td>A|B</td>" in page  # an escaped pipe stays in its cell
    fragment = (tmp_path / "t.caption.html").read_text()
    assert "Other tables: t" in fragment and "1 agrees" in fragment and "1 disagrees" in fragment



def test_an_empty_table_csv_is_refused_naming_it(tmp_path):
    """A table CSV emptied by hand (Snakemake does not make it again: it is newer than its runs) failed the
    report with pandas' "No columns to parse from file", which named no file."""
    (tmp_path / "t.md").write_text("Caption.\n\n| a |\n|:--|\n| 1 |\n")
    (tmp_path / "t.csv").write_text("")
    with pytest.raises(ValueError, match=r"t\.csv is not a table CSV .*; allowed: the CSV `hetfl table`"):
        report_pages.verdict_line("t", tmp_path / "t.csv")

def test_every_registered_table_and_figure_has_a_category():
    for name in BUILDERS:
        assert catalog.category(name) and catalog.subcategory(name).endswith(name)
    for name, (table, _) in FIGURES.items():
        assert table in BUILDERS, name
        assert catalog.category(table)


def test_reproduce_writes_the_report_after_the_workflow(monkeypatch, tmp_path):
    from hetfl import reproduce

    calls = []
    monkeypatch.setattr(reproduce.subprocess, "run",
                        lambda cmd, **kw: calls.append(cmd) or subprocess.CompletedProcess(cmd, 0, "", ""))
    config = Path(__file__).resolve().parents[1] / "workflow/config/tiny.yaml"
    assert reproduce.main(["--directory", str(tmp_path), "--configfile", str(config), "--cores", "1"]) == 0
    assert calls[-1][-2:] == ["--report", reproduce.REPORT] and "--configfile" in calls[-1]
    assert "--report" not in calls[-2]  # the workflow first


def test_counted_verdicts_follow_the_catalog():
    # Table 4 counts only its paired cells; a baseline's '—' is no verdict; efl_lambda has two columns
    tidy = pd.DataFrame({"method": ["fast_reboot", "vanilla_minus_fast", "vanilla_minus_fast"],
                         "verdict": ["not comparable", "agrees", "disagrees"]})
    assert catalog.counted_verdicts("fast_reboot", tidy) == ["agrees", "disagrees"]
    assert catalog.counted_verdicts("fedfor_by_e", pd.DataFrame({"verdict": ["—", "agrees"]})) == ["agrees"]
    lam = pd.DataFrame({"bmta_verdict": ["—", "same direction"], "loss_verdict": ["—", "inconclusive"]})
    assert catalog.counted_verdicts("efl_lambda", lam) == ["same direction", "inconclusive"]
    # Table 2 counts its BMTA cells and their Δ to FedAvg, as its caption does (the Δ were left out before)
    bmta = pd.DataFrame({"verdict": ["not comparable", "not comparable"], "diff_verdict": ["—", "agrees"]})
    assert sorted(catalog.counted_verdicts("bmta", bmta)) == ["agrees", "not comparable", "not comparable"]
    assert catalog.counted_verdicts("unregistered", pd.DataFrame({"x": [1]})) is None
    assert catalog.category("unregistered") == catalog.OTHER


def test_report_of_a_missing_table_names_it_and_writes_nothing(tmp_path, capsys):
    from hetfl.cli import main

    out = tmp_path / "out"
    assert main(["report", "tables", "nosuch", "--tables-dir", str(tmp_path), "--out", str(out)]) == 2
    assert "nosuch.md, nosuch.csv" in capsys.readouterr().err and not out.exists()


def test_report_takes_table_names_after_its_options(tmp_path, capsys):
    """`hetfl report tables --tables-dir D --out O NAME` means `hetfl report tables NAME --tables-dir D --out
    O` (argparse had left NAME over: "unrecognized arguments", an audit found); an option it does not know
    is still refused."""
    from hetfl.cli import main

    out = tmp_path / "out"
    assert main(["report", "tables", "--tables-dir", str(tmp_path), "--out", str(out), "nosuch"]) == 2
    assert "nosuch.md, nosuch.csv" in capsys.readouterr().err and not out.exists()  # the names reached it
    with pytest.raises(SystemExit) as stop:
        main(["report", "tables", "--out", str(out), "nosuch", "--colour", "red"])
    assert stop.value.code == 2 and "hetfl: error: unrecognized arguments: nosuch --colour red" in \
        capsys.readouterr().err


READINGS = ["paper/default"] * 3 + ["improvement=relative"] * 3 + ["completion=nearest"] * 3


def _fidelity_tables(root: Path) -> None:
    """Table 3 (points cells counted, the relative form not), Table 4 (its paired cells counted) and Table 3's
    readings (paper/default = Table 3's points cells again, then two alternative readings)."""
    pd.DataFrame({"improvement": ["points"] * 3 + ["relative"] * 3,
                  "verdict": ["agrees", "disagrees", "agrees"] + ["inconclusive"] * 3}).to_csv(
        root / "accuracy_difference.csv", index=False)
    pd.DataFrame({"method": ["fast_reboot", "vanilla", "vanilla_minus_fast", "vanilla_minus_fast"],
                  "verdict": ["not comparable", "not comparable", "same direction", "inconclusive"]}).to_csv(
        root / "fast_reboot.csv", index=False)
    verdicts = ["agrees", "disagrees", "agrees"] + ["inconclusive"] * 3 + ["agrees"] * 3
    pd.DataFrame({"reading": READINGS, "improvement": ["points"] * 3 + ["relative"] * 3 + ["points"] * 3,
                  "verdict": verdicts}).to_csv(root / "accuracy_difference_readings.csv", index=False)
    for name in ("accuracy_difference", "fast_reboot", "accuracy_difference_readings"):
        (root / f"{name}.md").write_text("caption\n\n| a |\n|:--|\n| 1 |\n")


def test_fidelity_total_counts_the_tables_and_readings_per_reading(tmp_path):
    _fidelity_tables(tmp_path)
    names = ["accuracy_difference", "fast_reboot", "accuracy_difference_readings"]
    report_pages.write_fidelity(names, tmp_path, tmp_path / "fidelity")
    fragment = (tmp_path / "fidelity.caption.html").read_text()
    # Table 3: 2 agrees + 1 disagrees (points only); Table 4: 1 same direction + 1 inconclusive (paired only);
    # the readings file adds nothing (its paper/default would count Table 3's cells twice)
    assert ("2 table(s); all counted cells of the tables: 2 agrees, 1 same direction, 1 inconclusive, "
            "1 disagrees, 0 not comparable.") in fragment
    assert "1 readings table(s), counted per reading and not added to the total" in fragment
    # per reading; improvement=relative counts its relative cells (the reading sets the column Table 3's
    # cells are picked by)
    assert ("<td>paper/default: 2 agrees, 0 same direction, 0 inconclusive, 1 disagrees, 0 not comparable"
            "<br>improvement=relative: 0 agrees, 0 same direction, 3 inconclusive, 0 disagrees, 0 not "
            "comparable<br>completion=nearest: 3 agrees, 0 same direction, 0 inconclusive, 0 disagrees, "
            "0 not comparable</td>") in fragment
    csv = tmp_path / "accuracy_difference_readings.csv"
    page = report_pages.verdict_line("accuracy_difference_readings", csv)
    assert page.startswith("per reading, paper/default: 2 agrees,")
    assert "; completion=nearest: 3 agrees" in page


def test_fidelity_page_names_each_tables_menu_place_and_its_caption_links_it(tmp_path):
    """The report shows fidelity.html in an iframe of a data: URL (Snakemake's content.js), whose own window
    has no `app` and may not reach the report's: a javascript:app.showResultInfo link there does nothing
    (docs/report.md). The page names where each table is in the menu; the caption, rendered in the report's
    own document (the result's description and the landing page), keeps the links."""
    _fidelity_tables(tmp_path)
    names = ["accuracy_difference", "fast_reboot", "accuracy_difference_readings"]
    report_pages.write_fidelity(names, tmp_path, tmp_path / "fidelity")
    page = (tmp_path / "fidelity.html").read_text()
    fragment = (tmp_path / "fidelity.caption.html").read_text()
    assert "href=" not in page
    for name in names:
        path = f"{report_pages.TABLE_PAGES}/{name}.html"
        place = f"{catalog.subcategory(report_pages.base_table(name))} › {path}"
        assert f"<td>{html.escape(place)}</td>" in page, name
        assert f"href=\"javascript:app.showResultInfo('{path}')\"" in fragment, name


def test_fidelity_of_readings_without_their_reading_column_names_it_and_writes_nothing(tmp_path, capsys):
    from hetfl.cli import main

    _fidelity_tables(tmp_path)
    csv = tmp_path / "accuracy_difference_readings.csv"
    pd.read_csv(csv).drop(columns="reading").to_csv(csv, index=False)
    out = tmp_path / "out" / "fidelity"
    assert main(["report", "fidelity", "accuracy_difference", "accuracy_difference_readings", "--tables-dir",
                 str(tmp_path), "--out", str(out)]) == 2
    assert f"{csv} has no column 'reading'" in capsys.readouterr().err and not out.parent.exists()


def test_reproduce_refuses_a_directory_that_does_not_exist(capsys, tmp_path):
    """It was a FileNotFoundError traceback from os.chdir."""
    from hetfl import reproduce

    config = Path(__file__).resolve().parents[1] / "workflow/config/tiny.yaml"
    rc = reproduce.main(["--directory", str(tmp_path / "none"), "--configfile", str(config)])
    err = capsys.readouterr().err
    assert rc == 2 and "--directory has value" in err and "which is not an existing directory" in err


def test_a_figures_caption_names_the_papers_data_beside_the_runs():
    """Figure 3 of Ruan et al. is non-IID EMNIST, and make reproduce draws it on SYNTHETIC: the caption
    said neither (an audit); it now names the runs' data sets and what the paper's figure draws."""
    runs = pd.DataFrame({"seed": [0, 1], "dataset": ["synthetic", "synthetic"]})
    caption = report_pages.figure_caption("scheme_curves", runs, "accuracy_difference")
    assert "2 seed(s); data: synthetic)" in caption
    assert "The paper's Figure 3 draws non-IID EMNIST at |T| = 1, 3, 5, 8." in caption
    named = pd.DataFrame({"seed": [0], "dataset": ["mnist"], "dataset_name": ["mnist5k"]})
    assert "data: mnist5k)" in report_pages.figure_caption("arrival_curves", named, "fast_reboot")
    nonzeros = report_pages.figure_caption("communication_nonzeros", runs, "communication_cost")
    assert "The paper" not in nonzeros


def test_a_figures_caption_describes_the_band_it_draws():
    """EFL's figures draw a min–max band, the non-zeros none, the fixed points no curve: their captions
    said "band: 95 % Student-t interval" like every other figure's (an audit)."""
    runs = pd.DataFrame({"seed": [0, 1, 2]})
    assert "band: min–max over seeds" in report_pages.figure_caption("efl_figure1", runs, "bmta")
    assert "no band" in report_pages.figure_caption("communication_nonzeros", runs, "communication_cost")
    assert "95 % Student-t" in report_pages.figure_caption("scheme_curves", runs, "accuracy_difference")
    from hetfl.reports.figures import FIGURES as DRAWN

    assert set(report_pages.FIGURE_BANDS) <= set(DRAWN)


def test_the_landing_page_does_not_give_every_figure_a_95_percent_band():
    """The report's first page said "Figures show the mean over seeds with a 95 % band" while EFL's figures
    draw min–max, the non-zeros figure no band and the fixed points no curve (FIGURE_BANDS): it defers to
    each figure's caption."""
    rst = " ".join((Path(__file__).parents[1] / "workflow/report/workflow.rst").read_text().split())
    figures = rst[rst.index("Figures "):].split(";")[0]
    assert report_pages.FIGURE_BANDS and ("95 %" not in figures or "caption" in figures), figures


def test_a_tables_label_in_the_fidelity_rows_keeps_its_own_name():
    """The fidelity rows cut the paper off the title at the first ': ', and the lecture notes' paper name
    holds one, so their rows read 'objective inconsistency and fairness: Fairness of ...' (an audit)."""
    assert report_pages.table_label("fairness") == catalog.subcategory("fairness")
    assert report_pages.table_label("accuracy_difference_readings") == \
        catalog.subcategory("accuracy_difference") + ", under every reading"
    assert report_pages.table_title("fairness") == f"{catalog.NOTES}: {catalog.subcategory('fairness')}"


def test_captions_give_each_methods_hyperparameters():
    """The tables named the methods and MLflow alone gave their settings (an open item of an audit): every
    caption's provenance note now lists each method's resolved hyperparameters, 'a|b' where runs differ."""
    from hetfl.reports.tables import hyperparameter_note, provenance_note

    runs = pd.DataFrame({"algorithm": ["efl", "efl", "fedprox", "fedavg"],
                         "algorithm_params.lam": [0.01, 0.1, float("nan"), float("nan")],
                         "algorithm_params.compress": [True, True, None, None],
                         "algorithm_params.mu": [float("nan"), float("nan"), 0.01, float("nan")],
                         "git_commit": ["abc"] * 4, "git_dirty": [False] * 4, "code_fingerprint": ["f"] * 4})
    note = ("Hyperparameters (hetfl algorithms NAME describes each): EFL: compress = true, lam = 0.01|0.1; "
            "FedProx: mu = 0.01.")
    assert hyperparameter_note(runs) == note
    assert provenance_note(runs).endswith(" " + note)
    fedavg = runs[runs["algorithm"] == "fedavg"]
    assert hyperparameter_note(fedavg) == ""  # no field set: nothing to say


def test_scheme_curves_caption_counts_the_panels_drawn():
    """Ruan et al.'s Figure 3 draws |T| = 1, 3, 5, 8 where the grid has all four (quick.yaml runs |T| = 1..8):
    its caption counted the runs of every |T|, the panels left out too. It now counts the runs drawn and
    names the |T| left out; a grid of other |T| draws, and counts, every run."""
    runs = pd.DataFrame({"seed": [0, 1] * 8, "num_traces": [k for k in range(1, 9) for _ in (0, 1)],
                         "dataset": ["synthetic"] * 16})
    caption = html.unescape(report_pages.figure_caption("scheme_curves", runs, "accuracy_difference"))
    assert "(8 of its 16 runs, 2 seed(s); data: synthetic)." in caption
    assert ("The 8 runs at |T| = 2, 4, 6, 7 are not drawn: the figure draws the paper's panels, "
            "|T| = 1, 3, 5, 8, where the grid has all four") in caption
    some = runs[runs["num_traces"].isin([2, 8])]
    assert "(4 runs, 2 seed(s); data: synthetic)." in report_pages.figure_caption(
        "scheme_curves", some, "accuracy_difference")


def test_table_pages_of_a_bad_readings_table_write_no_page_at_all(tmp_path, capsys):
    """Every table is read before any page is written, as `hetfl report fidelity` does: a bad readings table
    named after a good one left the good one's page and caption written behind the error."""
    from hetfl.cli import main

    _fidelity_tables(tmp_path)
    csv = tmp_path / "accuracy_difference_readings.csv"
    pd.read_csv(csv).drop(columns="reading").to_csv(csv, index=False)
    out = tmp_path / "out"
    assert main(["report", "tables", "accuracy_difference", "accuracy_difference_readings", "--tables-dir",
                 str(tmp_path), "--out", str(out)]) == 2
    assert f"{csv} has no column 'reading'" in capsys.readouterr().err and not out.exists()


def test_table_pages_read_each_csv_once_and_show_its_verdicts(tmp_path, capsys, monkeypatch):
    """`hetfl report tables` reads every CSV before writing any page; the pages show the verdicts of that
    one read (each CSV was read a second time to write its page)."""
    from hetfl.cli import main

    _fidelity_tables(tmp_path)
    names = ["accuracy_difference", "accuracy_difference_readings"]
    expected = {n: html.escape(report_pages.verdict_line(n, tmp_path / f"{n}.csv")) for n in names}
    reads = []
    read_tidy = report_pages.read_tidy
    monkeypatch.setattr(report_pages, "read_tidy",
                        lambda name, csv: reads.append(name) or read_tidy(name, csv))
    out = tmp_path / "out"
    assert main(["report", "tables", *names, "--tables-dir", str(tmp_path), "--out", str(out)]) == 0
    assert reads == names
    for n in names:
        fragment = (out / f"{n}.caption.html").read_text()
        assert f". Verdicts: {expected[n]}.</p>" in fragment and fragment in (out / f"{n}.html").read_text()
    assert f"wrote {out}" in capsys.readouterr().err


def test_a_fidelity_summary_of_no_table_is_refused(tmp_path, capsys):
    """`hetfl report fidelity --out STEM` with no table name wrote a summary of "0 table(s)" and said "wrote";
    `hetfl report tables` refuses the same."""
    from hetfl.cli import main

    out = tmp_path / "out" / "fidelity"
    assert main(["report", "fidelity", "--tables-dir", str(tmp_path), "--out", str(out)]) == 2
    assert "names no table, which is not allowed; allowed: one or more table names" in capsys.readouterr().err
    assert not out.parent.exists()


def test_report_out_under_a_file_names_the_flag(tmp_path, capsys):
    """`hetfl report tables NAME --out FILE` said only "File exists: FILE"; a fidelity stem under a file said
    "Not a directory". Both name --out, its value and what it takes, and write nothing."""
    from hetfl.cli import main

    _fidelity_tables(tmp_path)
    csv = tmp_path / "accuracy_difference.csv"
    before = csv.read_text()
    assert main(["report", "tables", "accuracy_difference", "--tables-dir", str(tmp_path), "--out",
                 str(csv)]) == 2
    assert f"--out has value '{csv}', which is not a directory; allowed: a folder" in capsys.readouterr().err
    assert main(["report", "fidelity", "accuracy_difference", "--tables-dir", str(tmp_path), "--out",
                 str(csv / "fidelity")]) == 2
    assert f"--out has value '{csv / 'fidelity'}', which is not allowed ({csv} is a file); allowed: " in \
        capsys.readouterr().err
    assert csv.read_text() == before
    # a dangling link is in the way too: the fidelity stem's own check passed over it, read the tables, then
    # said "File exists"
    gone = tmp_path / "gone"
    gone.symlink_to(tmp_path / "nowhere")
    assert main(["report", "tables", "accuracy_difference", "--tables-dir", str(tmp_path), "--out",
                 str(gone / "pages")]) == 2
    assert f"--out has value '{gone / 'pages'}', which is not a directory ({gone} is a file)" in \
        capsys.readouterr().err
    assert main(["report", "fidelity", "accuracy_difference", "--tables-dir", str(tmp_path), "--out",
                 str(gone / "fidelity")]) == 2
    assert f"--out has value '{gone / 'fidelity'}', which is not allowed ({gone} is a file); allowed: " in \
        capsys.readouterr().err
    assert not (tmp_path / "nowhere").exists()
