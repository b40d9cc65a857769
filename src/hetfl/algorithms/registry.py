"""Where algorithms come from: hetfl's own catalog plus every package that registers one.

A package adds an algorithm without touching hetfl by declaring an entry point in the group
``hetfl.algorithms`` (pyproject.toml: ``[project.entry-points."hetfl.algorithms"]``), named as the
algorithm, whose object is either

- an ``AlgorithmEntry`` (preferred: its module need not import torch, so validating a config stays fast),
  e.g. ``fedfoo = "fedfoo_pkg.registration:ENTRY"``; or
- an ``Algorithm`` subclass with class attributes ``name`` and ``Params`` (and optionally ``paper`` and
  ``label``), e.g. ``fedfoo = "fedfoo_pkg.algo:FedFoo"``.

The config schema's algorithm enum, `hetfl algorithms`, the smoke grid (`algorithms: all`) and the tables'
method labels all read the merged catalog. docs/adding-an-algorithm.md walks through both routes.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import functools
import importlib.util
import warnings
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from hetfl.algorithms.hptypes import hyper_type

ENTRY_POINT_GROUP = "hetfl.algorithms"


@dataclass(frozen=True)
class AlgorithmEntry:
    """One registered algorithm: where its class lives, its hyperparameters and its source."""

    name: str
    target: str  # "module:Class", imported on demand (torch stays out of config validation)
    params: type  # a dataclass; fields made with hparams.hyper carry their description and range
    paper: str
    label: str = ""  # the method's name in the papers' tables (e.g. "VRL-SGD"); "" = name
    # Ruan et al.'s aggregation schemes the algorithm composes with, and why others are refused: an
    # algorithm that carries its own step correction must not get Scheme C's E/s on top of it, nor run
    # without it when the correction IS Scheme C (docs/algorithms.md, "Schemes and step corrections")
    schemes: tuple[str, ...] = ("A", "B", "C")
    schemes_why: str = ""
    # why the algorithm refuses an event that moves the objective's weights p^k (an arrival, a departure
    # under "exclude"): server state kept as a running sum Σ p^k (·)_k, which a renormalised p leaves off
    # its invariant for the rest of the run; "" = events allowed (docs/events.md, "Algorithms with state")
    events_why: str = ""

    @property
    def display(self) -> str:
        return self.label or self.name


def entry_from(obj: Any, name: str, source: str) -> AlgorithmEntry:
    """The AlgorithmEntry an entry point's object stands for; ValueError saying what is wrong."""
    if isinstance(obj, AlgorithmEntry):
        entry = obj
    elif isinstance(obj, type) and hasattr(obj, "Params"):
        entry = AlgorithmEntry(name=getattr(obj, "name", name), target=f"{obj.__module__}:{obj.__qualname__}",
                               params=obj.Params, paper=getattr(obj, "paper", f"registered by {source}"),
                               label=getattr(obj, "label", ""),
                               schemes=tuple(getattr(obj, "schemes", ("A", "B", "C"))),
                               schemes_why=getattr(obj, "schemes_why", ""),
                               events_why=getattr(obj, "events_why", ""))
    else:
        raise ValueError(f"it is a {type(obj).__name__}; allowed: an AlgorithmEntry or an Algorithm subclass")
    if entry.name != name:
        raise ValueError(f"it registers the name '{entry.name}' under the entry point name '{name}'; "
                         "allowed: the same name for both")
    if not dataclasses.is_dataclass(entry.params):
        raise ValueError(f"its hyperparameters {entry.params!r} are not a dataclass")
    for f in dataclasses.fields(entry.params):
        hyper_type(f)  # a type a config cannot give was accepted here and refused every value later
    return entry


def _source_file(module: str) -> Path | None:
    """The .py file of an absolute module name, found without importing anything (find_spec of a dotted
    name imports its parents, a plugin's __init__ perhaps torch); None when it has none to read."""
    top, *rest = module.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    if not rest:
        return Path(spec.origin) if spec.origin and spec.origin.endswith(".py") else None
    for loc in spec.submodule_search_locations or ():
        base = Path(loc).joinpath(*rest)
        for path in (base.with_suffix(".py"), base / "__init__.py"):
            if path.is_file():
                return path
    return None


