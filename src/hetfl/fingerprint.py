"""Code fingerprints: the source files a job's output depends on, hashed.

A job's code is the import closure of its entry module inside hetfl (imports inside functions included;
a table's job adds its builders' modules, a figure's its drawing function's, which their registries name:
REGISTRIES), plus the data files it reads (DATA; a table's paper references are a param of their own,
data_fingerprint); a training job's also holds the modules of its algorithms and, for a plugin's algorithm,
the code outside hetfl that they import (outside_code: local files hashed, installed distributions by name
and version). Each also hashes the defaults of the `hetfl` verb its rule calls (cli_defaults).
The workflow passes each job's fingerprint as a Snakemake param, so editing a file under src/hetfl reruns
exactly the jobs whose closure holds it (Snakemake's `params` rerun trigger); run.json records it beside
the git commit and a dirty flag, and a training checkpoint is reused only under the same fingerprint.
"""

from __future__ import annotations

import ast
import base64
import functools
import hashlib
import importlib.machinery
import importlib.util
import io
import json
import os
import pkgutil
import site
import subprocess
import sys
import sysconfig
import tokenize
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
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
#: job kinds whose jobs each build one entry of a registry (a table, a figure) -> the function, "module:
#: function", that names the modules that entry's job `name` imports beyond the kind's ENTRIES (its
#: builder's, named "module:function" and imported when it is built; every entry's with None): a job's code
#: is the closure of both (job_entries), so an edit of one table's builder rebuilds that table only (the
#: kind's entry imported every builder, and an edit of any rebuilt every table, figure and report page).
#: In hetfl.reports.registry, which imports no pandas: Snakemake calls these at every start.
REGISTRIES: dict[str, str] = {"table": "hetfl.reports.registry:table_job_modules",
                              "figure": "hetfl.reports.registry:figure_job_modules"}
#: data files (relative to the package) each kind reads besides code
DATA: dict[str, tuple[str, ...]] = {
    # data.traces reads Table 2's moments and the (mu, sigma) fitted to them (_REFERENCE_CSV, _FITS_CSV):
    # without the fits, an edited fit left every trace file and the runs trained on them in place
    "trace": ("reports/references/ruan2021_table2_traces.csv", "reports/references/ruan2021_table2_fits.csv"),
    # a table's reference CSVs are its rule's `references` param (data_fingerprint), each its own; no
    # figure reads one (reports.figures.build_figure refuses the read)
}

#: job kind -> the installed distributions whose version can change its numbers: a rule's `versions` param
#: (installed_versions), so an upgrade reruns the jobs it can change. numpy draws the splits and traces (its
#: Generator's streams are not promised across versions); torch and numpy train (both key a training
#: checkpoint too, pipeline.checkpoint_key). After an upgrade the runs, splits and traces of the old
#: versions stayed "Nothing to be done" while a later edit retrained some runs only. Tables, figures and
#: mirrors format numbers (pandas, matplotlib) and are left out: a version there changes bytes, not numbers
VERSIONS: dict[str, tuple[str, ...]] = {"split": ("numpy",), "trace": ("numpy",), "train": ("numpy", "torch")}


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
    names = _parsed(source.encode("utf-8"))[1]
    if names is None:  # it does not parse: raise ast's SyntaxError, naming the line
        names = _import_names(source.encode("utf-8"))
    return frozenset(n for n in names if module_file(n) is not None)


def _import_names(source: bytes) -> frozenset[str]:
    """Every module name a file imports anywhere in it, absolute imports only, hetfl's or not."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return frozenset(names)


#: bumped when what _parsed keeps changes, so no entry of an older form is read
PARSE_CACHE_FORMAT = 1


def parse_cache_dir() -> Path:
    """Where _parsed keeps its entries between processes: $XDG_CACHE_HOME/hetfl/sources, else
    ~/.cache/hetfl/sources. Safe to delete at any time."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "hetfl" / "sources"


