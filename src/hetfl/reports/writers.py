"""Write one table as .csv (tidy, as computed), .md and .tex (laid out for people), atomically."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pandas as pd

from hetfl.io import atomic_write_text

_TEX_ESCAPES = {"\\": r"\textbackslash{}", "%": r"\%", "$": r"\$", "_": r"\_", "&": r"\&", "#": r"\#",
                "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "±": r"$\pm$",
                ">": r"$>$", "<": r"$<$", "τ": r"$\tau$", "α": r"$\alpha$", "β": r"$\beta$", "·": r"$\cdot$",
                "−": r"$-$", "×": r"$\times$", "—": "---", "–": "--", "|": r"\textbar{}", "≥": r"$\geq$",
                "≤": r"$\leq$", "∞": r"$\infty$", "η": r"$\eta$", "λ": r"$\lambda$", "μ": r"$\mu$"}


_TEX_ESCAPES.update({"→": r"$\to$", "ℓ": r"$\ell$", "⌊": r"$\lfloor$", "⌋": r"$\rfloor$", "§": r"\S{}",
                     "≈": r"$\approx$", "∈": r"$\in$", "⊙": r"$\odot$", "…": r"\ldots{}", "√": r"$\surd$",
                     "ε": r"$\varepsilon$", "′": r"$'$", "°": r"$^\circ$"})
_TEX_GREEK_CAPITALS = {"Gamma", "Delta", "Theta", "Lambda", "Xi", "Pi", "Sigma", "Upsilon", "Phi", "Psi",
                       "Omega"}
#: the Greek capitals LaTeX writes as Latin letters
_TEX_LATIN_CAPITALS = {"Alpha": "A", "Beta": "B", "Epsilon": "E", "Zeta": "Z", "Eta": "H", "Iota": "I",
                       "Kappa": "K", "Mu": "M", "Nu": "N", "Omicron": "O", "Rho": "P", "Tau": "T", "Chi": "X"}
_TEX_ACCENTS = {"\u0302": "hat", "\u0303": "tilde", "\u0304": "bar"}  # combining marks: ŵ, x̃, F̄
_ACCENTED = re.compile("(.)([\u0302\u0303\u0304])")


def _tex_char(ch: str) -> str:
    """One character as pdflatex takes it: the table above, Greek letters and super/subscript digits by
    their Unicode names, anything else as it is."""
    if ch in _TEX_ESCAPES or ch.isascii():
        return _TEX_ESCAPES.get(ch, ch)
    name = unicodedata.name(ch, "")
    for prefix in ("GREEK SMALL LETTER ", "GREEK CAPITAL LETTER "):
        letter = name.removeprefix(prefix)
        if letter != name and " " not in letter:
            if prefix.startswith("GREEK SMALL"):
                return rf"$\{letter.lower()}$"
            if letter.capitalize() in _TEX_GREEK_CAPITALS:
                return rf"$\{letter.capitalize()}$"
            return _TEX_LATIN_CAPITALS.get(letter.capitalize(), ch)
    digit = unicodedata.digit(ch, None)
    if digit is not None and name.startswith(("SUPERSCRIPT ", "SUBSCRIPT ")):
        return f"${'^' if name.startswith('SUPER') else '_'}{{{digit}}}$"
    return ch


def latex_escape(text: str) -> str:
    """text for pdflatex: its specials escaped; Greek letters, arrows, sub- and superscript digits and
    combining accents as math (an audit found Δ, Σ, ρ, x̃ and ³ left as they were, which pdflatex rejects)."""
    text, out, start = str(text), [], 0
    for m in _ACCENTED.finditer(text):
        out.append("".join(_tex_char(ch) for ch in text[start:m.start()]))
        out.append(rf"$\{_TEX_ACCENTS[m[2]]}{{{_tex_char(m[1]).strip('$')}}}$")
        start = m.end()
    out.append("".join(_tex_char(ch) for ch in text[start:]))
    return "".join(out)


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