def _installed(top: str) -> bool:
    """Whether a top-level module can be found (find_spec of a top-level name imports nothing)."""
    try:
        return importlib.util.find_spec(top) is not None
    except (ImportError, ValueError):  # a module in sys.modules without a spec: it is there
        return True


def _import_problem(module: str, path: Path, tree: ast.Module, seen: set[str]) -> str | None:
    """A module-level import of `module` (or of a module of its own package that it imports, such as a
    helper ops.py, transitively) that is not installed where hetfl runs; None when every one is found.
    Imports inside try/if blocks are optional and left alone."""
    top = module.split(".")[0]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in tree.body:
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[:len(package.split(".")) - node.level + 1] if node.level else []
            source = ".".join([*base, *([node.module] if node.module else [])])
            names = [source, *(f"{source}.{a.name}" for a in node.names)]  # `from pkg import ops` too
        else:
            continue
        for name in filter(None, names):
            if not _installed(name.split(".")[0]):
                return f"module {module} ({path}) imports {name}, which is not installed where hetfl runs"
            if name.split(".")[0] != top or top == "hetfl" or name in seen:
                continue  # hetfl's own modules: its test suite imports every one
            seen.add(name)
            own = _source_file(name)
            if own is None:
                continue
            try:
                tree_of = ast.parse(own.read_text(encoding="utf-8"), str(own))
                problem = _import_problem(name, own, tree_of, seen)
            except SyntaxError as err:
                problem = f"module {name} ({own}) is not valid Python: {err.msg}, line {err.lineno}"
            if problem:
                return problem
    return None


@functools.cache
def target_problem(target: str) -> str | None:
    """Why an entry's "module:Class" target cannot be imported, found without importing the module (it
    imports torch): the module must exist, parse, find what it imports at its top level (a plugin's
    missing dependency failed only in its training job, after Snakemake started) and define the name at
    its top level. None when it does, or when the module has no Python source to read (the import then
    decides)."""
    module, sep, attr = target.partition(":")
    if not sep or not module or not attr.isidentifier():
        return f"target {target!r} is not of the form 'module:Class'"
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError) as err:
        return f"target {target!r}: module {module} cannot be found ({err})"
    if spec is None:
        return f"target {target!r}: module {module} cannot be found"
    if not spec.origin or not spec.origin.endswith(".py"):
        return None
    try:
        with open(spec.origin, encoding="utf-8") as fh:
            tree = ast.parse(fh.read(), spec.origin)
    except SyntaxError as err:  # it raised a traceback out of hetfl validate and Snakemake's start
        return f"target {target!r}: module {module} ({spec.origin}) is not valid Python: {err.msg}, line " \
               f"{err.lineno}"
    problem = _import_problem(module, Path(spec.origin), tree, {module})
    if problem:
        return f"target {target!r}: {problem}"
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    if attr not in names:
        return f"target {target!r}: module {module} ({spec.origin}) defines no top-level {attr}"
    return None


# -- does the class fit the engine? -----------------------------------------------------------------------
#: (name, positional parameters, required ones, takes *args) of a method, from its source or its signature
Method = tuple[str, tuple[str, ...], int, bool]


@functools.cache
def _base_class() -> ast.ClassDef:
    """hetfl.algorithms.base.Algorithm's source (read, not imported: base imports torch)."""
    path = Path(__file__).with_name("base.py")
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Algorithm")


def _method(node: ast.FunctionDef) -> Method:
    a = node.args
    names = tuple(x.arg for x in [*a.posonlyargs, *a.args])
    return node.name, names, len(names) - len(a.defaults), a.vararg is not None