@functools.cache
def _parsed(source: bytes) -> tuple[bytes, frozenset[str] | None]:
    """A Python file's code_text and the modules it imports (_import_names; None where it does not
    parse), kept on disk between processes (parse_cache_dir), a file per source named by the sha256 of
    its bytes, of the Python version (tokenize and ast are the interpreter's) and of PARSE_CACHE_FORMAT:
    an edited file is another entry, so none is ever stale. Every training job, split job and Snakemake
    start tokenized and parsed its closure anew (69 files, 0.7 s of a 3 s dry run on a 2-core AVX2
    host). An entry that cannot be read is computed again, and one that cannot be written is not kept."""
    key = hashlib.sha256(f"{PARSE_CACHE_FORMAT}\0{sys.version}\0".encode() + source).hexdigest()
    path = parse_cache_dir() / f"{key}.json"
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
        names = entry["imports"]
        return (base64.b64decode(entry["code"], validate=True),
                None if names is None else frozenset(names))
    except (OSError, ValueError, KeyError, TypeError):  # none yet, or one cut short
        pass
    code = _code_text(source)
    try:
        imports: frozenset[str] | None = _import_names(source)
    except (SyntaxError, ValueError):  # code_text hashes such a file as it is; _imports_in raises
        imports = None
    from hetfl.io import atomic_write_text

    kept = {"code": base64.b64encode(code).decode(), "imports": None if imports is None else sorted(imports)}
    try:
        atomic_write_text(path, json.dumps(kept))
    except OSError:  # a read-only home, a full disk: the next process parses again
        pass
    return code, imports


#: hetfl modules that are no job's code though jobs import them: this module decides what reruns and what
#: run.json says of the code (the fingerprint, the git state), and computes no number. In the training
#: closure (pipeline imports it), any edit of it retrained every run; a change of what it hashes reaches a
#: job through the files hashed, and a change of the git state it reads is provenance, as a commit is
NOT_CODE = frozenset({"hetfl.fingerprint"})


@functools.cache
def closure(entries: tuple[str, ...]) -> tuple[Path, ...]:
    """Every hetfl source file reachable by imports from the entry modules (and their parent packages),
    NOT_CODE's left out."""
    seen: set[Path] = set()
    todo = list(entries)
    while todo:
        name = todo.pop()
        parts = name.split(".")
        for i in range(1, len(parts) + 1):  # importing a.b.c runs a/__init__ and a/b/__init__ too
            if ".".join(parts[:i]) in NOT_CODE:
                break
            path = module_file(".".join(parts[:i]))
            if path is None or path in seen:
                continue
            seen.add(path)
            todo.extend(_imported(path))
    return tuple(sorted(seen))


def job_entries(kind: str, job: str | None = None) -> tuple[str, ...]:
    """The entry modules of `kind`'s job `job`: the kind's ENTRIES and, for a kind with a registry
    (REGISTRIES), the modules its entry `job` names (None: every entry's, the code of all its jobs)."""
    if kind not in ENTRIES:
        raise ValueError(f"job kind '{kind}' is unknown; allowed: {', '.join(ENTRIES)}")
    if kind not in REGISTRIES:
        if job is not None:
            raise ValueError(f"job kind '{kind}' has no jobs by name (job '{job}'); allowed: a job of "
                             f"{', '.join(REGISTRIES)}")
        return ENTRIES[kind]
    return ENTRIES[kind] + tuple(pkgutil.resolve_name(REGISTRIES[kind])(job))


def algorithm_modules(algorithms: Iterable[str]) -> tuple[str, ...]:
    """The modules that define the given algorithms (their classes are imported by name at run time)."""
    from hetfl.algorithms import CATALOG

    return tuple(sorted({CATALOG[a].target.split(":")[0] for a in algorithms if a in CATALOG}))


