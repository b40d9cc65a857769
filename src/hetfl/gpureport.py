"""What a `scripts/gpu-check` run found, and the decisions docs/engine.md leaves to it, in one report.

A lease of a GPU is 15 minutes and one call's output comes back as its last 12,000 characters, so the
check ends by printing this (and writes it beside the JSONs): its tests' outcome (the pytest summaries,
failures and findings), the bench against the loop and the ≥ 10× target (issue 12), every comparison
behind the engine's CUDA rules against the default rows, where a round's time goes (`hetfl bench
--profile`), the CUDA graph probe, and the engine with graphs against the engine without. From the last
two it proposes the graphs rule: the models whose engine gains at least `min_gain` with graphs (set
`cuda_graphs = True` on their class, engine.executor.graphs_rule) and GRAPH_MIN_STEPS, the largest of
those models' measured `graph_min_steps` (every run that long gains for each of them). The proposals are
read, not applied.

    python -m hetfl.gpureport GPU_BENCH_JSON [--min-gain G] [--markdown PATH]

GPU_BENCH_JSON is the check's main file (its GPU_BENCH_JSON, e.g. /tmp/j/gpu-bench.json); the other files
are found beside it by their suffixes (-nhwc, -graphs, -steps20, ..., the pytest logs -tests.log and
-graph-tests.log, and -steps.tsv, each step's exit status and seconds). Missing files are skipped: a
check run by parts writes only its parts' files.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from hetfl.bench import WORKLOADS, workload_model
from hetfl.engine.graphs import GRAPH_MIN_STEPS
from hetfl.stepprofile import format_profile

#: the ≥ 10× target on CUDA (issue 12)
CUDA_TARGET = 10.0
#: the comparisons of gpu-check's part `compare`: suffix -> what the rows ran with
VARIANTS = {"nhwc": "channels_last true", "grouped": "conv grouped", "unfold": "conv unfold",
            "instant": "cuDNN instant heuristics", "lstm-ops": "cell ops"}
SMALL_ROUNDS = (2, 3, 4)
#: gpu-check's record of its steps beside the JSONs: one line per step, name, exit status or "skipped",
#: seconds (tab-separated)
STEPS_FILE = "steps"
#: the exit status of a step `timeout` stopped at GPU_CHECK_DEADLINE
TIMEOUT_STATUS = 124
#: the paper cells of part `cell` (python -m hetfl.gpucell), by suffix
CELLS = ("cell-fedfor", "cell-efl", "cell-text")
#: the pytest logs gpu-check writes beside the JSONs (suffix, .log)
TEST_LOGS = {"the tests with a CUDA case": "tests", "the CUDA-graph tests": "graph-tests"}
#: failures or warnings listed per log, at most
MAX_LISTED = 20
#: the profiles gpu-check writes (suffix: what they ran with)
PROFILES = {"profile": "the defaults", "profile-unfold": "conv unfold"}
#: the GPU's busy share of a round below which it is called launch-bound, and from which kernel-bound
LAUNCH_BOUND, KERNEL_BOUND = 0.5, 0.8
#: a replay that ends farther than this from the eager steps' parameters failed (float32 rounding is far
#: below it; a stale feed or a wrong capture is far above)
REPLAY_TOLERANCE = 1e-4
#: part `graphs`: the engine without graphs, with graphs captured per run, and with graphs kept across
#: rounds, by the files' suffixes ("": the main file, part bench's rows; None: not measured)
GRAPH_RUNS = {"20 steps per client": ("steps20", "steps20-graphs", "steps20-kept"),
              "FedFOR E = 1 round": ("fedfor-e1", "fedfor-e1-graphs", "fedfor-e1-kept"),
              "the bench's own steps": ("", None, "kept")}
GRAPH_MODES = ("no graphs", "graphs", "kept")


def load(path: Path) -> list[dict[str, Any]] | None:
    """A JSON list of records, or None when the file is not there."""
    if not path.exists():
        return None
    records = json.loads(path.read_text())
    if not isinstance(records, list):
        raise ValueError(f"{path}: expected a JSON list of records, got {type(records).__name__}")
    return records


def sibling(main: Path, suffix: str) -> Path:
    return main.with_name(f"{main.stem}-{suffix}{main.suffix}")


def train_rates(records: list[dict[str, Any]]) -> pd.DataFrame:
    """Training records as one row per workload: batched and reference client steps/s, the ratio, the
    batched engine's share of the matmul rate."""
    df = pd.DataFrame([r for r in records if r.get("mode", "train") == "train"])
    if df.empty:
        return pd.DataFrame(columns=["batched", "reference", "vs loop", "% matmul", "K"])
    wide = df.pivot_table(index="workload", columns="engine", values="client_steps_per_s", sort=False)
    out = pd.DataFrame({"batched": wide.get("batched"), "reference": wide.get("reference")})
    out["vs loop"] = out["batched"] / out["reference"]
    batched = df[df["engine"] == "batched"].set_index("workload")
    out["% matmul"] = 100 * batched["fraction_of_matmul"] if "fraction_of_matmul" in batched else float("nan")
    out["K"] = batched["clients"]
    return out


