"""The docs against the code they describe: checks cheap enough to run on every change, for the drift a
reader meets first (a rule missing from the flow diagram, a flag or environment variable renamed or added
without a word). docs/tracking.md's tags have their own test (tests/test_tracking.py)."""

import argparse
import re
from pathlib import Path

from hetfl import cli

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {flag for action in parser._actions for flag in action.option_strings} - {"-h", "--help"}


def _bench_flags() -> set[str]:
    """`hetfl bench`'s flags, read from its source (its parser is built inside bench.main, which imports
    torch)."""
    text = (ROOT / "src/hetfl/bench.py").read_text()
    flags = set(re.findall(r'add_argument\(\s*"(--[\w-]+)"', text))
    boolean = re.findall(r'add_argument\(\s*"--([\w-]+)"[^)]*BooleanOptionalAction', text)
    return flags | {f"--no-{name}" for name in boolean}


def _verb_flags() -> dict[str, set[str]]:
    return {**{verb: _flags(p) for verb, p in _subparsers().items()}, "bench": _bench_flags()}


def test_the_flow_diagram_names_every_rule():
    """docs/architecture.md's diagram lacked split_large (3589ef1), report_table and fidelity_summary."""
    text = (ROOT / "docs/architecture.md").read_text()
    diagram = text.split("```", 2)[1]
    rules = set()
    for smk in sorted((ROOT / "workflow/rules").glob("*.smk")):
        rules |= set(re.findall(r"^rule (\w+):", smk.read_text(), flags=re.M))
    missing = sorted(r for r in rules if not re.search(rf"\brule {r}\b", diagram))
    assert not missing, f"rules missing from docs/architecture.md's diagram: {missing}"
    assert "rule train_<experiment>" in diagram  # the generated training rules (workflow/rules/train.smk)


def test_every_flag_the_docs_give_a_hetfl_command_exists():
    """Each `hetfl <verb> ... --flag` on one line of README.md or docs/ names a flag of that verb."""
    flags = _verb_flags()
    wrong = []
    for path in DOCS:
        for number, line in enumerate(path.read_text().splitlines(), 1):
            for m in re.finditer(r"\bhetfl ([a-z][\w-]*)([^`|\n]*)", line):
                verb, rest = m.groups()
                if verb not in flags:
                    continue  # prose: "hetfl reads", "hetfl uses" ...
                rest = re.split(r"\bhetfl [a-z]", rest)[0]  # up to the next command on the line
                wrong += [f"{path.name}:{number}: hetfl {verb} {flag}"
                          for flag in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", rest)
                          if flag not in flags[verb]]
    assert not wrong, wrong


def test_every_synopsis_lists_every_flag():
    """A synopsis line `hetfl <verb> [--...` (docs/engine.md: bench, project) lists all the verb's flags:
    bench's had no --tf32."""
    flags = _verb_flags()
    seen = set()
    for path in DOCS:
        for block in re.findall(r"^```\n(hetfl ([a-z][\w-]*) (?:[A-Z]+ )*\[.*?)^```", path.read_text(),
                                flags=re.M | re.S):
            text, verb = block
            listed = set(re.findall(r"(?<![\w-])(--[a-z][\w-]*)", text))
            missing, unknown = sorted(flags[verb] - listed), sorted(listed - flags[verb])
            assert not missing and not unknown, f"{path.name}: {verb}: missing {missing}, unknown {unknown}"
            seen.add(verb)
    assert {"bench", "project"} <= seen


def test_every_hetfl_environment_variable_is_documented_and_read():
    """HETFL_* variables that src/, workflow/, scripts/ or the Makefile read are named in README.md or docs/,
    and every one the docs name is read (scripts/slurm-local-up's HETFL_LOCAL_PARTITION was in no doc)."""
    code = ""
    for base in ("src", "workflow", "scripts"):
        for path in sorted((ROOT / base).rglob("*")):
            if path.is_file() and path.suffix not in (".pyc", ".png", ".npz"):
                code += path.read_text(errors="ignore")
    code += (ROOT / "Makefile").read_text() + (ROOT / "Snakefile").read_text()
    docs = "".join(path.read_text() for path in DOCS)
    read, documented = (set(re.findall(r"\bHETFL_[A-Z0-9_]*[A-Z0-9]", text)) for text in (code, docs))
    assert read - documented == set(), "read but in no doc"
    assert documented - read == set(), "documented but read nowhere"


def _schema_keys(node: object) -> set[str]:
    """Every property name of the config schema, at any depth."""
    keys: set[str] = set()
    if isinstance(node, dict):
        keys |= set(node.get("properties") or {})
        for value in node.values():
            keys |= _schema_keys(value)
    elif isinstance(node, list):
        for value in node:
            keys |= _schema_keys(value)
    return keys


def test_every_config_key_is_named_in_the_docs():
    """Each key of the config schema appears in README.md or docs/ (the schema describes it; a reader of
    the docs should meet it too): batch_size, trace_order and event.stagger were in none."""
    from hetfl.config import load_schema

    docs = "".join(path.read_text() for path in DOCS)
    missing = sorted(k for k in _schema_keys(load_schema()) if not re.search(rf"\b{re.escape(k)}\b", docs))
    assert not missing, f"config keys no doc names: {missing}"
