"""The HTML that `snakemake --report` bundles: each table as a page (its caption, then the table with its
verdicts coloured), each table's and figure's caption fragment, and the fidelity summary.

Snakemake's report shows a file marked ``report()`` with the caption rendered from an ``.rst`` under
workflow/report/; those ``.rst`` files pull in the fragments written here with docutils' ``raw:: html``
``:file:`` directive. The fragments are run outputs, not rule params: a params value that changes after a
run would make Snakemake rerun the job. Everything is read from the files `hetfl table` and
`hetfl figure` write (reports/tables/<table>.{md,csv}), so a table a helper adds to
``hetfl.reports.tables.BUILDERS`` appears here without edits (``hetfl.reports.catalog`` falls back to
"Other tables").
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from hetfl.io import atomic_write_text
from hetfl.reports import catalog
from hetfl.reports.verdicts import counts_text

if TYPE_CHECKING:
    import pandas as pd

#: verdict → background colour of its cell (green agrees … red disagrees; grey for no paper value)
VERDICT_COLOURS = {"agrees": "#c8e6c9", "same direction": "#fff59d", "inconclusive": "#ffe0b2",
                   "disagrees": "#ffcdd2", "not comparable": "#eeeeee"}
_STYLE = ("<style>body{font-family:sans-serif;font-size:14px;margin:1em}table{border-collapse:collapse}"
          "td,th{border:1px solid #bbb;padding:3px 6px;text-align:left}th{background:#f0f0f0}"
          "p.caption{max-width:70em}</style>")


def base_table(name: str) -> str:
    """The registry name of a table file: accuracy_difference_readings → accuracy_difference."""
    return name[: -len("_readings")] if name.endswith("_readings") else name


def _pipe_rows(block: str) -> list[list[str]]:
    """A pipe table's rows (header first, the |---| rule dropped, '\\|' unescaped)."""
    rows = []
    for line in block.strip().splitlines():
        cells = [c.strip().replace("\\|", "|") for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if cells and not all(re.fullmatch(r":?-+:?", c) for c in cells):
            rows.append(cells)
    return rows


def split_markdown(md: str) -> tuple[str, list[str | list[list[str]]]]:
    """A reports/tables/<table>.md (writers.write_frame_tables: caption, blank line, pipe table; a readings
    table has more paragraphs and tables) as its caption and the blocks after it: a paragraph's text, or a
    pipe table's rows."""
    blocks = [b.strip() for b in md.strip().split("\n\n") if b.strip()]
    caption = blocks[0] if blocks and not blocks[0].startswith("|") else ""
    rest = blocks[1:] if caption else blocks
    return caption, [_pipe_rows(b) if b.startswith("|") else b for b in rest]


def _verdict_of(cell: str) -> str | None:
    """The verdict a cell names ("agrees", or a cell ending in it): longest name first ("disagrees")."""
    text = cell.strip().lower()
    for v in sorted(VERDICT_COLOURS, key=len, reverse=True):
        if text == v or text.endswith(f"({v})") or text.endswith(f" {v}"):
            return v
    return None


def table_html(rows: list[list[str]]) -> str:
    if not rows:
        return "<p><em>(no rows)</em></p>"
    head = "".join(f"<th>{html.escape(c)}</th>" for c in rows[0])
    body = []
    for row in rows[1:]:
        cells = []
        for c in row:
            v = _verdict_of(c)
            style = f' style="background:{VERDICT_COLOURS[v]}"' if v else ""
            cells.append(f"<td{style}>{html.escape(c)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


NO_VERDICTS = "no verdicts (paper values shown beside)"


def verdict_parts(name: str, tidy: pd.DataFrame) -> list[str]:
    """A table file's verdict counts over the cells its caption counts (catalog.TABLES): one text for a
    table, one 'reading: counts' per reading for a <table>_readings file (catalog.reading_verdicts)."""
    base = base_table(name)
    if name == base:
        verdicts = catalog.counted_verdicts(base, tidy)
        return [NO_VERDICTS if verdicts is None else counts_text(verdicts)]
    per_reading = catalog.reading_verdicts(base, tidy)
    if per_reading is None:
        return [NO_VERDICTS]
    return [f"{reading}: {counts_text(v)}" for reading, v in per_reading.items()]


def read_tidy(name: str, csv: Path) -> pd.DataFrame:
    """A table file's CSV; a <table>_readings file must have its `reading` column. An empty or garbled CSV
    (cut off by hand) is refused naming it: pandas' own message named no file."""
    import pandas as pd  # here: Snakemake imports this module at every start (base_table)

    try:
        tidy = pd.read_csv(csv)
    except (pd.errors.EmptyDataError, pd.errors.ParserError) as exc:
        raise ValueError(f"{csv} is not a table CSV ({exc}); allowed: the CSV `hetfl table` writes (delete "
                         "it and run snakemake again to make it again)") from exc
    if name != base_table(name) and "reading" not in tidy:
        raise ValueError(f"{csv} has no column 'reading'; allowed: a readings table that `hetfl table "
                         "--readings` wrote")
    return tidy


def verdict_line(name: str, csv: Path) -> str:
    """'2 agrees, 1 disagrees' (a table) or 'per reading, paper/default: …; iid=true: …' (readings)."""
    parts = verdict_parts(name, read_tidy(name, csv))
    return "; ".join(parts) if name == base_table(name) else "per reading, " + "; ".join(parts)


def table_label(name: str) -> str:
    """The table's names without its paper: 'Table 3: accuracy_difference', ', under every reading' added
    to a readings table's."""
    base = base_table(name)
    return catalog.subcategory(base) + (", under every reading" if name != base else "")


def table_title(name: str) -> str:
    return f"{catalog.table_entry(base_table(name)).paper}: {table_label(name)}"


def write_table_page(name: str, md: Path, verdicts: str, out: Path) -> None:
    """<out>.html: the table page (title, caption, verdicts, coloured table); <out>.caption.html: the
    fragment the report's caption shows (title, verdict counts, the table's caption). `verdicts` is the
    table CSV's verdict_line, which the caller has read already (to refuse a bad CSV before any page)."""
    caption, blocks = split_markdown(Path(md).read_text())
    body = "\n".join(table_html(b) if isinstance(b, list) else f"<p>{html.escape(b)}</p>" for b in blocks)
    title, verdicts = html.escape(table_title(name)), html.escape(verdicts)
    fragment = (f'<p><strong>{title}</strong>. Verdicts: {verdicts}.</p>\n'
                f'<p class="caption">{html.escape(caption)}</p>\n')
    page = (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{title}</title>{_STYLE}</head>"
            f"<body><h2>{title}</h2>\n{fragment}{body}\n</body></html>\n")
    atomic_write_text(out.with_name(out.name + ".html"), page)
    atomic_write_text(out.with_name(out.name + ".caption.html"), fragment)


#: what a figure draws where it is not figures.py's mean curve with a 95 % t band (an audit found four
#: captions describing a band their figures do not draw)
_MIN_MAX = "Curves: mean over seeds per round; band: min–max over seeds (no band with one seed)."
FIGURE_BANDS = {
    "efl_figure1": _MIN_MAX,  # efl_figures._band
    "efl_figure2": _MIN_MAX,
    "efl_figure3": _MIN_MAX,
    "communication_nonzeros": "Curves: mean over seeds per round; no band.",
    "objective_inconsistency": "Points: each run's fixed point beside the closed forms; no curves, no band.",
}


#: figures with a line per method whose per-seed BMTA the bmta table compares: two methods identical in
#: every seed draw one line where the legend names two
LINE_FIGURES = ("efl_figure1", "efl_figure3")


def hidden_lines_note(name: str, runs: pd.DataFrame) -> str:
    """'Identical in every seed, so one line hides the other: ...' for the methods the figure draws (the
    bmta table's caption names them too), else ''."""
    from hetfl.reports.bmta import coinciding, per_run
    from hetfl.reports.efl_figures import drawn

    lines = drawn(name, runs)
    same = coinciding(per_run(lines)) if len(lines) else []
    return (f"Identical in every seed, so one line hides the other: {html.escape('; '.join(same))}."
            if same else "")


def _data_sets(runs: pd.DataFrame) -> list[str]:
    """The runs' data sets by their sources' names (mnist5k, not its paper label MNIST)."""
    col = "dataset_name" if "dataset_name" in runs else "dataset"
    return sorted(map(str, runs[col].dropna().unique())) if col in runs else []


def figure_caption(name: str, runs: pd.DataFrame, table: str) -> str:
    """The figure's caption fragment: the paper's figure, what is drawn, the seeds, the band, the |T| = 1
    note where it applies, and the table whose runs it draws."""
    from hetfl.reports.figures import ONE_TRACE_NOTE, drawn_runs

    # what the figure draws, not every run of its table: EFL Figure 1 counted a plugin's runs it leaves out
    lines, left_out = drawn_runs(name, runs)
    seeds = int(lines["seed"].nunique()) if "seed" in lines and len(lines) else 0
    data = ", ".join(_data_sets(lines))
    count = f"{len(lines)} of its {len(runs)} runs" if left_out else f"{len(runs)} runs"
    parts = [f"<strong>{html.escape(catalog.category(table))}: {html.escape(catalog.figure_label(name))}"
             "</strong>.",
             html.escape(catalog.FIGURES[name].what if name in catalog.FIGURES else name.replace("_", " "))
             + ".",
             f"Drawn from the runs of table {html.escape(table)} ({count}, {seeds} seed(s)"
             + (f"; data: {html.escape(data)}" if data else "") + ").",
             *(html.escape(note) for note in left_out),
             FIGURE_BANDS.get(name, "Curves: mean over seeds per round; band: 95 % Student-t interval over "
                                    "seeds (no band with one seed).")]
    if name in LINE_FIGURES and {"algorithm", "num_traces", "run_dir"} <= set(runs.columns):
        parts.append(hidden_lines_note(name, runs))
    entry = catalog.FIGURES.get(name)
    if entry is not None and entry.paper_data:
        parts.append(f"The paper's {html.escape(entry.label)} draws {html.escape(entry.paper_data)}.")
    if name == "scheme_curves":
        parts.append(f"Panels with |T| = 1: {html.escape(ONE_TRACE_NOTE)} — trace T_0 has every device "
                     "complete its local work every round, so Schemes A, B and C give the same weights and "
                     "draw one line.")
    return "<p>" + " ".join(p for p in parts if p) + "</p>\n"


def write_figure_caption(name: str, runs: pd.DataFrame, table: str, out: Path) -> None:
    atomic_write_text(out.with_name(out.name + ".caption.html"), figure_caption(name, runs, table))


#: where `hetfl report tables` writes the table pages in the workflow (workflow/rules/report.smk)
TABLE_PAGES = "reports/report/tables"


def _result_link(path: str) -> str:
    """A link that opens a result of the Snakemake report (its own rst links call the same function). It
    works in a caption or the landing page, which are in the report's own document, not in a result's
    page: the report shows an HTML result in an iframe of its data: URL, whose window has no `app`
    (docs/report.md)."""
    return (f"<a href=\"javascript:app.showResultInfo('{html.escape(path)}')\">"
            f"{html.escape(Path(path).name)}</a>")


def _menu_place(name: str) -> str:
    """Where a table's page is in the report's menu, below its paper: its subcategory and its path (the
    menu lists a result without labels by its path). The fidelity page names it in place of the link, which
    cannot work in the iframe the page is shown in."""
    return html.escape(f"{catalog.subcategory(base_table(name))} › {TABLE_PAGES}/{name}.html")


def write_fidelity(tables: list[str], tables_dir: Path, out: Path) -> None:
    """<out>.html and <out>.caption.html: every table with its paper, verdict counts and where it is. The
    caption links each table (the report opens a result by its path, e.g.
    `reports/report/tables/accuracy_difference.html`); the page, which the report shows in an iframe where
    such a link does nothing, names the table's place in the menu instead (docs/report.md).

    The total counts the main tables only. A <table>_readings file shows its counts per reading and adds
    nothing to the total: its paper/default reading is the main table's cells again, and each other reading
    is an alternative to them, not more evidence.
    """
    tidies = {name: read_tidy(name, Path(tables_dir) / f"{name}.csv") for name in tables}
    parts = {name: verdict_parts(name, tidy) for name, tidy in tidies.items()}  # every check before writing
    mains = [n for n in tables if n == base_table(n)]
    total = [v for n in mains for v in catalog.counted_verdicts(n, tidies[n]) or []]
    summary = counts_text(total) if total else "no verdicts"
    n_readings = len(tables) - len(mains)
    readings = (f" {n_readings} readings table(s), counted per reading and not added to the total: their "
                "paper/default reading is the table itself, every other reading an alternative to it."
                if n_readings else "")

    def fidelity_table(head: str, cell: Callable[[str], str]) -> str:
        rows = "".join(f"<tr><td>{html.escape(catalog.category(base_table(name)))}</td>"
                       f"<td>{html.escape(table_label(name))}</td>"  # a paper's name may hold ': ' itself
                       f"<td>{'<br>'.join(html.escape(p) for p in parts[name])}</td>"
                       f"<td>{cell(name)}</td></tr>" for name in tables)
        return (f"<table><thead><tr><th>paper</th><th>table</th><th>verdicts</th><th>{head}</th></tr></thead>"
                f"<tbody>{rows}</tbody></table>\n")

    lead = (f"<p><strong>Fidelity summary</strong>: {len(mains)} table(s); all counted cells of the "
            f"tables: {html.escape(summary)}.{readings} Each table is under its paper's category (left "
            "menu), as &lt;table&gt;.html with its caption.")
    fragment = (lead + "</p>\n"
                + fidelity_table("file", lambda name: _result_link(f"{TABLE_PAGES}/{name}.html")))
    page = (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>Fidelity summary</title>{_STYLE}"
            f"</head><body><h2>Fidelity summary</h2>\n{lead} The last column is where each table is in the "
            "menu, below its paper; this summary's description (its ⓘ button) and the report's first page "
            f"link each table.</p>\n{fidelity_table('in the menu', _menu_place)}</body></html>\n")
    atomic_write_text(out.with_name(out.name + ".html"), page)
    atomic_write_text(out.with_name(out.name + ".caption.html"), fragment)