def model_class(workload: str) -> str:
    """The class of a workload's model, where `cuda_graphs = True` would go."""
    cls = type(workload_model(WORKLOADS[workload]))
    return f"{cls.__module__}.{cls.__qualname__}"


def sets_graphs(workload: str) -> bool:
    """Whether the class of a workload's model sets `cuda_graphs` now (engine.executor.graphs_rule)."""
    return bool(getattr(type(workload_model(WORKLOADS[workload])), "cuda_graphs", False))


def _fmt(x: Any, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and pd.isna(x)):
        return "—"
    if isinstance(x, float):
        if x == 0:
            return "0"  # exactly: a replay bitwise equal to the eager steps
        return f"{x:.3g}" if 0 < abs(x) < 10 ** -digits else f"{x:,.{digits}f}"
    return str(x)


def _table(df: pd.DataFrame, digits: dict[str, int] | None = None) -> str:
    digits = digits or {}
    shown = df.reset_index()
    align = tuple("right" if pd.api.types.is_numeric_dtype(shown[c]) else "left" for c in shown.columns)
    for col in shown.columns:
        shown[col] = [_fmt(v, digits.get(col, 2)) for v in shown[col]]
    # the cells are formatted here: tabulate must not parse them back into numbers
    return shown.to_markdown(index=False, disable_numparse=True, colalign=align)


def bench_section(main: list[dict[str, Any]]) -> tuple[str, pd.DataFrame]:
    rates = train_rates(main)
    device = next((r.get("device") for r in main if r.get("device")), "?")
    if device == "cuda":
        rates[f"≥ {CUDA_TARGET:g}×"] = ["yes" if v >= CUDA_TARGET else "no" for v in rates["vs loop"]]
    name = next((r.get("device_name") for r in main if r.get("device_name")), "?")
    head = (f"## The bench (`hetfl bench --device {device}`), {name}\n\nclient steps/s; the loop is the "
            f"per-client torch.nn loop\n\n")
    return head + _table(rates, {"batched": 0, "reference": 0, "% matmul": 1, "K": 0}), rates


def compare_section(default: pd.DataFrame, variants: dict[str, list[dict[str, Any]]],
                    small: dict[int, list[dict[str, Any]]]) -> str:
    rows = []
    for suffix, records in variants.items():
        for workload, r in train_rates(records).iterrows():
            base = default["batched"].get(workload, float("nan"))
            rows.append({"variant": VARIANTS[suffix], "workload": workload, "batched": r["batched"],
                         "default": base, "variant ÷ default": r["batched"] / base})
    out = ["## The comparisons behind the CUDA rules (part `compare`)"]
    if rows:
        out += ["\nbatched client steps/s with the variant ÷ the default rows above (> 1: the variant is "
                "faster)\n",
                _table(pd.DataFrame(rows).set_index(["variant", "workload"]), {"batched": 0, "default": 0})]
    srows = [{"K": k, "workload": w, "batched": r["batched"], "reference": r["reference"],
              "vs loop": r["vs loop"]}
             for k, records in small.items() for w, r in train_rates(records).iterrows()]
    if srows:
        out += ["\nthe LSTMs in small rounds (below `cuda_batched_from` the batched engine trains client by "
                "client on cuDNN)\n", _table(pd.DataFrame(srows).set_index(["K", "workload"]),
                                             {"batched": 0, "reference": 0})]
    return "\n".join(out)


