"""`hetfl <verb>`: every step of the workflow, runnable by hand; Snakemake rules are thin calls of these."""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import errno
import json
import os
import sys
from pathlib import Path
from typing import Any

from hetfl.errors import ConfigError
from hetfl.tracking import MIRROR_ROUNDS


def load_config_arg(flag: str, arg: str | Path) -> dict[str, Any]:
    """hetfl.config.load_config of a flag's config file; a directory or a file that is not text (an .npz) is
    a ConfigError naming the flag, the value and what is allowed, as a missing file and a YAML syntax
    error are (`python -m hetfl.reproduce --configfile DIR` was a traceback)."""
    from hetfl.config import load_config

    allowed = "allowed: a YAML config file, e.g. workflow/config/quick.yaml"
    if Path(arg).is_dir():
        raise ConfigError(f"{flag} has value {str(arg)!r}, which is a directory; {allowed}")
    try:
        return load_config(arg)
    except UnicodeDecodeError as err:
        raise ConfigError(f"{flag} has value {str(arg)!r}, which is not a text file ({err.reason} at byte "
                          f"{err.start}); {allowed}") from None


def _cmd_validate(args: argparse.Namespace) -> int:
    from hetfl.config import check_data, expand_runs

    config = load_config_arg("config", args.config)
    runs = list(expand_runs(config))
    if not args.no_data:  # what the workflow's start refuses too (hetfl.config.check_data)
        check_data(config, splits_root=args.splits_root)
    print(f"{args.config}: valid; {len(config['experiments'])} experiment(s), {len(runs)} run(s)")
    return 0


def _cmd_runs(args: argparse.Namespace) -> int:
    from hetfl.config import expand_runs

    for spec in expand_runs(load_config_arg("config", args.config)):
        print(json.dumps(spec.to_dict()) if args.json else f"{spec.experiment}/{spec.run}")
    return 0


def json_object(flag: str, text: str, example: str) -> dict[str, Any]:
    """A flag's JSON object, or a ConfigError naming the flag."""
    allowed = f"allowed: a JSON object, e.g. {example}"
    value = _loads(flag, text, f"has value {text!r}", allowed)
    if not isinstance(value, dict):
        raise ConfigError(f"{flag} has value {text!r}, which is not allowed; {allowed}")
    return value


def json_arg(flag: str, arg: str, example: str, files: str = "a JSON file") -> Any:
    """A flag's JSON: the text itself where it starts with { or [, else the file it names (`files` says
    which). A missing file or invalid JSON is a ConfigError naming the flag, the value and what is
    allowed."""
    allowed = f"allowed: JSON text, e.g. {example}, or the path of {files}"
    if arg.lstrip()[:1] in ("{", "["):
        return _loads(flag, arg, f"has value {arg!r}", allowed)
    if Path(arg).is_file():
        return _loads(flag, Path(arg).read_text(), f"names the file {arg}", allowed)
    raise ConfigError(f"{flag} has value {arg!r}, which is neither JSON nor an existing file; {allowed}")


