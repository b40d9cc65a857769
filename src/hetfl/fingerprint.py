"""Code fingerprints: the source files a job's output depends on, hashed.

A job's code is the import closure of its entry module inside hetfl (imports inside functions included),
plus the data files it reads (the paper references). The workflow passes each job's fingerprint as a
Snakemake param, so editing a file under src/hetfl reruns exactly the jobs whose closure holds it
(Snakemake's `params` rerun trigger); run.json records it beside the git commit and a dirty flag, and a
training checkpoint is reused only under the same fingerprint.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import os
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent

#: job kind -> entry modules (the workflow's rules call these through the CLI)
ENTRIES: dict[str, tuple[str, ...]] = {
    "split": ("hetfl.data.build",),
    "trace": ("hetfl.data.traces",),
    "train": ("hetfl.pipeline",),
    "table": ("hetfl.reports.tables",),
    "figure": ("hetfl.reports.figures",),
    "split_figure": ("hetfl.reports.split_figures",),
    "track": ("hetfl.tracking",),
    "report": ("hetfl.reports.report_pages",),
}
#: data files (relative to the package) each kind reads besides code
DATA: dict[str, tuple[str, ...]] = {
    # data.traces reads Table 2's moments and the (mu, sigma) fitted to them (_REFERENCE_CSV, _FITS_CSV):
    # without the fits, an edited fit left every trace file and the runs trained on them in place
    "trace": ("reports/references/ruan2021_table2_traces.csv", "reports/references/ruan2021_table2_fits.csv"),
    "table": ("reports/references/*.csv",),
    "figure": ("reports/references/*.csv",),
}


def module_file(name: str) -> Path | None:
    """The file of module `name` inside hetfl (a package's __init__.py), or None outside it."""
    if name != "hetfl" and not name.startswith("hetfl."):
        return None
    parts = name.split(".")[1:]
    if not parts:
        return PACKAGE / "__init__.py"
    rel = Path(*parts)
    for path in (PACKAGE / rel.with_suffix(".py"), PACKAGE / rel / "__init__.py"):
        if path.is_file():
            return path
    return None


def _imported(path: Path) -> set[str]:
    """hetfl modules a file imports anywhere in it (`from hetfl.x import y`: x, and x.y if a module)."""
    return set(_imports_in(path.read_text(encoding="utf-8")))


@functools.cache
def _imports_in(source: str) -> frozenset[str]:
    # keyed by the text, so an edited file is parsed again; the closures of one Snakemake DAG share most
    # modules, and parsing them once each was 4 of its 5 s of fingerprints (14 closures, 470 parses)
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return frozenset(n for n in names if module_file(n) is not None)


@functools.cache
def closure(entries: tuple[str, ...]) -> tuple[Path, ...]:
    """Every hetfl source file reachable by imports from the entry modules (and their parent packages)."""
    seen: set[Path] = set()
    todo = list(entries)
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__ and a/b/__init__ too
            path = module_file(".".join(parts[:i]))
            if path is None or path in seen:
                continue
            seen.add(path)
            todo.extend(_imported(path))
    return tuple(sorted(seen))


def algorithm_modules(algorithms: Iterable[str]) -> tuple[str, ...]:
    """The modules that define the given algorithms (their classes are imported by name at run time)."""
    from hetfl.algorithms import CATALOG

    return tuple(sorted({CATALOG[a].target.split(":")[0] for a in algorithms if a in CATALOG}))


def _outside_origin(name: str) -> Path | None:
    """The .py file of module `name` outside hetfl, or None (not found, not a module, no source)."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError, AttributeError):  # `a.b.Name`: a name, not a module
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    return Path(spec.origin)


@functools.cache
def _plugin_imports(source: str, name: str, is_package: bool) -> frozenset[str]:
    """Modules that module `name`'s source imports anywhere in it, relative imports resolved (`from .ops
    import f`: name's package + .ops and .ops.f, the latter dropped later if it is no module)."""
    package = name if is_package else name.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                up = parts[:len(parts) - (node.level - 1)] if node.level - 1 < len(parts) else []
                if not up:
                    continue
                base = ".".join(up + ([node.module] if node.module else []))
            if base:
                names.add(base)
                names.update(f"{base}.{a.name}" for a in node.names)
    return frozenset(names)


def outside_files(modules: Iterable[str]) -> dict[str, Path]:
    """module -> source file of each module outside hetfl (an algorithm registered by a plugin package),
    of every module of the same top-level package that it imports, anywhere in it and relative imports
    included, transitively, and of the packages above them (importing a.b runs a/__init__.py). Editing a
    plugin's algorithm left every run "Nothing to be done" while its file was left out of the fingerprint,
    and so did editing the helper module its update was imported from while only the file itself was in
    (two audits). Other packages' modules (numpy, hetfl's own: closure) are not followed."""
    out: dict[str, Path] = {}
    todo = [m for m in modules if module_file(m) is None]
    roots = {m.split(".")[0] for m in todo}
    while todo:
        name = todo.pop()
        if name in out or name.split(".")[0] not in roots:
            continue
        path = _outside_origin(name)
        if path is None:
            continue
        out[name] = path
        parts = name.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))
        todo.extend(_plugin_imports(path.read_text(encoding="utf-8"), name, path.name == "__init__.py"))
    return out


@functools.cache
def fingerprint(kind: str, algorithms: tuple[str, ...] = ()) -> str:
    """16 hex digits of sha256 over the closure of `kind`'s entries (train: plus the algorithms' modules,
    a plugin's own file included) and its data files, each file hashed with its path relative to the
    package (a plugin's: its module name)."""
    if kind not in ENTRIES:
        raise ValueError(f"job kind '{kind}' is unknown; allowed: {', '.join(ENTRIES)}")
    modules = algorithm_modules(algorithms)
    files = set(closure(ENTRIES[kind] + modules))
    for pattern in DATA.get(kind, ()):
        files.update(PACKAGE.glob(pattern))
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(str(path.relative_to(PACKAGE)).encode() + b"\0" + path.read_bytes() + b"\0")
    for name, path in sorted(outside_files(modules).items()):
        h.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()[:16]


#: environment variables through which the workflow hands its checkout's git state to jobs on nodes
#: without git (workflow/rules/common.smk sets them; SLURM passes the submitting environment on)
GIT_ENV = ("HETFL_GIT_COMMIT", "HETFL_GIT_DIRTY")


def git_state(environ: Mapping[str, str] | None = None) -> tuple[str, bool | None]:
    """(commit, dirty) of the checkout hetfl runs from: dirty = uncommitted changes under src/hetfl.
    Where git cannot answer (no git on a cluster node, or no checkout), the state the workflow recorded in
    ``GIT_ENV`` on its host; else ("unknown", None)."""
    try:
        run = functools.partial(subprocess.run, capture_output=True, text=True, check=True, cwd=PACKAGE)
        commit = run(["git", "rev-parse", "HEAD"]).stdout.strip()
        dirty = bool(run(["git", "status", "--porcelain", "--", "."]).stdout.strip())
        return commit, dirty
    except (OSError, subprocess.CalledProcessError):
        env = os.environ if environ is None else environ
        dirty = {"true": True, "false": False}.get(env.get(GIT_ENV[1], ""))
        return env.get(GIT_ENV[0]) or "unknown", dirty


def git_environ() -> dict[str, str]:
    """``GIT_ENV`` for jobs of a workflow run from this checkout (empty where git cannot answer here)."""
    commit, dirty = git_state({})
    if commit == "unknown":
        return {}
    return {GIT_ENV[0]: commit, GIT_ENV[1]: "unknown" if dirty is None else str(dirty).lower()}