def tf32_section(default: pd.DataFrame, tf32: list[dict[str, Any]], on_cuda: bool) -> str:
    """Part `tf32`: every workload with TF32 products (`hetfl bench --tf32`, both engines), against the
    default IEEE rows: the speed TF32 buys each engine, and the TF32 engine against the TF32 loop, with
    the 10× target (on CUDA). An option a user may take (`hetfl train --tf32`), not the default."""
    rates = train_rates(tf32)
    rows = []
    for workload, r in rates.iterrows():
        ieee = default.loc[workload] if workload in default.index else None
        row = {"workload": workload, "batched": r["batched"], "reference": r["reference"],
               "batched ÷ IEEE": float("nan") if ieee is None else r["batched"] / ieee["batched"],
               "loop ÷ IEEE": float("nan") if ieee is None else r["reference"] / ieee["reference"],
               "vs loop": r["vs loop"], "IEEE vs loop": float("nan") if ieee is None else ieee["vs loop"]}
        if on_cuda:
            row[f"≥ {CUDA_TARGET:g}×"] = "yes" if r["vs loop"] >= CUDA_TARGET else "no"
        rows.append(row)
    return ("## TF32 products (part `tf32`: `hetfl bench --tf32`, an option, not the default)\n\nclient "
            "steps/s of both engines with TF32; ÷ IEEE: against the default rows above (IEEE float32); "
            "vs loop: the TF32 engine against the TF32 loop\n\n"
            + _table(pd.DataFrame(rows).set_index("workload"), {"batched": 0, "reference": 0}))


def probe_table(probe: list[dict[str, Any]]) -> pd.DataFrame:
    rows = []
    for r in probe:
        rows.append({"workload": r["workload"], "K": r.get("clients"),
                     "eager": r.get("eager_client_steps_per_s"),
                     "graph": r.get("graph_client_steps_per_s"), "replay ÷ eager": r.get("speedup"),
                     "max abs diff": r.get("max_abs_diff"), "capture s": r.get("capture_s"),
                     "graph_min_steps": r.get("graph_min_steps"), "error": r.get("error", "")})
    return pd.DataFrame(rows).set_index("workload")


def graph_gains(runs: dict[str, dict[str, list[dict[str, Any]]]]) -> pd.DataFrame:
    """Per (round, workload) measured without graphs and with them either way: the batched engine's rate
    without graphs, with graphs captured per run and with graphs kept across rounds, each with graphs ÷
    without and against the loop (NaN: that way not measured)."""
    rows = []
    for label, by_mode in runs.items():
        rates = {mode: train_rates(records) for mode, records in by_mode.items()}
        eager = rates["no graphs"]
        for workload in eager.index:
            row: dict[str, Any] = {"round": label, "workload": workload}
            for mode in GRAPH_MODES:
                r = rates.get(mode)
                measured = r is not None and workload in r.index
                row[mode] = r.at[workload, "batched"] if measured else float("nan")
            if all(pd.isna(row[mode]) for mode in GRAPH_MODES[1:]):
                continue
            for mode in GRAPH_MODES[1:]:
                row[f"{mode} ÷ no graphs"] = row[mode] / row["no graphs"]
            for mode in GRAPH_MODES:
                row[f"vs loop, {mode}"] = row[mode] / eager.at[workload, "reference"]
            rows.append(row)
    cols = (["round", "workload", *GRAPH_MODES] + [f"{m} ÷ no graphs" for m in GRAPH_MODES[1:]]
            + [f"vs loop, {m}" for m in GRAPH_MODES])
    return pd.DataFrame(rows, columns=cols).set_index(["round", "workload"])