@functools.cache
def hooks() -> dict[str, tuple[str, ...]]:
    """The engine's hooks, Algorithm's public plain methods: name -> positional parameters (self first)."""
    return {m[0]: m[1] for m in map(_method, (n for n in _base_class().body if isinstance(n, ast.FunctionDef)
                                               and not n.decorator_list and not n.name.startswith("_")))}


@functools.cache
def _base_names() -> frozenset[str]:
    """Every name Algorithm defines (methods, properties, class attributes)."""
    names = {n.name for n in _base_class().body if isinstance(n, ast.FunctionDef)}
    for n in _base_class().body:
        if isinstance(n, (ast.Assign, ast.AnnAssign)):
            for target in n.targets if isinstance(n, ast.Assign) else [n.target]:
                names.update(x.id for x in ast.walk(target) if isinstance(x, ast.Name))
    return frozenset(names)


def name_problem(owner: str) -> str:
    """Why a class that defines `name` other than as a plain string does not fit the engine: every instance
    is named as registered (hetfl.algorithms.make_algorithm), which a property cannot take."""
    return (f"{owner} defines name as a method or property; allowed: a plain class attribute "
            "(name = \"...\"), or none: each instance is named as the algorithm is registered")


def method_problem(owner: str, method: Method) -> str | None:
    """Why a method a subclass of Algorithm defines does not fit the engine, or None: a hook whose
    positional parameters the engine's call cannot fill, or a public name one typo away from a hook's (the
    engine never calls it, and the algorithm silently runs its base class's hook: FedAvg's)."""
    name, params, required, varargs = method
    wanted = hooks().get(name)
    if wanted is not None:
        if required > len(wanted) or (len(params) < len(wanted) and not varargs):
            return (f"{owner}.{name}({', '.join(params)}) takes {len(params)} positional parameters; "
                    f"allowed: {name}({', '.join(wanted)}), the hook the engine calls")
        return None
    if name.startswith("_") or name in _base_names():
        return None
    close = difflib.get_close_matches(name, list(hooks()), n=1, cutoff=0.85)
    if close:
        return (f"{owner} defines {name}, which is no hook of Algorithm: the engine never calls it and the "
                f"algorithm runs its base class's {close[0]}; allowed: a hook's name ({close[0]}?), or a "
                f"helper named apart from the hooks (_{name})")
    return None


def _class_source(target: str) -> tuple[ast.Module, ast.ClassDef] | None:
    """The parsed module of a "module:Class" target and its class's node, read without importing the
    module; None where the module has no Python source or does not define the class at its top level
    (target_problem says why)."""
    module, _, attr = target.partition(":")
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    with open(spec.origin, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), spec.origin)
    node = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == attr), None)
    return None if node is None else (tree, node)


@functools.cache
def class_problem(target: str) -> str | None:
    """Why the class a "module:Class" target names does not fit the engine, read from its module's source
    without importing it: no base class, a hook whose signature the engine's call does not fit, or a
    misspelt hook. None when nothing is wrong that the class's own source shows (what it inherits from a
    base of its own is checked when the training job imports it: hetfl.algorithms.algorithm_class)."""
    found = _class_source(target)
    if found is None:
        return None
    tree, node = found
    attr = node.name
    if not node.bases:
        return (f"class {attr} has no base class; allowed: a subclass of hetfl.algorithms.base.Algorithm "
                "(its hooks default to FedAvg's)")
    for item in node.body:
        if isinstance(item, ast.FunctionDef) and item.name == "name":
            return name_problem(attr)
        if isinstance(item, ast.FunctionDef) and not item.decorator_list:
            problem = method_problem(attr, _method(item))
            if problem:
                return problem
    return None