def _spec(name: str) -> importlib.machinery.ModuleSpec | None:
    """The spec of module `name`, found without importing it or its packages (a package's __init__ may be
    slow, or a plugin's code: the workflow computes fingerprints when it builds its DAG); None where
    there is no such module (`a.b.Name`: a name, not a module)."""
    parts = name.split(".")
    try:
        spec = importlib.util.find_spec(parts[0])
    except (ImportError, ValueError, AttributeError):
        return None
    for i in range(2, len(parts) + 1):
        if spec is None or not spec.submodule_search_locations:
            return None
        full = ".".join(parts[:i])
        module = sys.modules.get(full)
        spec = (getattr(module, "__spec__", None) if module is not None
                else importlib.machinery.PathFinder.find_spec(full, list(spec.submodule_search_locations)))
    return spec


def _location(spec: importlib.machinery.ModuleSpec) -> Path | None:
    """The file a spec loads (a package's __init__.py, an extension module), else its first directory (a
    namespace package), else None (built in, frozen)."""
    if spec.has_location and spec.origin:
        return Path(spec.origin)
    locations = list(spec.submodule_search_locations or ())
    return Path(locations[0]) if locations else None


@functools.cache
def _installed_dirs() -> tuple[Path, ...]:
    """Where installed distributions live: this interpreter's site-packages (a venv's and the user's)."""
    dirs = {sysconfig.get_paths()[key] for key in ("purelib", "platlib")}
    dirs.update(site.getsitepackages() if hasattr(site, "getsitepackages") else ())
    if site.ENABLE_USER_SITE:
        dirs.add(site.getusersitepackages())
    return tuple(Path(d).resolve() for d in dirs)


@functools.cache
def _distributions() -> Mapping[str, list[str]]:
    """top-level module -> the installed distributions that provide it (read once a process: 0.2 s)."""
    from importlib import metadata

    return metadata.packages_distributions()


def _distribution_versions(top: str, location: Path) -> dict[str, str] | None:
    """{distribution: version} of the installed distribution(s) that module `top` at `location` comes
    from; None where `location` is not under site-packages or no installed distribution names it (then it
    is local code, hashed by its files)."""
    from importlib import metadata

    resolved = location.resolve()
    if not any(resolved.is_relative_to(d) for d in _installed_dirs()):
        return None
    versions = {}
    for dist in _distributions().get(top, ()):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return versions or None


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


#: installed distributions whose versions key a training checkpoint already (pipeline.checkpoint_key) and
#: that hetfl's own code imports too: a plugin's import of them adds nothing to its fingerprint
KEYED_ELSEWHERE = frozenset({"torch", "numpy"})


@dataclass(frozen=True)
class OutsideCode:
    """The code outside hetfl that modules (a plugin's algorithm) run: see outside_code."""

    files: dict[str, Path]  # module -> its file: local code, hashed
    distributions: dict[str, str]  # installed distribution -> version, keyed by both
    hetfl: tuple[str, ...]  # hetfl modules they import (the closure follows them)


def outside_code(modules: Iterable[str]) -> OutsideCode:
    """What modules outside hetfl (an algorithm registered by a plugin) run, followed through their imports
    (anywhere in a file, relative imports included), transitively, and through the packages above each
    module (importing a.b runs a/__init__.py):

    - local code, every module that is neither the standard library nor an installed distribution (the
      plugin's package, a sibling module or package on sys.path, an editable install's source): its file;
    - the plugin's own top-level packages: their files even where installed into site-packages (a
      reinstall of the same version with edited code);
    - another installed distribution: its name and version, not followed (torch and numpy: KEYED_ELSEWHERE);
    - hetfl's modules: named, for the closure.

    Editing a plugin's algorithm left every run "Nothing to be done" while its file was left out, and so
    did editing the helper module of its package that its update came from while only the file itself was
    in, and a helper module next to the package while only the plugin's own package was followed (three
    audits)."""
    files: dict[str, Path] = {}
    distributions: dict[str, str] = {}
    inside: set[str] = set()
    todo = list(modules)
    roots = {m.split(".")[0] for m in todo if module_file(m) is None}
    tops: dict[str, bool] = {}  # top-level module -> local (followed), or not
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        top = name.split(".")[0]
        if top == "hetfl":
            if module_file(name) is not None:
                inside.add(name)
            continue
        if top in sys.stdlib_module_names or top in sys.builtin_module_names:
            continue
        if top not in tops:
            spec = _spec(top)
            location = None if spec is None else _location(spec)
            versions = None if location is None or top in roots else _distribution_versions(top, location)
            tops[top] = location is not None and versions is None
            distributions.update((d, v) for d, v in (versions or {}).items() if d not in KEYED_ELSEWHERE)
        if not tops[top]:
            continue
        spec = _spec(name)
        path = None if spec is None else _location(spec)
        if path is None or not path.is_file():  # a namespace package (no file), or no module
            continue
        files[name] = path
        parts = name.split(".")
        todo.extend(".".join(parts[:i]) for i in range(1, len(parts)))
        if path.suffix == ".py":  # an extension module is hashed, not read
            todo.extend(_plugin_imports(path.read_text(encoding="utf-8"), name, path.name == "__init__.py"))
    return OutsideCode(files, distributions, tuple(sorted(inside)))