def graph_memory(runs: dict[str, dict[str, list[dict[str, Any]]]]) -> pd.DataFrame:
    """Per (round, workload): the batched engine's peak device memory reserved (MB; CUDA graphs' private
    pools included) without graphs, with graphs per run and with kept graphs, where the bench recorded it
    (`peak_device_reserved_mb`, CUDA only); empty where none did."""
    rows = []
    for label, by_mode in runs.items():
        peaks: dict[str, dict[str, float]] = {}
        for mode, records in by_mode.items():
            for r in records:
                if r.get("engine") == "batched" and "peak_device_reserved_mb" in r:
                    peaks.setdefault(r["workload"], {})[mode] = r["peak_device_reserved_mb"]
        for workload, by in peaks.items():
            rows.append({"round": label, "workload": workload,
                         **{f"{mode}, MB": by.get(mode, float("nan")) for mode in GRAPH_MODES}})
    cols = ["round", "workload", *(f"{mode}, MB" for mode in GRAPH_MODES)]
    return pd.DataFrame(rows, columns=cols).set_index(["round", "workload"])


def proposals(gains: pd.DataFrame, probe: pd.DataFrame | None, min_gain: float,
              target: float | None = CUDA_TARGET) -> list[str]:
    """The graphs rule the measurements support: models whose engine gains >= min_gain at 20 steps per
    client, GRAPH_MIN_STEPS from the probe, what the FedFOR E = 1 round says about per-round captures,
    where kept graphs gain, and the bench's own rounds with kept graphs against `target` (the loop's
    multiple to reach; None: no target, off CUDA)."""
    out: list[str] = []
    if probe is None:
        bad = pd.DataFrame()
    else:
        diff = probe["max abs diff"].astype(float)
        bad = probe[(probe["error"] != "") | ~(diff.fillna(float("inf")) <= REPLAY_TOLERANCE)]
        for workload, r in probe[(diff > 0) & (diff <= REPLAY_TOLERANCE)].iterrows():
            out.append(f"- {workload}: a replay ends within {r['max abs diff']:.3g} of the eager steps, not "
                       f"bitwise (the same kernels should give the same bits)")
    for workload, r in bad.iterrows():
        why = r["error"] or f"max abs diff {_fmt(r['max abs diff'], 6)}"
        rule = (f"; unset `cuda_graphs` on `{model_class(workload)}`, which sets it now"
                if workload in WORKLOADS and sets_graphs(workload) else "")
        out.append(f"- **{workload}: a replay did not end where the eager steps end** ({why}): no rule "
                   f"for it before that is understood{rule}")
    key = "20 steps per client"
    rounds = gains.index.get_level_values("round")
    steps20 = gains.xs(key, level="round") if key in rounds else gains.iloc[0:0]
    winners = [w for w, r in steps20.iterrows() if r["graphs ÷ no graphs"] >= min_gain and w not in bad.index]
    losers = [w for w in steps20.index if w not in winners and w not in bad.index]  # flagged above
    # against the rule as it is: a winner whose class sets the attribute keeps it, a loser's is unset
    for w in winners:
        r = steps20.loc[w]
        gain = (f"the engine with graphs {r['graphs ÷ no graphs']:.2f}× without, "
                f"{r['vs loop, graphs']:.1f}× the loop")
        if sets_graphs(w):
            out.append(f"- keep `cuda_graphs = True` on `{model_class(w)}`, which sets it now ({w}: {gain})")
        else:
            out.append(f"- set `cuda_graphs = True` on `{model_class(w)}` ({w}: {gain})")
    for w in losers:
        gain = steps20.at[w, "graphs ÷ no graphs"]
        if sets_graphs(w):
            out.append(f"- unset `cuda_graphs` on `{model_class(w)}`, which sets it now: {w} with graphs "
                       f"{gain:.2f}× (below {min_gain:g}×)")
        else:
            out.append(f"- keep {w} eager: graphs {gain:.2f}× (below {min_gain:g}×)")
    # kept graphs: where they gain over graphs captured per run (the same rounds), and at the bench's own
    # steps, too short for a graph per run, where they are the only graphs
    for label in ("20 steps per client", "FedFOR E = 1 round"):
        if label not in rounds:
            continue
        for w, r in gains.xs(label, level="round").iterrows():
            if pd.isna(r["kept"]) or pd.isna(r["graphs"]) or w in bad.index:
                continue
            if r["kept"] >= min_gain * r["graphs"]:
                out.append(f"- {w}, {label}: graphs kept across rounds {r['kept'] / r['graphs']:.2f}× "
                           f"graphs captured per run ({r['vs loop, kept']:.1f}× the loop): keep them in "
                           f"training too (`hetfl train --keep-graphs`; the rule does not keep them yet)")
    own = "the bench's own steps"
    if own in rounds:
        for w, r in gains.xs(own, level="round").iterrows():
            if not pd.isna(r["kept"]):
                verdict = ("" if target is None else
                           f" ({'meets' if r['vs loop, kept'] >= target else 'misses'} {target:g}×)")
                out.append(f"- {w} at the bench's own steps with kept graphs: {r['kept ÷ no graphs']:.2f}× "
                           f"without, {r['vs loop, kept']:.1f}× the loop{verdict}")
    if winners and probe is not None:
        steps = [probe.at[w, "graph_min_steps"] for w in winners if w in probe.index]
        steps = [int(s) for s in steps if s is not None and not pd.isna(s)]
        if steps:
            now = "as now" if max(steps) == GRAPH_MIN_STEPS else f"now {GRAPH_MIN_STEPS}"
            out.append(f"- GRAPH_MIN_STEPS = {max(steps)} ({now}): the largest of the "
                       f"winners' measured graph_min_steps ({', '.join(map(str, steps))})")
    key = "FedFOR E = 1 round"
    if key in rounds:
        for w, r in gains.xs(key, level="round").iterrows():
            verdict = ("per-round captures pay at E = 1" if r["graphs ÷ no graphs"] >= 1
                       else "per-round captures lose at E = 1 (graphs kept across rounds: the kept column)")
            gain = r["graphs ÷ no graphs"]
            out.append(f"- FedFOR's E = 1 round ({w}): graphs {gain:.2f}× without, {verdict}")
    return out or ["- nothing to propose: part `graphs` wrote no engine comparison"]