@functools.cache
def params_problem(target: str, params: str) -> str | None:
    """Why the class a "module:Class" target names would not take the hyperparameters it is registered with
    (the dataclass named `params`), read from its module's source: `Params = Other`, or no `Params` on a
    class whose bases are all Algorithm (it inherits NoParams). The training job refused both
    (hetfl.algorithms.algorithm_class) after Snakemake had started; a Params inherited from a base of the
    plugin's own, or made at run time, is still left to it. None when nothing is wrong that the source
    shows."""
    found = _class_source(target)
    if found is None:
        return None
    tree, node = found
    attr = node.name
    given = None
    for item in node.body:
        targets = item.targets if isinstance(item, ast.Assign) else [item.target] \
            if isinstance(item, ast.AnnAssign) else []
        if any(isinstance(t, ast.Name) and t.id == "Params" for t in targets):
            given = item.value
    fix = f"allowed: `Params = {params}` on the class, the dataclass it is registered with"
    if given is None:
        only_algorithm = all((isinstance(b, ast.Name) and b.id == "Algorithm")
                             or (isinstance(b, ast.Attribute) and b.attr == "Algorithm") for b in node.bases)
        if node.bases and only_algorithm and params != "NoParams":
            return f"class {attr} sets no Params (so it takes Algorithm's NoParams) but is registered with " \
                   f"{params}; {fix}"
        return None
    name = given.id if isinstance(given, ast.Name) else \
        given.attr if isinstance(given, ast.Attribute) else None
    aliases = {a.asname: a.name for n in tree.body if isinstance(n, ast.ImportFrom)
               for a in n.names if a.asname}
    aliases.update({t.id: n.value.id for n in tree.body if isinstance(n, ast.Assign)
                    and isinstance(n.value, ast.Name) for t in n.targets if isinstance(t, ast.Name)})
    name = aliases.get(name, name)  # `from reg import HalfParams as HP`, `Params = HP`
    if name is not None and name != params:
        return f"class {attr} has Params = {name} but is registered with {params}; {fix}"
    return None


def _entry_points(group: str) -> Iterable[metadata.EntryPoint]:
    return metadata.entry_points(group=group)


def discover(builtin: Mapping[str, AlgorithmEntry], entry_points: Iterable[metadata.EntryPoint] | None = None,
             refused: dict[str, tuple[str, str]] | None = None,
             sources: dict[str, dict[str, str | None]] | None = None,
             check: Callable[[AlgorithmEntry], None] | None = None) -> dict[str, AlgorithmEntry]:
    """hetfl's catalog plus every algorithm registered under ENTRY_POINT_GROUP.

    A plugin that fails to import, registers something else, or reuses a name already taken is left out
    with a warning naming the entry point, its package and the reason: one broken package must not stop
    every hetfl command. `refused` (entry point name -> (the entry point and package, the reason)) is filled
    in for config validation,
    which refuses a config naming such an algorithm and says why (hetfl.config): a name taken by hetfl
    would otherwise run hetfl's algorithm in the plugin's place. `sources` (name -> entry point, package,
    version and target of each plugin registered) is filled in for the runs' provenance (run.json's
    algorithm_source, the MLflow mirror's hetfl.algorithm_* tags). `check(entry)` raises ValueError for a
    plugin's entry to be left out too (hparams.check_defaults: a default its own range refuses).
    """
    catalog = dict(builtin)
    for ep in _entry_points(ENTRY_POINT_GROUP) if entry_points is None else entry_points:
        dist = getattr(ep, "dist", None)
        source = f"entry point '{ep.name} = {ep.value}'" + (f" of package {dist.name}" if dist else "")
        try:
            if ep.name in catalog:
                raise ValueError(f"the name '{ep.name}' is already registered "
                                 f"({catalog[ep.name].target}); allowed: a new name")
            entry = entry_from(ep.load(), ep.name, source)
            if check is not None:
                check(entry)
            catalog[ep.name] = entry
            if sources is not None:
                sources[ep.name] = {"entry_point": f"{ep.name} = {ep.value}",
                                    "package": dist.name if dist else None,
                                    "version": dist.version if dist else None,
                                    "target": catalog[ep.name].target}
        except Exception as err:  # noqa: BLE001 — any failure of foreign code is reported, not raised
            if refused is not None:
                refused[ep.name] = (source, str(err))
            warnings.warn(f"hetfl: algorithm {source} is not registered: {err}", stacklevel=2)
    return catalog