def _loads(flag: str, text: str, given: str, allowed: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise ConfigError(f"{flag} {given}, which is not valid JSON ({err.msg} at line {err.lineno} column "
                          f"{err.colno}); {allowed}") from None


def existing_file(flag: str, arg: str, what: str) -> Path:
    """A flag's input file, or a ConfigError naming the flag and the value before any work."""
    if not Path(arg).is_file():
        raise ConfigError(f"{flag} has value {arg!r}, which is not an existing file; allowed: {what}")
    return Path(arg)


def existing_dir(flag: str, arg: str, what: str) -> Path:
    """A flag's input directory, or a ConfigError naming the flag and the value before any work (instead
    of a new directory made where a typo points)."""
    if not Path(arg).is_dir():
        raise ConfigError(f"{flag} has value {arg!r}, which is not an existing directory (relative to "
                          f"{Path.cwd()}); allowed: {what}")
    return Path(arg)


#: the arrays a file of each kind holds, which training reads (data.federation.load_federation,
#: data.traces.load_traces)
NPZ_ARRAYS = {"split": ("x_train", "y_train", "train_offsets", "x_test", "y_test", "test_offsets",
                        "num_classes"),
              "traces": ("fractions", "assignment", "trace_names")}


def npz_problem(path: Path, kind: str) -> str | None:
    """Why the file at `path` is not a `kind` .npz (a torn copy, another kind's file), or None. A missing
    file raises FileNotFoundError."""
    import zipfile

    import numpy as np

    try:
        npz = np.load(path, allow_pickle=False)
    except (ValueError, EOFError, zipfile.BadZipFile) as err:
        return f"it is not an .npz archive ({type(err).__name__})"
    if not isinstance(npz, np.lib.npyio.NpzFile):
        return "it is a single .npy array, not an .npz archive"
    with npz:
        missing = [name for name in NPZ_ARRAYS[kind] if name not in npz.files]
    return f"it has no {', '.join(missing)}" if missing else None


def npz_file(flag: str, arg: str | Path, kind: str, what: str) -> Path:
    """existing_file of a split or traces .npz that holds what training reads, else a ConfigError naming
    the flag and the value before any work (a torn copy was a zipfile traceback once the split loaded)."""
    path = existing_file(flag, str(arg), what)
    why = npz_problem(path, kind)
    if why:
        raise ConfigError(f"{flag} has value {str(arg)!r}, which is not a {kind} file ({why}); allowed: "
                          f"{what}")
    return path


def _file_in_the_way(path: Path) -> Path | None:
    """The nearest of `path` and the folders above it that is there, where it is not a directory (a file, a
    dangling link): what a write under `path` would fail on; None where nothing is in the way."""
    for p in (path, *path.parents):
        if p.exists() or p.is_symlink():
            return None if p.is_dir() else p
    return None


def output_dir(flag: str, arg: str, what: str) -> Path:
    """A flag's output directory: an existing directory or a new one; a ConfigError naming the flag and the
    value before any work where it, or a folder above it, is a file (the training ran, then its first
    write failed)."""
    path = Path(arg)
    if (p := _file_in_the_way(path)) is not None:
        at = "" if p == path else f" ({p} is a file)"
        raise ConfigError(f"{flag} has value {arg!r}, which is not a directory{at}; allowed: {what}")
    return path


def _floats(flag: str, text: str) -> list[float]:
    """A flag's comma-separated numbers (`--a 1,2`); a ConfigError naming the flag and the value otherwise
    (`--a 1,x` said only "could not convert string to float: 'x'")."""
    try:
        return [float(v) for v in text.split(",")]
    except ValueError:
        raise ConfigError(f"{flag} has value {text!r}, which is not allowed; allowed: numbers separated by "
                          "commas, e.g. 1,2") from None


def _checked(flag: str, value: dict[str, Any], cls: type, exclude: tuple[str, ...] = ()) -> None:
    """Every key of a flag's JSON object is a field of `cls`, and `cls` accepts the values."""
    allowed = [f.name for f in dataclasses.fields(cls) if f.name not in exclude]
    for key in value:
        if key not in allowed:
            raise ConfigError(f"{flag} has key '{key}', which is not allowed; "
                              f"allowed keys: {', '.join(allowed)}")
    try:
        cls(**value)
    except (TypeError, ValueError) as err:
        raise ConfigError(f"{flag}: {err}") from None


def _split_spec_from_flags(args: argparse.Namespace) -> dict[str, Any]:
    """The split spec the flags describe, every flag checked before any work starts."""
    from hetfl.data.partition import PartitionSpec
    from hetfl.data.sizes import SizeSpec

    dataset = args.dataset
    own = {"synthetic": ("--alpha", "--beta", "--iid"), "quadratic": ("--a", "--b")}
    given = {"--partition": args.partition is not None, "--alpha": args.alpha is not None,
             "--beta": args.beta is not None, "--iid": args.iid, "--a": args.a is not None,
             "--b": args.b is not None}
    real = dataset not in own
    for flag, is_given in given.items():
        used = flag == "--partition" if real else flag in own[dataset]
        if is_given and not used:
            raise ConfigError(f"{flag} is not used with --dataset {dataset}; allowed instead: "
                              + (", ".join(own[dataset]) if not real else "--partition, --sizes, --data-dir"))
    if dataset == "synthetic" and (args.alpha is None or args.beta is None or args.num_devices < 1):
        raise ConfigError("--dataset synthetic needs --alpha, --beta and --num-devices (>= 1)")
    if dataset == "quadratic":
        ab = {k: _floats(f"--{k}", getattr(args, k) or default)
              for k, default in (("a", "1,2"), ("b", "1,5"))}
        return {"dataset": "quadratic", "quadratic": ab}
    partition = {"label_skew": "iid"}
    if args.partition is not None:
        partition = json_object("--partition", args.partition, '{"label_skew": "dirichlet", "alpha": 0.5}')
        _checked("--partition", partition, PartitionSpec, exclude=("sizes",))
    fixed = partition.get("label_skew") in ("natural", "shards")
    sizes = {"distribution": "equal" if fixed or real else "pareto"}
    if args.sizes is not None:
        sizes = json_object("--sizes", args.sizes, '{"distribution": "pareto", "size": 20}')
        _checked("--sizes", sizes, SizeSpec)
        if real and sizes.get("distribution") == "equal" and len(sizes) > 1:
            extra = next(k for k in sizes if k != "distribution")
            raise ConfigError(f"--sizes has key '{extra}', which is not used with distribution \"equal\" "
                              f"on dataset {dataset} (the label skew deals out every sample; --partition's "
                              '"equal_counts": true trims the devices to one count); '
                              'allowed: {"distribution": "equal"} alone, or a size skew such as '
                              '{"distribution": "pareto", "size": 50}')
    spec = {"dataset": dataset, "num_devices": args.num_devices, "sizes": sizes,
            "test_fraction": args.test_fraction}
    if dataset == "synthetic":
        return {**spec, "alpha": args.alpha, "beta": args.beta, "iid": args.iid}
    return {**spec, "partition": partition, "data_dir": args.data_dir}


def _cmd_split(args: argparse.Namespace) -> int:
    from hetfl.data.build import make_split

    if args.spec:
        text = args.spec if args.spec.lstrip().startswith("{") else \
            existing_file("--spec", args.spec, "a split spec as JSON or a JSON file holding one").read_text()
        split_spec = json_object("--spec", text, '{"dataset": "synthetic", ...} or a file holding one')
    else:
        split_spec = _split_spec_from_flags(args)
    data_dir = split_spec.get("data_dir")
    if data_dir is not None and not Path(str(data_dir)).expanduser().is_dir():
        flag = "--spec's data_dir" if args.spec else "--data-dir"  # online the hub copy would go there
        raise ConfigError(f"{flag} has value \"{data_dir}\", which is not an existing directory (relative to "
                          f"{Path.cwd()}); allowed: a directory holding the data (fetch into it: python -m "
                          "hetfl.data.sources fetch NAME --data-dir DIR)")
    try:
        manifest = make_split(args.out, split_spec, args.seed)
    except ValueError as err:
        if not args.config_key:
            raise
        # the split's own message names the spec's fields; the workflow's user edits a config, told what
        # would do where the message does not say
        hint = "" if "allowed:" in str(err) else ("; allowed: fewer devices (its experiment's num_devices), "
                                                  "another partition or sizes")
        raise ValueError(f"config entry '{args.config_key}' (seed {args.seed}) gives a split the data cannot "
                         f"make: {err}{hint}") from None
    _stamp_split_code(args.out)
    if args.describe:
        _describe_split(Path(args.out), manifest)
    sizes = manifest["train_sizes"]
    print(f"wrote {args.out}: {manifest['num_devices']} devices, train sizes min {min(sizes)} "
          f"median {sorted(sizes)[len(sizes) // 2]} max {max(sizes)}, total {sum(sizes)}; "
          f"sha256 {manifest['sha256'][:12]}", file=sys.stderr)
    return 0


def _describe_split(npz: Path, manifest: dict) -> None:
    import numpy as np
    import pandas as pd

    from hetfl.reports.split_figures import plot_label_distribution

    hist = np.asarray(manifest["label_histogram"])
    if hist.shape[1] <= 20:  # one column per class
        table = pd.DataFrame(hist, columns=[str(c) for c in range(hist.shape[1])])
    else:  # many classes (Shakespeare's 80 characters, CIFAR-100): classes held and the most frequent
        top = np.argsort(-hist, axis=1, kind="stable")[:, :3]
        table = pd.DataFrame({"classes": (hist > 0).sum(axis=1), "top (class:count)": [
            " ".join(f"{c}:{row[c]}" for c in cs if row[c] > 0) for row, cs in zip(hist, top, strict=True)]})
    table.insert(0, "test", manifest["test_sizes"])
    table.insert(0, "train", manifest["train_sizes"])
    table.index.name = "device"
    print(table.to_string())
    print(f"global test set: {manifest.get('global_test_size', 0)} samples (the source's own test split; "
          "0 = none, docs/metrics.md)")
    plot_label_distribution(hist, npz.with_name("labels.png"), title=str(npz.parent))
    print(f"label distribution: {npz.with_name('labels.png')}")


def _cmd_datasets(args: argparse.Namespace) -> int:
    from hetfl.data.sources import SOURCES

    for name, info in SOURCES.items():
        print(f"{name:16s} {info.task:24s} classes={info.num_classes:<4d} input={info.input_shape} "
              f"natural_split={info.natural_split} hub={info.hub_id or '-'}")
    return 0


def _cmd_trace(args: argparse.Namespace) -> int:
    from hetfl.data.traces import NoFitError, make_traces

    try:
        tr = make_traces(args.out, traceset=args.traceset, num_devices=args.num_devices, rounds=args.rounds,
                         seed=args.seed, assignment=args.assignment, p_inactive=args.p_inactive)
    except NoFitError as err:  # a trace the value cannot fit: said with the flag's name
        raise ConfigError(f"--p-inactive has value {args.p_inactive:g}, which is not allowed with traceset "
                          f"{args.traceset} ({err.why})") from None
    print(f"wrote {args.out}: traces {', '.join(tr.trace_names)}; mean fraction {tr.fractions.mean():.3f}, "
          f"inactive {(tr.fractions == 0).mean():.3%}", file=sys.stderr)
    return 0


SPLIT_CODE_KEY = "code_fingerprint"  # manifest.json: hetfl.fingerprint of the split code that made it


def _stamp_split_code(npz: Path | str) -> None:
    """Record in the split's manifest.json the fingerprint of the code that made it (`hetfl train --config`
    makes a split again when its code changed; Snakemake reruns it through its code param)."""
    from hetfl.fingerprint import fingerprint
    from hetfl.io import atomic_write_json

    path = Path(npz).with_name("manifest.json")
    atomic_write_json(path, {**json.loads(path.read_text()), SPLIT_CODE_KEY: fingerprint("split")})


def _same_traces(path: Path, spec) -> bool:
    """Whether the trace file holds exactly what the trace code makes now for the run (traces take
    milliseconds to draw, so they are drawn and compared rather than stamped)."""
    import numpy as np

    from hetfl.data.traces import generate_traces, load_traces, parse_traceset
    from hetfl.pipeline import check_traces

    have = load_traces(path)
    check_traces(have, spec, path)
    names = parse_traceset(spec.traceset)
    fresh = generate_traces(len(names), spec.num_devices, spec.rounds, spec.seed, names=names,
                            assignment=spec.trace_assignment, p_inactive=spec.p_inactive)
    return (list(have.trace_names) == list(fresh.trace_names)
            and np.array_equal(have.assignment, fresh.assignment)
            and np.array_equal(have.fractions, fresh.fractions))


def _prepare_by_hand(spec) -> tuple[Path, Path]:
    """`hetfl train --config`: the run's split and traces at their canonical paths, made (again) when they
    are missing, were made for other parameters, or by other code than the split's and traces' now (an
    audit: a split made before an edit of data/synthetic.py was trained on after it)."""
    from hetfl import paths
    from hetfl.data.build import check_split, make_split
    from hetfl.data.traces import make_traces
    from hetfl.fingerprint import fingerprint

    split = paths.split_dir(spec) / "split.npz"
    trace = paths.trace_file(spec)
    try:
        check_split(split, spec.split_spec(), spec.seed)
        if (torn := npz_problem(split, "split")) is not None:
            raise ValueError(f"{split} is not a split file: {torn}")
        made_by = json.loads(split.with_name("manifest.json").read_text()).get(SPLIT_CODE_KEY)
        if made_by != fingerprint("split"):
            raise ValueError(f"it was made by other split code ({made_by or 'not recorded'}, now "
                             f"{fingerprint('split')})")
    except (FileNotFoundError, ValueError) as why:
        if split.exists():
            print(f"hetfl train: making the split again: {why}", file=sys.stderr)
        make_split(split, spec.split_spec(), spec.seed)
        _stamp_split_code(split)
    try:
        if (torn := npz_problem(trace, "traces")) is not None:
            raise ValueError(f"{trace} is not a traces file: {torn}")
        if not _same_traces(trace, spec):
            raise ValueError("the trace code now draws other traces for these parameters")
    except (FileNotFoundError, ValueError) as why:
        if trace.exists():
            print(f"hetfl train: making the traces again: {why}", file=sys.stderr)
        make_traces(trace, traceset=spec.traceset, num_devices=spec.num_devices, rounds=spec.rounds,
                    seed=spec.seed, assignment=spec.trace_assignment, p_inactive=spec.p_inactive)
    return split, trace


def _cmd_train(args: argparse.Namespace) -> int:
    import torch

    from hetfl import paths
    from hetfl.config import RunSpec, by_cell, expand_runs, specs_from_data
    from hetfl.engine import executor
    from hetfl.pipeline import run_cell, run_training

    torch.set_num_threads(args.threads)
    executor.set_cpu_workers(args.cpu_workers)
    for on, flag, what in ((args.graphs, "--graphs", "replays local steps from CUDA graphs"),
                           (args.tf32, "--tf32", "trains with TF32 products on CUDA")):
        if on and args.device == "cpu":
            raise ConfigError(f"{flag} {what}; --device has value 'cpu', which is not allowed with it; "
                              f"allowed: cuda, auto (or leave out {flag})")
    if args.keep_graphs and (args.graphs is False or args.device == "cpu"):
        given = "--no-graphs" if args.graphs is False else "--device cpu"
        raise ConfigError(f"--keep-graphs keeps CUDA graphs across rounds; {given} is not allowed with it; "
                          f"allowed: --graphs or the engine's rule, on --device cuda or auto")
    if args.cell:  # the workflow: every run of one or more cells in this process, cell after cell
        if not (args.split or args.splits_root):
            raise ConfigError("hetfl train --cell needs --split (one cell) or --splits-root")
        data = json_arg("--cell", args.cell, '[{"experiment": ..., "run": ...}]', "a cell file")
        try:
            cells = by_cell(specs_from_data(data))
        except ConfigError as err:
            raise ConfigError(f"--cell: {err}") from None
        if not cells:
            raise ConfigError("--cell has no run spec, which is not allowed; allowed: one or more run specs "
                              '(a list such as [{"experiment": ..., "run": ...}])')
        if args.split:
            npz_file("--split", args.split, "split", "a split.npz written by hetfl split")
        output_dir("--results-root", args.results_root or "results", "a directory (new, or holding results)")
        if args.log_dir:
            output_dir("--log-dir", args.log_dir, "a directory (new, or holding logs)")
        if args.split and len(cells) > 1:
            raise ConfigError(f"hetfl train --split names one split, but --cell has runs of {len(cells)} "
                              f"cells ({', '.join(cells)}); use --splits-root")
        inputs = {key: (Path(args.split or paths.split_dir(specs[0], args.splits_root) / "split.npz"),
                        {s.run: paths.trace_file(s, args.traces_root) for s in specs})
                  for key, specs in cells.items()}
        for key, (split, traces) in inputs.items():  # every cell's, before the first cell trains
            if not split.is_file():
                raise ConfigError(f"--splits-root has value {args.splits_root!r}, which holds no split of "
                                  f"cell {key} ({split} does not exist); allowed: the directory `hetfl "
                                  "split` wrote the cells' splits to (<splits-root>/<experiment>/<setting>/"
                                  "seed<s>/split.npz)")
            if not args.split and (why := npz_problem(split, "split")):
                raise ConfigError(f"--splits-root has value {args.splits_root!r}, whose split of cell {key} "
                                  f"is not a split file ({split}: {why}); allowed: the split.npz `hetfl "
                                  "split` writes (make it again)")
            missing = sorted({str(t) for t in traces.values() if not t.is_file()})
            if missing:
                raise ConfigError(f"--traces-root has value {args.traces_root!r}, which holds no traces of "
                                  f"cell {key} ({', '.join(missing)} do(es) not exist); allowed: the "
                                  "directory `hetfl trace` wrote the runs' traces under (<traces-root>/"
                                  "traces/<traceset>/n<N>_r<R>_seed<s>.npz)")
            for t in sorted(set(traces.values())):
                if why := npz_problem(t, "traces"):
                    raise ConfigError(f"--traces-root has value {args.traces_root!r}, whose traces {t} are "
                                      f"not a traces file ({why}); allowed: the .npz `hetfl trace` writes "
                                      "(make it again)")
        for key, specs in cells.items():
            split, traces = inputs[key]
            statuses = run_cell(specs, split, traces, args.results_root or "results", args.log_dir,
                                device=args.device, checkpoint_every=args.checkpoint_every,
                                graphs=args.graphs, keep_graphs=args.keep_graphs, tf32=args.tf32)
            print(f"cell {key}: " + ", ".join(f"{n} {s}" for n, s in _count(statuses.values())),
                  file=sys.stderr)
        return 0
    if args.spec:
        if not (args.split and args.traces and args.out):
            raise ConfigError("hetfl train --spec needs --split, --traces and --out")
        data = json_arg("--spec", args.spec, '{"experiment": ..., "run": ...}',
                        "a JSON file of one run spec, or an earlier run.json")
        try:
            spec = RunSpec.from_dict(data.get("spec", data) if isinstance(data, dict) else data)
        except ConfigError as err:
            raise ConfigError(f"--spec: {err}") from None
        split = npz_file("--split", args.split, "split", "a split.npz written by hetfl split")
        trace = npz_file("--traces", args.traces, "traces", "a traces .npz written by hetfl trace")
        out = output_dir("--out", args.out, "a run directory (new, or an earlier run's)")
    else:
        if not (args.config and args.experiment and args.run):
            raise ConfigError("hetfl train needs --cell, --spec, or --config with --experiment and --run")
        given = [flag for flag, value in (("--split", args.split), ("--traces", args.traces)) if value]
        if given:  # they would be ignored: --config makes the run's own at their canonical paths
            raise ConfigError(f"{' and '.join(given)} given with --config, which is not allowed: the run's "
                              f"split and traces are made under data_splits/ from the config; allowed: "
                              f"--split and --traces with --spec (--split with --cell), or leave them out")
        config = load_config_arg("--config", args.config)
        if args.experiment not in config["experiments"]:
            raise ConfigError(f"--experiment has value {args.experiment!r}, which is not allowed; allowed: "
                              f"{', '.join(config['experiments'])} (the experiments of {args.config}; list "
                              f"their runs with: hetfl runs {args.config})")
        runs = [s for s in expand_runs(config) if s.experiment == args.experiment]
        matches = [s for s in runs if s.run == args.run]
        if not matches:
            close = difflib.get_close_matches(args.run, [s.run for s in runs], n=3, cutoff=0.0)
            raise ConfigError(f"--run has value {args.run!r}, which is not a run of experiment "
                              f"{args.experiment} in {args.config}; allowed: its {len(runs)} runs, e.g. "
                              f"{', '.join(close)} (list them with: hetfl runs {args.config})")
        spec = matches[0]
        out = (output_dir("--out", args.out, "a run directory (new, or an earlier run's)") if args.out
               else paths.run_dir(spec))
        split, trace = _prepare_by_hand(spec)
    result = run_training(spec, split, trace, out, device=args.device, checkpoint_every=args.checkpoint_every,
                          graphs=args.graphs, keep_graphs=args.keep_graphs, tf32=args.tf32)
    if not args.no_mlflow:  # by hand: mirror this run (the workflow mirrors per experiment: rule track)
        _mirror_by_hand(out, args.results_root or "results")
    print(f"{spec.experiment}/{spec.run}: {result.status} after {result.rounds_done} rounds -> {out}",
          file=sys.stderr)
    return 0


def _count(values) -> list[tuple[int, str]]:
    from collections import Counter

    return [(n, v) for v, n in sorted(Counter(values).items())]


def _mirror_by_hand(run_dir: Path, results_root: str) -> None:
    try:
        from hetfl.tracking import mirror_run_dirs

        mirror_run_dirs(results_root, [run_dir])
    except Exception as exc:  # results on disk are the source of truth: never lose them to tracking
        print(f"warning: MLflow logging failed ({exc!r}); results are kept in {run_dir}", file=sys.stderr)


def run_paths(paths: list[str]) -> list[Path]:
    """The run directories among the paths `table`, `figure` and `track` are given: a directory holding
    run.json, or a run.json file. Anything else (results/<exp>/mlflow.json, which the README's glob
    results/<exp>/* also matches; an unfinished run's directory) is skipped with a note on stderr; a path
    that does not exist, or no run at all, is an error."""
    runs, skipped = [], []
    for path in map(Path, paths):
        if not path.exists():
            raise ConfigError(f"{path} does not exist; allowed: run directories or their run.json files")
        if path.is_dir() and (path / "run.json").is_file():
            runs.append(path)
        elif path.name == "run.json" and path.is_file():
            runs.append(path.parent)
        else:
            skipped.append(str(path))
    if skipped:
        print(f"note: skipped {len(skipped)} path(s) that are not runs (no run.json): "
              f"{', '.join(skipped[:5])}" + (" ..." if len(skipped) > 5 else ""), file=sys.stderr)
    if not runs:
        raise ConfigError(f"none of the {len(paths)} path(s) given is a run directory (holding run.json) "
                          "or a run.json file")
    return runs


def check_table_reads(what: str, table: str, runs: list[Path]) -> None:
    """Runs that lack what `table` reads (an event table's event of its kind, efl_lambda's EFL runs and
    their λ), refused naming a run and what is allowed, as validation refuses such an experiment
    (config.EVENT_TABLES, config._check_table_fits): `hetfl table fast_reboot` or `hetfl figure
    arrival_curves` on runs without an event was a KeyError traceback ('event_round')."""
    from hetfl.config import EVENT_TABLES
    from hetfl.reports.results import load_run_json

    specs = {d: load_run_json(d)["spec"] for d in runs}
    kind = EVENT_TABLES.get(table)
    for d, spec in specs.items():
        if kind and (spec.get("event") or {}).get("kind") != kind:
            raise ConfigError(f"{what} reads runs with an event of kind {kind}; run {d} has event "
                              f"{json.dumps(spec.get('event'))}, which is not allowed; allowed: the runs of "
                              f"a {table} experiment (config key event: {{kind: {kind}, ...}})")
    if table == "efl_lambda" and not any(s.get("algorithm") == "efl" for s in specs.values()):
        given = sorted({str(s.get("algorithm")) for s in specs.values()})
        raise ConfigError(f"{what} reads EFL's λ; the {len(specs)} run(s) given have algorithm "
                          f"{', '.join(given)}, which is not allowed; allowed: the runs of an efl_lambda "
                          "experiment (efl among its algorithms)")


def _cmd_table(args: argparse.Namespace) -> int:
    from hetfl.reports.tables import build_table

    stale = Path(f"{args.out}.tex")
    if args.readings and stale.exists():  # it wrote the .md and .csv and left the main table's .tex
        raise ConfigError(f"--out has value {args.out!r}, which is not allowed with --readings: it is the "
                          f"stem of a main table ({stale} exists), whose .md and .csv a readings table would "
                          "overwrite, leaving its .tex beside them; allowed: another stem, e.g. "
                          f"{args.out}_readings (the workflow's)")
    runs = run_paths(args.runs)
    check_table_reads(f"table {args.table}", args.table, runs)
    out = build_table(args.table, runs, Path(args.out), readings=args.readings)
    print(f"wrote {out}.{{md,csv{'' if args.readings else ',tex'}}}", file=sys.stderr)
    return 0


def _cmd_algorithms(args: argparse.Namespace) -> int:
    from hetfl.algorithms import CATALOG, describe

    unknown = [n for n in args.name if n not in CATALOG]
    if unknown:
        raise ConfigError(f"algorithm '{unknown[0]}' is unknown; allowed: {', '.join(CATALOG)}")
    for name, entry in CATALOG.items():
        if args.name and name not in args.name:
            continue
        print(f"{name}: {entry.paper}")
        if entry.schemes_why:
            print(f"    schemes: {', '.join(entry.schemes)} only ({entry.schemes_why})")
        params = describe(name)
        if not params:
            print("    (no hyperparameters)")
        for key, default, doc in params:
            print(f"    {key} = {json.dumps(default)}: {doc}")
    return 0


def _cmd_track(args: argparse.Namespace) -> int:
    from hetfl.io import atomic_write_json
    from hetfl.reports.results import METRICS_PARQUET, load_run_json
    from hetfl.tracking import mirror_run_dirs, summary_folder

    if args.out and Path(args.out).is_dir():  # before the mirror, which takes minutes for a large grid
        raise ConfigError(f"--out has value {args.out!r}, which is a directory; allowed: a JSON file to "
                          "write (new, or an earlier mirror's)")
    # --summary FILE, once per file; a bare --summary (None) gives none: the summary files are then none
    summary = None if args.summary is None else [p for p in args.summary if p is not None]
    allowed = ("allowed: the tables and figures to attach to each experiment's summary run (reports/tables/*."
               "{md,csv,tex}, reports/figures/*.{png,svg,caption.html}), one file per --summary")
    given = [p for p in summary or [] if (Path(p).name == "run.json" and Path(p).is_file())
             or (Path(p) / "run.json").is_file()]
    if given:  # `hetfl track --summary RUN/run.json RUN2` (or `--summary RUN RUN2`), meaning a bare --summary
        raise ConfigError(f"--summary has value(s) {', '.join(given)}, which are runs, not tables or "
                          f"figures; {allowed}; give the runs as arguments")
    bad = [p for p in summary or [] if not Path(p).is_file()]
    if bad:  # it said "summary files do not exist" of a directory, without the flag or what it takes
        raise ConfigError(f"--summary has value(s) {', '.join(bad)}, which are not files; {allowed}")
    for path in map(Path, args.runs):  # `--summary T.md T.csv`, the old form: T.csv taken for a run
        if path.is_file() and path.name != "run.json" and summary_folder(path) != "reports":
            raise ConfigError(f"run path {path} is a table or figure, not a run; allowed: run directories or "
                              "their run.json files; --summary takes one file: give each table and figure "
                              "its own --summary (in bash: --summary=reports/tables/<table>.{md,csv,tex})")
    runs = run_paths(args.runs)
    for run in runs:  # as table and figure read them: a malformed run.json was "Expecting value: line 2 ..."
        load_run_json(run)
        if not (run / METRICS_PARQUET).is_file():
            raise ConfigError(f"run {run} has no {METRICS_PARQUET} (its training did not finish); allowed: "
                              f"run directories holding run.json and {METRICS_PARQUET}")
    # it was made where it did not exist (a typo, or the default results/ run from another directory), and a
    # new store in it got the mirror
    existing_dir("--results-root", args.results_root, "the results directory that holds the default "
                 "MLflow store and its lock (results/mlflow.db, results/.mlflow.lock; default: results/, run "
                 "from the project's root)")
    mirror = mirror_run_dirs(args.results_root, runs, description=args.description,
                             summary_files=None if summary is None else [Path(p) for p in summary],
                             rounds=args.rounds,
                             prune=args.prune)
    if args.out:
        atomic_write_json(args.out, mirror.to_dict())
    print(f"mirrored {len(mirror.runs)} run(s) and {len(mirror.summaries)} summary run(s) to "
          f"{mirror.tracking_uri}; {mirror.purged} replaced run(s) purged", file=sys.stderr)
    for name, exp_id in mirror.experiments.items():  # the training-runs view (docs/tracking.md)
        print(f"  {name}: http://127.0.0.1:5000/#/experiments/{exp_id}/runs?workflowType=machine_learning",
              file=sys.stderr)
    return 0


def _cmd_project(args: argparse.Namespace) -> int:
    from hetfl.projection import project

    config = load_config_arg("config", args.config)
    print(f"{args.config}: running every experiment on one seed at {', '.join(map(str, args.fractions))} of "
          f"its rounds, on random data of each source's shape ...", file=sys.stderr)
    result = project(config, args.fractions, args.cores, Path(args.keep) if args.keep else None,
                     Path(args.snakefile))
    print(result.report())
    return 0


def _cmd_figure(args: argparse.Namespace) -> int:
    from hetfl.reports.figures import FIGURES, build_figure

    runs = run_paths(args.runs)
    if args.figure in FIGURES:
        table = FIGURES[args.figure][0]
        check_table_reads(f"figure {args.figure} (of table {table}'s runs)", table, runs)
    build_figure(args.figure, runs, Path(args.out))
    print(f"wrote {args.out}.{{png,svg,caption.html}}", file=sys.stderr)
    return 0


def _cmd_split_figure(args: argparse.Namespace) -> int:
    from hetfl.reports.split_figures import build_split_figure

    build_split_figure(args.manifests, Path(args.out))
    print(f"wrote {args.out}.{{png,caption.html}}", file=sys.stderr)
    return 0


def _cmd_report(args: argparse.Namespace) -> int:
    from hetfl.reports import report_pages as rp

    tables_dir, out = Path(args.tables_dir), Path(args.out)
    if not args.tables:  # tables said "wrote" and wrote nothing; fidelity wrote a summary of 0 tables
        raise ConfigError(f"hetfl report {args.page} names no table, which is not allowed; allowed: one or "
                          "more table names, e.g. accuracy_difference (the <table>.md and .csv in "
                          f"{tables_dir})")
    missing = [f"{n}.{ext}" for n in args.tables for ext in ("md", "csv")
               if not (tables_dir / f"{n}.{ext}").is_file()]
    if missing:  # before writing anything
        raise ValueError(f"--tables-dir {tables_dir} has no {', '.join(missing)}; allowed: tables that "
                         "`hetfl table` wrote there (<table>.md and .csv)")
    # --out under a file said only "File exists: FILE" (tables) or "Not a directory" (fidelity)
    if args.page == "tables":
        output_dir("--out", args.out, "a folder for the table pages (new, or an earlier one's)")
    elif (file := _file_in_the_way(out.parent)) is not None:
        raise ConfigError(f"--out has value {args.out!r}, which is not allowed ({file} is a file); allowed: "
                          "a stem in a folder, e.g. reports/report/fidelity")
    if args.page == "fidelity":
        rp.write_fidelity(args.tables, tables_dir, out)
    else:
        # every table read before any page is written (a bad one left others')
        verdicts = {name: rp.verdict_line(name, tables_dir / f"{name}.csv") for name in args.tables}
        for name, line in verdicts.items():
            rp.write_table_page(name, tables_dir / f"{name}.md", line, out / name)
    print(f"wrote {out}", file=sys.stderr)
    return 0


def int_at_least(minimum: int):
    """An argparse type: an integer >= minimum, else hetfl's message (argparse names the flag)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"has value {text!r}, which is not allowed; "
                                             f"allowed: an integer >= {minimum}")
        return value

    return parse


_nonnegative, _positive = int_at_least(0), int_at_least(1)


def _probability_below_one(text: str) -> float:
    """An argparse type: a float in [0, 1), else hetfl's message (argparse names the flag)."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"has value {text!r}, which is not allowed; allowed: a probability "
                                         f"in [0, 1)")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="hetfl", description=__doc__)
    sub = parser.add_subparsers(dest="verb", required=True)

    p = sub.add_parser("validate", help="validate a workflow config and count its runs")
    p.add_argument("config")
    p.add_argument("--no-data", action="store_true",
                   help="do not check that the data its split jobs read is there (a prepared domainnet or "
                        "digit5 copy; a local copy that is readable; offline, a hub source's copy in the "
                        "datasets cache)")
    p.add_argument("--splits-root", default="data_splits",
                   help="experiments whose splits are all made here, for the config's data by their "
                        "manifest.json, need no data (default: data_splits)")
    p.set_defaults(func=_cmd_validate)

    p = sub.add_parser("runs", help="list the runs a config expands to")
    p.add_argument("config")
    p.add_argument("--json", action="store_true", help="print each run's full spec as JSON")
    p.set_defaults(func=_cmd_runs)

    p = sub.add_parser("algorithms", help="list the algorithms, their papers and hyperparameters")
    p.add_argument("name", nargs="*", help="only these algorithms")
    p.set_defaults(func=_cmd_algorithms)

    sub.add_parser("bench", add_help=False,
                   help="time the batched engine against the per-client loop (hetfl bench --help)")

    p = sub.add_parser("project", help="measure what a grid costs on this machine before running it: the "
                                       "workflow at fractions of its rounds, one seed, random data of the "
                                       "real shapes (docs/engine.md)")
    p.add_argument("config")
    p.add_argument("--fractions", type=float, nargs="+", default=[0.05, 0.1],
                   help="fractions of every run's rounds to time (at least two; default 0.05 0.1)")
    p.add_argument("--cores", type=_positive, default=2, help="snakemake --cores (default 2)")
    p.add_argument("--keep", metavar="DIR", help="run in DIR and keep it (default: a temporary directory); "
                                                  "DIR must not hold an earlier projection")
    p.add_argument("--snakefile", default="Snakefile", help="hetfl's Snakefile (default: ./Snakefile)")
    p.set_defaults(func=_cmd_project)

    p = sub.add_parser("datasets", help="list the dataset sources and where they load from")
    p.set_defaults(func=_cmd_datasets)

    p = sub.add_parser("split", help="generate a federation (per-device train/test data) and its manifest")
    p.add_argument("--spec", help="split spec as JSON (or a JSON file): what RunSpec.split_spec() returns; "
                                  "replaces the flags below")
    p.add_argument("--config-key", default=None,
                   help="the config entry the spec comes from (the workflow passes experiments.<e>.settings."
                        "<s>): a split the data cannot make names it, with the keys to change")
    p.add_argument("--dataset", default="synthetic",
                   help="synthetic | quadratic | a real source (hetfl datasets lists them)")
    p.add_argument("--partition",
                   help='real datasets: label skew as JSON, e.g. {"label_skew": "pathological", "m": 1} '
                        '(default {"label_skew": "iid"})')
    p.add_argument("--data-dir", help="real datasets: cache or pre-fetched copy (default $HETFL_DATA_DIR)")
    p.add_argument("--describe", action="store_true",
                   help="also print per-device sizes and labels and draw labels.png beside split.npz")
    p.add_argument("--alpha", type=float, help="synthetic: required")
    p.add_argument("--beta", type=float, help="synthetic: required")
    p.add_argument("--a", help="quadratic: curvatures a_i, comma-separated (default 1,2)")
    p.add_argument("--b", help="quadratic: optima b_i, comma-separated (default 1,5)")
    p.add_argument("--iid", action="store_true", help="FedProx's SYNTHETIC-IID variant (shared W, b)")
    p.add_argument("--num-devices", type=_nonnegative, default=0,
                   help="synthetic and real datasets: required")
    p.add_argument("--sizes", default=None,
                   help='size distribution as JSON (synthetic: default {"distribution": "pareto"}, with '
                        '"equal" every device gets "size" samples; real datasets: default '
                        '{"distribution": "equal"}: the label skew deals out every sample, and '
                        '--partition\'s "equal_counts": true trims every device to the smallest count)')
    p.add_argument("--test-fraction", type=float, default=0.2)
    p.add_argument("--seed", type=_nonnegative, required=True)
    p.add_argument("--out", required=True, help="path of split.npz (manifest.json is written beside it)")
    p.set_defaults(func=_cmd_split)

    p = sub.add_parser("trace", help="generate participation traces s[R, N] (Ruan et al. Table 2)")
    p.add_argument("--traceset", required=True,
                   help="'T<k>' = the first k traces T_0, T_30, ..., T_lo; or names joined by '-' (T_0-T_hi)")
    p.add_argument("--num-devices", type=_positive, required=True)
    p.add_argument("--rounds", type=_positive, required=True)
    p.add_argument("--seed", type=_nonnegative, required=True)
    p.add_argument("--assignment", default="random", choices=["random", "stratified"],
                   help="device -> trace: uniformly at random (Ruan et al. 5.1) or spread evenly")
    p.add_argument("--p-inactive", type=_probability_below_one, default=0.05,
                   help="inactive probability of T_hi, T_mi, T_lo (unpublished; docs/readings.md)")
    p.add_argument("--out", required=True, help="path of the .npz (a .csv is written beside it)")
    p.set_defaults(func=_cmd_trace)

    p = sub.add_parser("train", help="train one run (or a cell of runs); writes metrics.parquet and run.json")
    p.add_argument("--cell", help="run specs as JSON (a list, or hetfl.config.specs_to_json's form) or a "
                                  "file holding them: the workflow trains one or more cells (runs sharing a "
                                  "split) in one process; needs --split (one cell) or --splits-root")
    p.add_argument("--splits-root", help="with --cell: where data_splits/<experiment>/<setting>/seed<s> are")
    p.add_argument("--traces-root", default="data_splits", help="with --cell: where data_splits/traces is")
    p.add_argument("--log-dir", help="with --cell: write each run's progress to <log-dir>/<run>.log")
    p.add_argument("--checkpoint-every", type=_nonnegative, default=20,
                   help="checkpoint every K rounds so a killed run resumes (0: only the final one)")
    p.add_argument("--spec", help="run spec as JSON, or a path to a JSON file or an earlier run.json")
    p.add_argument("--split")
    p.add_argument("--traces")
    p.add_argument("--out", help="run directory")
    p.add_argument("--config", help="instead of --spec: a workflow config ...")
    p.add_argument("--experiment", help="... the experiment ...")
    p.add_argument("--run", help="... and the run name (see `hetfl runs CONFIG`)")
    p.add_argument("--threads", type=_positive, default=1, help="torch threads (Snakemake passes {threads})")
    p.add_argument("--device", default="cpu", choices=["auto", "cpu", "cuda"],
                   help="where to train (default: cpu; the workflow passes cuda to jobs given a GPU)")
    p.add_argument("--cpu-workers", default="auto", choices=["auto", "on", "off"],
                   help="with --threads above 1 on the CPU: train blocks of clients on separate cores "
                        "(on), or split every kernel over the threads (off); default auto: the rule per "
                        "model measured on a 2-core Zen 3 (the CNNs, VGG, ResNets and LSTMs on workers; "
                        "engine.executor, docs/engine.md); run.json says cpu_workers")
    p.add_argument("--graphs", action=argparse.BooleanOptionalAction, default=None,
                   help="on CUDA, replay local steps from CUDA graphs (engine.graphs), or not (--no-graphs); "
                        "default: the engine's rule per model (logreg, the MLP, the two LSTMs); --graphs "
                        "needs --device cuda or auto (auto without CUDA trains eagerly)")
    p.add_argument("--keep-graphs", action="store_true",
                   help="where CUDA graphs are on (--graphs, or the rule), keep them across rounds "
                        "(engine.graphs.GraphCache): a round that repeats a block's clients, minibatch and "
                        "learning rate replays every step without a new capture")
    p.add_argument("--tf32", action="store_true",
                   help="on CUDA, TF32 products in convolutions, RNNs and matmuls, for speed (default: IEEE "
                        "float32, as on the CPU); still deterministic; run.json says cuda_tf32, and the "
                        "checkpoint key includes it (engine.reproducible)")
    p.add_argument("--no-mlflow", action="store_true", help="do not mirror the run to MLflow")
    p.add_argument("--results-root", help="results directory: --cell writes runs under it; it holds the "
                                          "default MLflow store (default: results/)")
    p.set_defaults(func=_cmd_train)

    p = sub.add_parser("table", help="build a paper table from run directories")
    p.add_argument("table", help="one of the table builders (hetfl.reports.tables.BUILDERS), e.g. "
                                  "accuracy_difference")
    p.add_argument("--out", required=True, help="output stem; .md, .csv and .tex are written")
    p.add_argument("--readings", action="store_true",
                   help="the readings table instead: every cell under every reading of the runs' readings "
                        "axis (.md and .csv; docs/readings.md)")
    p.add_argument("runs", nargs="+", help="run directories or their run.json files (other paths, e.g. "
                                            "results/<experiment>/mlflow.json from a glob, are skipped)")
    p.set_defaults(func=_cmd_table)

    p = sub.add_parser("track", help="mirror finished runs into MLflow (rebuilds the mirror from results/)")
    p.add_argument("--results-root", default="results",
                   help="directory of the default SQLite store and its lock; it must exist (default: "
                        "results)")
    p.add_argument("--prune", action="store_true",
                   help="the runs given are their experiments' whole grid: delete the mirrors of any other "
                        "run of those experiments, and their summary run where --summary is given and makes "
                        "none (the workflow passes it)")
    p.add_argument("--out", help="write the MLflow ids (runs, experiments, summary runs) here as JSON")
    p.add_argument("--description", help="the config's top-level description: each experiment's MLflow "
                                         "description is written from it and the runs' grid (without it, "
                                         "only an experiment with no description gets one)")
    p.add_argument("--summary", action="append", nargs="?", metavar="FILE",
                   help="a table or figure (reports/tables/*.{md,csv,tex}, reports/figures/*.{png,svg,"
                        "caption.html}) to attach to each experiment's summary run; one file each, repeat it "
                        "(in bash: --summary=reports/tables/<table>.{md,csv,tex}); the files given are the "
                        "whole set, and a bare --summary gives none (an experiment without a table). Every "
                        "experiment of the runs given gets all of them, so give one experiment's runs with "
                        "its files (the workflow does)")
    p.add_argument("--rounds", choices=MIRROR_ROUNDS, default="evaluated",
                   help="which rounds' metrics to log: those the run was evaluated at (default; every "
                        "metric at those steps) or all of them; metrics.parquet, an artifact, has all")
    p.add_argument("runs", nargs="+", help="run directories or their run.json files (other paths, e.g. "
                                            "results/<experiment>/mlflow.json from a glob, are skipped)")
    p.set_defaults(func=_cmd_track)

    p = sub.add_parser("figure", help="draw a paper figure from run directories")
    p.add_argument("figure", help="one of the figures (hetfl.reports.figures.FIGURES), e.g. scheme_curves")
    p.add_argument("--out", required=True, help="output stem; .png, .svg and the report's .caption.html are "
                                                "written")
    p.add_argument("runs", nargs="+", help="run directories or their run.json files (other paths are "
                                            "skipped)")
    p.set_defaults(func=_cmd_figure)

    p = sub.add_parser("split-figure", help="the label-distribution chart of an experiment's splits, a panel "
                                            "per manifest, and its report caption (docs/report.md)")
    p.add_argument("--out", required=True, help="output stem; .png and .caption.html are written")
    p.add_argument("manifests", nargs="+", help="the splits' manifest.json files (data_splits/<experiment>/"
                                                "<setting>/seed<s>/manifest.json), one panel each")
    p.set_defaults(func=_cmd_split_figure)

    p = sub.add_parser("report", help="HTML pages and caption fragments for `snakemake --report` "
                                      "(docs/report.md)")
    p.add_argument("page", choices=["tables", "fidelity"],
                   help="tables: <out>/<table>.html and .caption.html per table; fidelity: <out>.html and "
                        "<out>.caption.html, every table's verdict counts")
    p.add_argument("--tables-dir", default="reports/tables", help="where <table>.md and .csv are")
    p.add_argument("--out", required=True, help="output folder (tables) or stem (fidelity)")
    p.add_argument("tables", nargs="*", help="table file names, e.g. accuracy_difference "
                                             "accuracy_difference_readings")
    p.set_defaults(func=_cmd_report)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    from hetfl.engine.allocator import retain_freed_memory

    retain_freed_memory()  # rounds reuse their freed stacks of models instead of faulting in new pages
    if argv[:1] == ["bench"]:  # its own parser: `hetfl bench --help`
        from hetfl.bench import main as bench_main

        return bench_main(argv[1:])
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.verb == "report" and not any(e.startswith("-") for e in extra):
        # argparse fills `tables` (nargs="*") right after `page`, so names given after the options are
        # left over: `hetfl report tables --out DIR NAME` means what `hetfl report tables NAME --out DIR` does
        args.tables = [*args.tables, *extra]
    elif extra and args.verb == "track" and not any(e.startswith("-") for e in extra):
        # `runs` takes the paths before the first option: `hetfl track RUN --summary FILE RUN2` left RUN2 over
        args.runs = [*args.runs, *extra]
    elif extra:
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    try:
        return args.func(args)
    except (ConfigError, ValueError) as exc:
        print(f"hetfl {args.verb}: error: {exc}", file=sys.stderr)
        return 2
    except (MemoryError, RuntimeError) as exc:
        if not _out_of_memory(exc):
            raise
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        print(f"hetfl {args.verb}: error: out of memory: {first}{OUT_OF_MEMORY_HINTS.get(args.verb, '')}",
              file=sys.stderr)
        return 2
    except BrokenPipeError:  # `hetfl runs ... | head`: the reader left; say nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except OSError as exc:  # a full disk, a missing file, no permission: one line, not a traceback
        from hetfl.data.sources import SourceUnavailableError

        # a data set hetfl cannot find says where it looked and how to fetch it: every line of it
        text = str(exc) if isinstance(exc, SourceUnavailableError) else _os_error(exc)
        print(f"hetfl {args.verb}: error: {text}", file=sys.stderr)
        return 2