def busy_share(profile: dict[str, Any], bench: list[dict[str, Any]]) -> tuple[float, float] | None:
    """(kernel time ÷ the round's time, the round's ms) for a CUDA profile record, the round timed without
    the profiler: the bench's batched rate for the same workload, clients, steps and model parameters."""
    if "kernel_ms" not in profile:
        return None
    for r in bench:
        if (r.get("mode", "train") == "train" and r["engine"] == "batched"
                and r["workload"] == profile["workload"] and r.get("clients") == profile["clients"]
                and r.get("steps") == profile["steps"]
                and r.get("model_params", {}) == profile.get("model_params", {})):
            round_ms = 1e3 * profile["clients"] * profile["steps"] / r["client_steps_per_s"]
            return profile["kernel_ms"] / round_ms, round_ms
    return None


def profile_section(profiles: dict[str, list[dict[str, Any]]], bench: list[dict[str, Any]]) -> str:
    """The profiles, and per CUDA profile how busy the GPU is in a round timed without the profiler: a
    GPU idle between small kernels most of the round is launch-bound (CUDA graphs' lever); one busy all
    round is bound by its kernels (another algorithm's, or none)."""
    out = ["## Where a round's time goes (`hetfl bench --profile`)"]
    for label, records in profiles.items():
        out.append(f"\n{label}:\n\n```\n{format_profile(records, top=5)}\n```")
        for r in records:
            busy = busy_share(r, bench)
            if busy is None:
                continue
            share, round_ms = busy
            verdict = ("mostly idle between kernels: launch-bound" if share < LAUNCH_BOUND
                       else "busy: bound by its kernels" if share >= KERNEL_BOUND else "partly launch-bound")
            out.append(f"- {r['workload']}: kernels run {100 * share:.0f} % of a round "
                       f"({r['kernel_ms']:,.1f} of {round_ms:,.1f} ms at the bench's rate), {verdict}")
    return "\n".join(out)


