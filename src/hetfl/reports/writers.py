"""Write one table as .csv (tidy, as computed), .md and .tex (laid out for people), atomically."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from hetfl.io import atomic_write_text

_TEX_ESCAPES = {"\\": r"\textbackslash{}", "%": r"\%", "$": r"\$", "_": r"\_", "&": r"\&", "#": r"\#",
                "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "±": r"$\pm$",
                ">": r"$>$", "<": r"$<$", "τ": r"$\tau$", "α": r"$\alpha$", "β": r"$\beta$", "·": r"$\cdot$",
                "−": r"$-$", "×": r"$\times$", "—": "---", "–": "--", "|": r"\textbar{}", "≥": r"$\geq$",
                "≤": r"$\leq$", "∞": r"$\infty$", "η": r"$\eta$", "λ": r"$\lambda$", "μ": r"$\mu$"}


def latex_escape(text: str) -> str:
    return "".join(_TEX_ESCAPES.get(ch, ch) for ch in str(text))


def to_latex(layout: pd.DataFrame, caption: str, label: str) -> str:
    cols = "l" * len(layout.columns)
    lines = [r"\begin{table}[ht]", r"\centering", rf"\caption{{{latex_escape(caption)}}}",
             rf"\label{{tab:{label}}}", rf"\begin{{tabular}}{{{cols}}}", r"\hline",
             " & ".join(latex_escape(c) for c in layout.columns) + r" \\", r"\hline"]
    for _, row in layout.iterrows():
        lines.append(" & ".join(latex_escape(v) for v in row.to_list()) + r" \\")
    lines += [r"\hline", r"\end{tabular}", r"\end{table}"]
    return "\n".join(lines) + "\n"


def markdown(frame: pd.DataFrame) -> str:
    """A pipe table with '|' inside headers and cells escaped (|T| would otherwise split a column)."""
    esc = frame.rename(columns=lambda c: str(c).replace("|", "\\|"))
    esc = esc.apply(lambda col: col.map(lambda v: v.replace("|", "\\|") if isinstance(v, str) else v))
    return esc.to_markdown(index=False)


def write_frame_tables(tidy: pd.DataFrame, layout: pd.DataFrame, out_stem: Path, caption: str) -> None:
    """<stem>.csv = tidy; <stem>.md = caption + layout; <stem>.tex = layout with \\caption."""
    out_stem = Path(out_stem)
    label = re.sub(r"[^A-Za-z0-9:_-]", "-", out_stem.name)
    md = caption + "\n\n" + markdown(layout) + "\n"
    for suffix, text in ((".csv", tidy.to_csv(index=False)), (".md", md),
                         (".tex", to_latex(layout, caption, label))):
        atomic_write_text(out_stem.with_name(out_stem.name + suffix), text)