#: what a verb holds at once, where it runs out of memory (the workflow's start refuses what no job could
#: hold: hetfl.cluster.check_memory; these are what a job holds beyond that)
OUT_OF_MEMORY_HINTS = {
    "train": ("; a training job holds at once a round's minibatch indices (its clients x their local steps x "
              "batch_size) and its clients' parameter stacks (its clients x the model's parameters): lower "
              "local_epochs, batch_size, clients_per_round or the model's size (model_params), or give the "
              "job more memory (on a cluster HETFL_SLURM_MAX_MEM_MB; docs/cluster.md)"),
    "split": ("; a split job holds its source's arrays and the split's (hetfl.cluster.split_mem_mb estimates "
              "them): a machine with more memory, or on a cluster HETFL_SLURM_LOCAL_SPLIT_MB=0 to run the "
              "splits as cluster jobs (docs/cluster.md)"),
}


def _out_of_memory(exc: BaseException) -> bool:
    """numpy's and Python's MemoryError, torch's CPU allocator failing (a RuntimeError) and CUDA's
    OutOfMemoryError (a RuntimeError too)."""
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return True
    return "can't allocate memory" in str(exc)


def _os_error(exc: OSError) -> str:
    if exc.strerror:  # io.WriteError names its file in strerror
        text = f"{exc.strerror}: {exc.filename}" if exc.filename else exc.strerror
    else:
        text = str(exc)
    if exc.errno == errno.ENOSPC:
        text += " (free some space and rerun: outputs are written atomically, nothing partial was kept)"
    return text.splitlines()[0] if text else type(exc).__name__


if __name__ == "__main__":
    sys.exit(main())