def tests_section(logs: dict[str, str]) -> str:
    """Per pytest log of the check: its closing summary line, its failures and errors, and the warnings
    that carry a finding (a CUDA run with graphs close to the eager run but not bitwise)."""
    out = ["## Tests"]
    for label, text in logs.items():
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        outcomes = ("passed", "failed", "error", "skipped")
        summary = next((line.strip("= ") for line in reversed(lines)
                        if " in " in line and any(w in line for w in outcomes)),
                       "no pytest summary line (cut short?)")
        out.append(f"\n{label}: **{summary}**")
        out += [f"- {line}" for line in lines if line.startswith(("FAILED", "ERROR"))][:MAX_LISTED]
        out += [f"- {line}" for line in lines if "Warning: " in line and "bitwise" in line][:MAX_LISTED]
    return "\n".join(out)


def read_steps(path: Path) -> pd.DataFrame | None:
    """gpu-check's steps file as a table (step, status, seconds), or None when it is not there. A line
    that is not name, status, seconds is an error naming the file and the line."""
    if not path.exists():
        return None
    rows = []
    for n, line in enumerate(path.read_text().splitlines(), 1):
        fields = line.split("\t")
        if len(fields) != 3 or not fields[2].isdigit() or not (fields[1] == "skipped" or fields[1].isdigit()):
            raise ValueError(f"{path}, line {n}: {line!r} is not "
                             "'step<TAB>exit status or skipped<TAB>seconds'")
        rows.append(fields)
    return pd.DataFrame(rows, columns=["step", "status", "s"]).astype({"s": int})


def steps_section(steps: pd.DataFrame) -> str:
    """Each step of the check in the order run, as it ended, and how long it took: the time each part
    needs on this GPU (for the next lease's plan), and what a deadline cut."""
    def outcome(status: str) -> str:
        if status == "skipped":
            return "skipped: past GPU_CHECK_DEADLINE"
        code = int(status)
        return ("ok" if code == 0 else "stopped at GPU_CHECK_DEADLINE" if code == TIMEOUT_STATUS
                else f"FAILED (exit {code})")
    shown = steps.assign(status=steps["status"].map(outcome)).set_index("step")
    cut = (steps["status"] == "skipped") | (steps["status"] == str(TIMEOUT_STATUS))
    failed = ~cut & (steps["status"] != "0")
    return (f"## Steps\n\n{len(steps)} steps in {steps['s'].sum():,} s: {failed.sum()} failed, "
            f"{cut.sum()} cut by the deadline\n\n" + _table(shown, {"s": 0}))


def cell_section(records: list[dict[str, Any]]) -> str:
    """Part `cell`: paper cells' rounds (python -m hetfl.gpucell) against the cluster's time model."""
    df = pd.DataFrame(records).set_index(["experiment", "run"])
    # warmup_s: a round trained first (gpucell since stop 43), which records before it lack
    shown = df.reindex(columns=["model", "rounds", "split_s", "warmup_s", "train_s", "modelled_s",
                                "modelled_over_measured"]).rename(
        columns={"split_s": "split s", "warmup_s": "warm-up round s", "train_s": "training s",
                 "modelled_s": "model s", "modelled_over_measured": "model ÷ measured"})
    return ("## Paper cells against the cluster's time model (part `cell`)\n\nrandom stand-ins of the "
            "sources at their real sizes; a round trained first (warm-up), then the run's rounds timed; the "
            "model: hetfl.cluster.gpu_seconds_run for those rounds, no process start\n\n"
            + _table(shown, {"rounds": 0, "split s": 1, "warm-up round s": 1, "training s": 1, "model s": 1}))