def outside_files(modules: Iterable[str]) -> dict[str, Path]:
    """module -> file of the local code outside hetfl that modules run (outside_code)."""
    return outside_code(modules).files


def code_text(source: bytes) -> bytes:
    """A Python file's bytes as its fingerprint hashes them: without its comments and without the lines
    that hold nothing else or nothing at all (outside strings), the rest byte for byte, docstrings
    included (an argparse description or a caption may print one). An edit of a comment or of blank lines
    then reruns nothing: it retrained every run of a grid whose closure held the file, hours at paper
    scale. Text that does not tokenize is hashed as it is. Kept by the bytes (_parsed), as the imports are."""
    return _parsed(source)[0]


def _code_text(source: bytes) -> bytes:
    """code_text, computed."""
    try:
        tokens = list(tokenize.tokenize(io.BytesIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return source
    encoding = tokens[0].string if tokens and tokens[0].type == tokenize.ENCODING else "utf-8"
    lines = source.splitlines(keepends=True)
    comments = {t.start[0]: t.start[1] for t in tokens if t.type == tokenize.COMMENT}
    code_rows = {row for t in tokens if t.type not in (tokenize.COMMENT, tokenize.NL, tokenize.ENCODING,
                                                       tokenize.ENDMARKER, tokenize.DEDENT)
                 for row in range(t.start[0], t.end[0] + 1)}
    out = []
    for row, line in enumerate(lines, 1):
        if row not in code_rows:
            continue  # blank, or a comment alone (a line inside a string belongs to its STRING token)
        if row in comments:  # tokenize counts columns in characters
            text = line.decode(encoding)
            line = text[:comments[row]].rstrip().encode(encoding) + b"\n"
        out.append(line)
    return b"".join(out)


def _hashed(path: Path) -> bytes:
    """What a fingerprint hashes of a file: a Python file's code_text, any other file's bytes."""
    data = path.read_bytes()
    return code_text(data) if path.suffix == ".py" else data


@functools.cache
def cli_defaults(verb: str) -> str:
    """cli.py is in no closure (its imports inside each command would put every module in every kind's code):
    an edit of a default a rule leaves out (`hetfl train --cpu-workers`, `hetfl track --rounds`) reran
    nothing. So a kind's fingerprint hashes this instead: the defaults of `hetfl <verb>`'s options, as
    sorted JSON, what the verb does with an option its rule does not pass. A default that JSON cannot write
    fails here, at the DAG's build, not in a job."""
    import argparse

    from hetfl.cli import build_parser

    parser = build_parser()
    verbs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    defaults = {a.dest: a.default for a in verbs.choices[verb]._actions
                if a.default != argparse.SUPPRESS}  # --help's
    return json.dumps(defaults, sort_keys=True)


@functools.cache
def fingerprint(kind: str, algorithms: tuple[str, ...] = (), job: str | None = None) -> str:
    """16 hex digits of sha256 over the closure of the entries of `kind`'s job `job` (job_entries: a table's
    builder's modules, say; None: every job's of the kind; train: plus the algorithms' modules and the
    code outside hetfl they run, outside_code) and its data files, each file hashed with its path relative
    to the package (outside hetfl: its module name; an installed distribution: name==version)."""
    entries = job_entries(kind, job)
    modules = algorithm_modules(algorithms)
    outside = outside_code(modules)
    files = set(closure(entries + modules + outside.hetfl))
    for pattern in DATA.get(kind, ()):
        files.update(PACKAGE.glob(pattern))
    h = hashlib.sha256()
    for path in sorted(files):
        h.update(str(path.relative_to(PACKAGE)).encode() + b"\0" + _hashed(path) + b"\0")
    for name, path in sorted(outside.files.items()):
        h.update(name.encode() + b"\0" + _hashed(path) + b"\0")
    for dist, version in sorted(outside.distributions.items()):
        h.update(f"{dist}=={version}".encode() + b"\0")
    if kind in ENTRIES:  # each kind's rule calls `hetfl <kind>` (split_figure: split-figure)
        h.update(b"cli\0" + cli_defaults(kind.replace("_", "-")).encode() + b"\0")
    return h.hexdigest()[:16]


@functools.cache
def data_fingerprint(files: tuple[str, ...]) -> str:
    """16 hex digits of sha256 over package files (paths relative to the package), each hashed with its
    path: the data a job reads where the jobs of one kind read different files (a table's reference CSVs,
    hetfl.reports.tables.reference_files), passed as a param of its own beside the code's."""
    h = hashlib.sha256()
    for rel in files:
        h.update(rel.encode() + b"\0" + (PACKAGE / rel).read_bytes() + b"\0")
    return h.hexdigest()[:16]


def installed_versions(kind: str, extra: Iterable[str] = ()) -> str:
    """`name==version` of VERSIONS[kind] and `extra`, installed here, sorted and joined by spaces ("name==?"
    where one is not installed): a rule's `versions` param. The workflow's jobs import what its process
    would (the same environment; a cluster node runs the submitting host's venv)."""
    from importlib import metadata

    def version(dist: str) -> str:
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            return "?"

    return " ".join(f"{d}=={version(d)}" for d in sorted({*VERSIONS.get(kind, ()), *extra}))

#: environment variables through which the workflow hands its checkout's git state to jobs on nodes
#: without git (workflow/rules/common.smk sets them; SLURM passes the submitting environment on)
GIT_ENV = ("HETFL_GIT_COMMIT", "HETFL_GIT_DIRTY")


def git_state(environ: Mapping[str, str] | None = None) -> tuple[str, bool | None]:
    """(commit, dirty) of the checkout hetfl runs from: dirty = uncommitted changes under src/hetfl.
    Where git cannot answer (no git on a cluster node, no checkout, no commit yet), the state the workflow
    recorded in ``GIT_ENV`` on its host; else ("unknown", None)."""
    try:
        # one read of the checkout for both (two, rev-parse and status, disagreed across a commit between
        # them): the header "# branch.oid <commit>" ("(initial)" before the first commit), then a line per
        # changed or untracked path under the package
        lines = subprocess.run(["git", "status", "--porcelain=v2", "--branch", "--", "."],
                               capture_output=True, text=True, check=True, cwd=PACKAGE).stdout.splitlines()
        commit = next((line.split()[2] for line in lines if line.startswith("# branch.oid ")), "(initial)")
        if commit != "(initial)":
            return commit, any(not line.startswith("#") for line in lines)
    except (OSError, subprocess.CalledProcessError):
        pass
    env = os.environ if environ is None else environ
    dirty = {"true": True, "false": False}.get(env.get(GIT_ENV[1], ""))
    return env.get(GIT_ENV[0]) or "unknown", dirty


def git_environ() -> dict[str, str]:
    """``GIT_ENV`` for jobs of a workflow run from this checkout (empty where git cannot answer here)."""
    commit, dirty = git_state({})
    if commit == "unknown":
        return {}
    return {GIT_ENV[0]: commit, GIT_ENV[1]: "unknown" if dirty is None else str(dirty).lower()}