def report(main_path: Path, min_gain: float = 1.05) -> str:
    """The markdown report of the gpu-check run whose main JSON is `main_path` (see the module doc)."""
    main = load(main_path)
    sections = []
    default = pd.DataFrame(columns=["batched"])
    if main is not None:
        text, default = bench_section(main)
        sections.append(text)
    variants = {s: r for s in VARIANTS if (r := load(sibling(main_path, s))) is not None}
    small = {k: r for k in SMALL_ROUNDS if (r := load(sibling(main_path, f"lstm-{k}"))) is not None}
    if variants or small:
        sections.append(compare_section(default, variants, small))
    profiles = {label: r for suffix, label in PROFILES.items() if (r := load(sibling(main_path, suffix)))}
    if profiles:
        # the unfold profile's round is timed by part compare's unfold rows
        sections.append(profile_section(profiles, (main or []) + variants.get("unfold", [])))
    tf32 = load(sibling(main_path, "tf32"))
    if tf32:
        sections.append(tf32_section(default, tf32, any(r.get("device") == "cuda" for r in tf32)))
    cells = [r for suffix in CELLS if (r := load(sibling(main_path, suffix)))]
    if cells:
        sections.append(cell_section([r for records in cells for r in records]))
    probe_records = load(sibling(main_path, "graphs"))
    probe = None if probe_records is None else probe_table(probe_records)
    if probe is not None:
        sections.append("## The CUDA graph probe (one block's step, eager and replayed)\n\n" + _table(
            probe, {"K": 0, "eager": 0, "graph": 0, "capture s": 3, "max abs diff": 3, "graph_min_steps": 0}))
    runs = {}
    for label, suffixes in GRAPH_RUNS.items():
        by_mode = {mode: records for mode, suffix in zip(GRAPH_MODES, suffixes, strict=True)
                   if suffix is not None
                   and (records := main if suffix == "" else load(sibling(main_path, suffix))) is not None}
        if "no graphs" in by_mode and len(by_mode) > 1:
            runs[label] = by_mode
    gains = graph_gains(runs)
    if len(gains):
        memory = graph_memory(runs)
        sections.append("## The engine with and without CUDA graphs (part `graphs`)\n\nbatched client "
                        "steps/s: without graphs, with graphs captured per run, with graphs kept across "
                        "rounds\n\n" + _table(gains, dict.fromkeys(GRAPH_MODES, 0))
                        + ("" if memory.empty else "\n\nthe batched engine's peak device memory reserved "
                           "(MB; graphs' pools included), the same runs\n\n" + _table(memory, {
                               c: 0 for c in memory.columns})))
    if probe is not None or len(gains):
        on_cuda = any(r.get("device") == "cuda" for r in main or [])
        sections.append(f"## Proposed (read, not applied; a gain counts from {min_gain:g}×)\n\n"
                        + "\n".join(proposals(gains, probe, min_gain, CUDA_TARGET if on_cuda else None)))
    steps = read_steps(main_path.with_name(f"{main_path.stem}-{STEPS_FILE}.tsv"))
    if steps is not None:
        sections.append(steps_section(steps))
    # last: a remote call's output keeps its end when it is cut
    logs = {label: path.read_text(errors="replace") for label, suffix in TEST_LOGS.items()
            if (path := sibling(main_path, suffix).with_suffix(".log")).exists()}
    if logs:
        sections.append(tests_section(logs))
    if not sections:
        raise FileNotFoundError(f"{main_path}: neither it nor any of its sibling files (-graphs, -steps20, "
                                "-tests.log, -steps.tsv, ...) exists; give the GPU_BENCH_JSON path "
                                "gpu-check wrote")
    return "# gpu-check report\n\n" + "\n\n".join(sections) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m hetfl.gpureport", description=__doc__.split("\n\n")[0])
    parser.add_argument("json", metavar="GPU_BENCH_JSON", help="gpu-check's main JSON (its GPU_BENCH_JSON)")
    parser.add_argument("--min-gain", type=float, default=1.05,
                        help="the engine's speed-up with graphs from which a model's rule proposes them "
                             "(default 1.05)")
    parser.add_argument("--markdown", metavar="PATH", default=None, help="also write the report here")
    args = parser.parse_args(argv)
    if not args.min_gain > 0:
        parser.error(f"--min-gain: {args.min_gain} is not allowed; give a ratio above 0, e.g. 1.05")
    try:
        text = report(Path(args.json), args.min_gain)
    except (FileNotFoundError, ValueError) as err:
        print(f"gpureport: {err}", file=sys.stderr)
        return 2
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
