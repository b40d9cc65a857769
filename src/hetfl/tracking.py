"""MLflow mirror of the results (the only module that imports mlflow).

`results/` is the source of truth; MLflow mirrors it: one experiment per hetfl experiment (its description
from the config, opening on the training-runs view), one run per grid point named `<experiment>/<run>` so
that names are unique across experiments, params once, metrics with step=round, the training's own start
and end times, the source commit and a dirty flag, and run.json and metrics.parquet as artifacts. A
per-experiment summary run carries the tables and figures its runs feed.

Mirroring again updates each run in place (found by its `hetfl.run_key` tag, never through a filter string
built from untrusted text): a run whose content is unchanged keeps its MLflow id; one retrained since is
replaced, and the replaced run is hard-deleted (`mlflow gc`) so that no deleted run piles up.
The store is SQLite under results/ unless MLFLOW_TRACKING_URI says otherwise (docs/tracking.md).
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import math
import os
import sys
from collections.abc import Iterable, Sequence
from contextlib import contextmanager, redirect_stderr, redirect_stdout
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

RUN_KEY_TAG = "hetfl.run_key"  # "<experiment>/<run>": how a mirror is found again
SUMMARY_TAG = "hetfl.summary_of"  # the experiment whose tables and figures a summary run carries
# what an in-place update cannot change (a run's metrics, params, start): the same hash is updated in place
CONTENT_TAG = "hetfl.content_sha256"
# MLflow 3 records an experiment's kind in this tag; "custom_model_development" is its training-runs kind
# (the other, "genai_development", opens on the GenAI overview).
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
TRAINING_KIND = "custom_model_development"
NOTE_TAG = "mlflow.note.content"  # MLflow's description field, of experiments and runs alike
# run.json keys that record the mirror itself: not part of what is mirrored
MIRROR_KEYS = ("mlflow_run_id", "mlflow_error")
REMOTE_SCHEMES = ("http", "https", "databricks", "databricks-uc", "uc")
#: tags a mirror writes only where they apply (docs/tracking.md, "Tags"): a mirror kept in place that no
#: longer gets one has it deleted (a summary run kept the commit and user its runs had shared before one of
#: them was retrained)
CONDITIONAL_TAGS = ("mlflow.source.git.commit", "mlflow.user", "hetfl.cut_params", "hetfl.nonfinite_metrics",
                    "hetfl.precision", "hetfl.code_fingerprint", "hetfl.algorithm_package",
                    "hetfl.algorithm_target")
#: which rounds' values a training run's mirror logs (docs/tracking.md, "Metrics")
MIRROR_ROUNDS = ("evaluated", "all")
#: recorded at every evaluated round, and at the round a run diverged: engine.runner.EVAL_LOSSES (not
#: imported: it imports torch). test_loss alone missed a run without a local holdout (test_fraction 0),
#: whose every round was then mirrored under hetfl.mirrored_rounds = evaluated
EVALUATION_MARKERS = ("test_loss", "train_loss", "global_test_loss")
#: hex digits of a split's sha256 a dataset input's digest keeps (MLflow's own digests have 8)
DIGEST_CHARS = 8
DATASET_CONTEXT = "training"  # the input tag mlflow.data.context: what the data set was used for


def tracking_uri(results_dir: str | Path) -> str:
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    return f"sqlite:///{Path(results_dir).resolve() / 'mlflow.db'}"


def _sqlite_path(uri: str) -> Path | None:
    """The database file of a sqlite:/// URI (sqlite:////abs/x.db or sqlite:///relative/x.db)."""
    prefix = "sqlite:///"
    if not uri.startswith(prefix) or uri[len(prefix):] in ("", ":memory:"):
        return None
    return Path(uri[len(prefix):].split("?")[0]).resolve()


def artifact_location(uri: str, experiment: str) -> str | None:
    """Where a new experiment keeps its artifacts: beside a SQLite store (results/mlartifacts/<experiment>
    by default); None lets any other store (a tracking server, a database) use its own default."""
    db = _sqlite_path(uri)
    return (db.parent / "mlartifacts" / experiment).as_uri() if db is not None else None


def check_artifact_location(uri: str, experiment) -> None:
    """Refuse an experiment whose artifacts hetfl put beside another copy of this SQLite store: its location
    is an absolute path, so in a copied (or moved) results/ mirroring purged the original's artifacts and
    wrote new ones into the original's mlartifacts/."""
    expected = artifact_location(uri, experiment.name)
    location = str(experiment.artifact_location or "")
    if expected is None or location == expected or not location.startswith("file:"):
        return
    from urllib.parse import unquote, urlparse

    path = Path(unquote(urlparse(location).path))
    if path.name == experiment.name and path.parent.name == "mlartifacts":  # hetfl's layout, elsewhere
        raise ValueError(f"experiment '{experiment.name}' keeps its artifacts in {path}, not beside "
                         f"{_sqlite_path(uri)}: this store was copied or moved from {path.parent.parent}, "
                         "and mirroring here would purge and write artifacts there; allowed: a store made "
                         "here. Remove this mlflow.db and mlartifacts/ and mirror again (the workflow: "
                         "snakemake --forcerun track; the mirror is rebuilt from results/)")


def can_hard_delete(uri: str) -> bool:
    """Whether this client can reach the backend store itself (`mlflow gc` needs it; a server cannot)."""
    return uri.split(":", 1)[0].lower() not in REMOTE_SCHEMES


@contextmanager
def _store_lock(results_dir: Path):
    """Serialise writers of the default SQLite store (schema creation is not safe to race)."""
    results_dir.mkdir(parents=True, exist_ok=True)
    with open(results_dir / ".mlflow.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = str(v)
    return out


#: MLflow's longest param value (mlflow.utils.validation.MAX_PARAM_VAL_LENGTH), and what ends a cut one
PARAM_LIMIT = 6000
CUT = " …[cut at 6,000 characters: run.json has the whole value]"


def mlflow_params(spec: dict[str, Any]) -> tuple[dict[str, str], list[str]]:
    """The spec flattened into MLflow params, and the keys whose value is longer than MLflow keeps: those
    are cut and end in CUT (they were cut silently, so the UI showed a value no run had)."""
    params = flatten(spec)
    cut = sorted(k for k, v in params.items() if len(v) > PARAM_LIMIT)
    for k in cut:
        params[k] = params[k][:PARAM_LIMIT - len(CUT)] + CUT
    return params, cut


@dataclass(frozen=True)
class RunRecord:
    """One MLflow run as it is mirrored: name, params, per-round metrics, tags, times and artifacts.

    `key` finds the mirror again (the run key for a training run, the experiment for a summary run);
    `artifacts` are (local file, artifact folder or None); times are Unix milliseconds.
    """

    experiment: str
    key: str
    name: str
    params: dict[str, Any]
    records: list[tuple[int, str, float]]
    tags: dict[str, str]
    start_ms: int
    end_ms: int
    status: str  # MLflow's: FINISHED or FAILED
    artifacts: tuple[tuple[Path, str | None], ...] = ()
    content_sha256: str = ""
    key_tag: str = RUN_KEY_TAG
    #: MLflow dataset inputs (the runs table's Dataset column): (name, digest, source path)
    datasets: tuple[tuple[str, str, str], ...] = ()


def _ms(iso: str) -> int:
    return int(round(datetime.fromisoformat(iso).timestamp() * 1000))


def run_times(info: dict[str, Any], run_dir: Path) -> tuple[int, int, str]:
    """(start, end) of the training in Unix ms and where they come from.

    run.json's started_at/finished_at when present; for results written before those fields existed,
    the end is metrics.parquet's modification time (written as training ends) and the start that minus
    wall_time_s.
    """
    if info.get("started_at") and info.get("finished_at"):
        return _ms(info["started_at"]), _ms(info["finished_at"]), "run.json"
    end = int((run_dir / "metrics.parquet").stat().st_mtime * 1000)
    return end - int(round(float(info.get("wall_time_s", 0.0)) * 1000)), end, "metrics.parquet mtime"


def content_sha256(info: dict[str, Any], files: Iterable[Path]) -> str:
    """Hash of what a mirror shows: run.json (less the mirror's own keys) and the files' bytes."""
    h = hashlib.sha256(json.dumps({k: v for k, v in info.items() if k not in MIRROR_KEYS},
                                  sort_keys=True, default=str).encode())
    for f in files:
        h.update(Path(f).name.encode())
        h.update(Path(f).read_bytes())
    return h.hexdigest()


def mirrored_rows(m, rounds: str = "evaluated"):
    """The rows of metrics.parquet that the mirror logs.

    `evaluated`: every metric at the rounds the run was evaluated (eval_every, the last round, a diverged
    round), so the per-round diagnostics (lr, bytes, participation) sit beside the accuracy curve at the
    same steps; a run without evaluated rounds keeps all. Of a stretch of those rounds over which a metric
    keeps one value, only its first and last are logged (flat_ends): MLflow draws the same line through
    them. MLflow's SQL store inserts a row per value, ~0.2 ms each: a SYNTHETIC Table 3 run has 200 rounds
    of 9 diagnostics, and logging them all was most of `make reproduce`'s mirroring; a third of the values
    at the evaluated rounds are inside flat stretches (bytes, test samples, devices taking part).
    `all`: every row. metrics.parquet, an artifact of the run, has every round either way.
    """
    if rounds not in MIRROR_ROUNDS:
        raise ValueError(f"rounds has value {rounds!r}, which is not allowed; allowed: "
                         f"{', '.join(MIRROR_ROUNDS)}")
    evaluated = m.loc[m["metric"].isin(EVALUATION_MARKERS), "round"]
    if rounds == "all" or evaluated.empty:
        return m
    return flat_ends(m[m["round"].isin(set(evaluated) | {m["round"].max()})])


def flat_ends(m):
    """The rows of a (round, metric, value) frame less those inside a flat stretch: a row whose metric has
    the same value at the metric's rows just before and just after it (by round) is dropped. Each metric
    keeps its first and last row and every change; NaN equals nothing, so it is kept."""
    m = m.sort_values(["metric", "round"], kind="stable")
    by_metric = m.groupby("metric", sort=False)["value"]
    inside = (m["value"] == by_metric.shift(1)) & (m["value"] == by_metric.shift(-1))
    return m[~inside]


def run_setup(spec: dict[str, Any]) -> str:
    """What a run is, in one line: the start of its description, which the runs table shows in its
    Description column (the note was a path and a status, the path repeating the run's name)."""
    algorithm = str(spec.get("algorithm"))
    hyper = spec.get("algorithm_params") or {}
    if hyper:
        algorithm += f" ({', '.join(f'{k} = {v}' for k, v in sorted(hyper.items()))})"
    text = (f"{algorithm}, scheme {spec.get('scheme')}, |T| = {spec.get('num_traces')}, "
            f"seed {spec.get('seed')} on {spec.get('dataset')} {spec.get('setting')} "
            f"({spec.get('num_devices')} devices, {spec.get('rounds')} rounds)")
    event = spec.get("event")
    if event:
        text += f"; {event.get('kind')} at round {event.get('round')} ({event.get('policy')})"
    if spec.get("reading"):
        text += f"; reading {spec['reading']}"
    return text


def read_run(run_dir: str | Path, rounds: str = "evaluated") -> RunRecord:
    """The mirror of one finished run, from its run.json and metrics.parquet (`rounds`: mirrored_rows)."""
    import pandas as pd
    from mlflow.utils.mlflow_tags import (
        MLFLOW_GIT_COMMIT,
        MLFLOW_SOURCE_NAME,
        MLFLOW_SOURCE_TYPE,
        MLFLOW_USER,
    )

    d = Path(run_dir)
    d = d.parent if d.name == "run.json" else d
    if not (d / "run.json").is_file():
        raise FileNotFoundError(f"{run_dir} is not a run directory (no run.json in it); hetfl track takes "
                                "run directories or their run.json files")
    info = json.loads((d / "run.json").read_text())
    frame = pd.read_parquet(d / "metrics.parquet")
    m = mirrored_rows(frame, rounds)
    rows = list(zip(m["round"].astype(int), m["metric"].astype(str), m["value"].astype(float), strict=True))
    # NaN and ±inf are not logged: MLflow 3's run page fails on a NaN metric (the REST API sends the string
    # "NaN"; mlflow/mlflow#16555) and its SQL store turns ±inf into ±1.8e308, which read as real values
    records = [r for r in rows if math.isfinite(r[2])]
    nonfinite = sorted({metric for _, metric, v in rows if not math.isfinite(v)})
    first_nonfinite = min((r for r, _, v in rows if not math.isfinite(v)), default=None)
    if "wall_time_s" in info:  # step 0: a sortable column beside the run's duration
        records.append((0, "wall_time_s", float(info["wall_time_s"])))
    spec = info["spec"]
    start, end, source = run_times(info, d)
    dirty = info.get("git_dirty")
    tags = {"hetfl.status": str(info.get("status", "unknown")), "hetfl.run_dir": str(d.resolve()),
            "hetfl.git_dirty": "unknown" if dirty is None else str(bool(dirty)).lower(),
            "hetfl.times": source, "hetfl.mirrored_rounds": rounds,
            MLFLOW_SOURCE_NAME: "hetfl train", MLFLOW_SOURCE_TYPE: "LOCAL",
            NOTE_TAG: f"{run_setup(spec)}. Mirror of `{d}` (status {info.get('status')}, "
                      f"{info.get('rounds_done')} rounds, device {info.get('device')}"
                      f"{', TF32 products' if info.get('cuda_tf32') else ''}); "
                      f"run.json and metrics.parquet are its artifacts."}
    cut = mlflow_params(spec)[1]
    if cut:
        tags["hetfl.cut_params"] = ", ".join(cut)
    if nonfinite:  # a diverged run's last values shown are from before its divergence: say so
        tags["hetfl.nonfinite_metrics"] = ", ".join(nonfinite)
        tags[NOTE_TAG] += (f" Not logged: NaN or ±inf values of {', '.join(nonfinite)} (first at round "
                           f"{first_nonfinite}; MLflow cannot show them, metrics.parquet has them), so the "
                           "last value shown of such a metric may be from an earlier round.")
    if info.get("user"):  # the User column: who trained it (MlflowClient.create_run sets no user)
        tags[MLFLOW_USER] = str(info["user"])
    if info.get("cuda_tf32"):  # hetfl train --tf32: numbers of TF32 products, not IEEE float32's
        tags["hetfl.precision"] = "tf32"
    if info.get("code_fingerprint"):
        tags["hetfl.code_fingerprint"] = str(info["code_fingerprint"])
    source = info.get("algorithm_source")
    if source:  # a plugin's algorithm: the package whose code trained the run (the commit is hetfl's)
        package = f"{source['package']}=={source['version']}" if source.get("package") else "unknown"
        tags["hetfl.algorithm_package"] = package
        tags["hetfl.algorithm_target"] = str(source.get("target"))
    commit = info.get("git_commit")
    if commit and commit != "unknown":
        tags[MLFLOW_GIT_COMMIT] = str(commit)
    files = (d / "run.json", d / "metrics.parquet")
    # "markers": a run without test_loss (no local holdout) was mirrored at every round before: replaced
    no_holdout = rounds == "evaluated" and "test_loss" not in set(frame["metric"])
    experiment, run = str(spec["experiment"]), str(spec["run"])
    split = info.get("split") or {}
    # the federation trained on: the data set's name, the split's sha256 as its digest (MLflow's are 8 hex)
    datasets = ((str(spec["dataset"]), str(split["sha256"])[:DIGEST_CHARS], str(split.get("path", ""))),) \
        if split.get("sha256") else ()
    return RunRecord(experiment=experiment, key=f"{experiment}/{run}", name=f"{experiment}/{run}",
                     params=spec, records=records, tags=tags, start_ms=start, end_ms=end,
                     status="FINISHED" if info.get("status") == "ok" else "FAILED",
                     artifacts=tuple((f, None) for f in files), datasets=datasets,
                     # "rows": mirrors logged before flat_ends had every evaluated round: replaced, not kept
                     # "finite": a mirror logged before ±inf was left out holds 1.8e308: replaced too
                     content_sha256=content_sha256({**info, "mirrored_rounds": rounds, "rows": "flat_ends",
                                                    **({"finite": True} if nonfinite else {}),
                                                    **({"markers": "eval_losses"} if no_holdout else {})},
                                                   [d / "metrics.parquet"]))


def _axis(specs: Sequence[dict[str, Any]], key: str) -> str:
    """The distinct values of one spec key, numbers in numeric order."""
    values = {json.dumps(s.get(key), sort_keys=True) for s in specs}
    numeric = all(v.replace(".", "", 1).lstrip("-").isdigit() for v in values)
    return ", ".join(v.strip('"') for v in sorted(values, key=float if numeric else str))


def experiment_description(experiment: str, specs: Sequence[dict[str, Any]], config_text: str = "") -> str:
    """An experiment's description (Markdown, shown on its MLflow page): its own grid, from the runs'
    specs, first; then the config's top-level `description`, which tells the whole grid it belongs to
    (quick.yaml's names every paper: put first, it read as if each experiment were Ruan et al.'s Table 3)."""
    lines = [f"**{experiment}**: table `{_axis(specs, 'table')}` on dataset `{_axis(specs, 'dataset')}`, "
             f"{len(specs)} run(s) mirrored from `results/{experiment}/`.", "",
             f"- settings: {_axis(specs, 'setting')}", f"- algorithm: {_axis(specs, 'algorithm')}",
             f"- model: {_axis(specs, 'model')}", f"- schemes: {_axis(specs, 'scheme')}",
             f"- |T|: {_axis(specs, 'num_traces')}", f"- devices: {_axis(specs, 'num_devices')}",
             f"- rounds: {_axis(specs, 'rounds')}", f"- seeds: {_axis(specs, 'seed')}"]
    events = sorted({f"{e['kind']} at {e['round']} ({e['policy']})" for s in specs if (e := s.get("event"))})
    if events:
        lines.append(f"- events: {'; '.join(events)}")
    if config_text.strip():
        lines += ["", f"Part of the grid: {config_text.strip()}"]
    return "\n".join(lines)


def summary_folder(path: Path) -> str:
    """A summary file's artifact folder: tables/ for a table, figures/ for a figure and its caption (which
    went to reports/, away from its figure), figures/splits/ for an experiment's split chart."""
    if path.suffix in (".md", ".csv", ".tex"):
        return "tables"
    if path.suffix in (".png", ".svg") or path.name.endswith(".caption.html"):
        return "figures/splits" if path.parent.name == "splits" else "figures"
    return "reports"


def summary_note(experiment: str, table: str, n_runs: int) -> str:
    """A summary run's description. A table reads the runs of every experiment that feeds it (bmta: four
    of quick.yaml's; fairness: bmta's runs), not this experiment's alone, which the note used to claim."""
    return (f"Tables (tables/) and figures (figures/) built from the runs that feed table `{table}`: those "
            f"with `params.table = '{table}'` in every experiment of the config, {experiment}'s {n_runs} "
            "run(s) among them. Each caption names the runs it read and their commits.")


def summary_record(experiment: str, runs: Sequence[RunRecord], files: Iterable[str | Path]) -> RunRecord:
    """The experiment's summary run: its tables and figures as artifacts (tables/, figures/).

    It spans the experiment: from its first run's start to the last of its runs' ends and its report
    files' writes. It has no params or metrics, so new bytes of the same files are written over in place;
    only another set of files or another start replaces it.
    """
    files = sorted(Path(f) for f in files)
    missing = [str(f) for f in files if not f.is_file()]
    if missing:
        raise FileNotFoundError(f"summary files do not exist: {', '.join(missing)}")
    # a table or figure file cut off by hand is newer than its runs, so Snakemake does not make it again:
    # mirrored, the summary run carried an empty table
    empty = [str(f) for f in files if f.stat().st_size == 0]
    if empty:
        raise ValueError(f"summary files are empty: {', '.join(empty)}; allowed: the files `hetfl table` and "
                         "`hetfl figure` write (delete them and run snakemake again to make them again)")
    if not runs:
        raise ValueError(f"a summary of experiment '{experiment}' needs its runs; none was given")
    start = min(r.start_ms for r in runs)
    end = max([r.end_ms for r in runs] + [int(f.stat().st_mtime * 1000) for f in files])
    from mlflow.utils.mlflow_tags import (
        MLFLOW_GIT_COMMIT,
        MLFLOW_SOURCE_NAME,
        MLFLOW_SOURCE_TYPE,
        MLFLOW_USER,
    )

    table = _axis([r.params for r in runs], "table")
    tags = {"hetfl.kind": "summary", "hetfl.runs": str(len(runs)), "hetfl.table": table,
            # the Source column: what wrote the files (a training run's is `hetfl train`)
            MLFLOW_SOURCE_NAME: "hetfl table, figure", MLFLOW_SOURCE_TYPE: "LOCAL",
            NOTE_TAG: summary_note(experiment, table, len(runs))}
    commits = {r.tags.get(MLFLOW_GIT_COMMIT) for r in runs}
    if len(commits) == 1 and None not in commits:  # the Version column, where the runs agree on it
        tags[MLFLOW_GIT_COMMIT] = commits.pop()
    users = {r.tags.get(MLFLOW_USER) for r in runs}
    if len(users) == 1 and None not in users:
        tags[MLFLOW_USER] = users.pop()
    return RunRecord(experiment=experiment, key=experiment, name=f"{experiment}/summary", params={},
                     records=[], tags=tags, start_ms=start, end_ms=end, status="FINISHED",
                     artifacts=tuple((f, summary_folder(f)) for f in files),
                     content_sha256=content_sha256({"files": [f.name for f in files], "start": start}, []),
                     key_tag=SUMMARY_TAG)


def _experiment_id(client, name: str, uri: str, exp) -> str:
    """The id of experiment `name`, made or restored as needed; `exp` is what get_experiment_by_name gave."""
    if exp is None:
        return client.create_experiment(name, artifact_location=artifact_location(uri, name))
    if exp.lifecycle_stage == "deleted":  # its name is taken until restored or purged
        client.restore_experiment(exp.experiment_id)
    return exp.experiment_id


def _mirrors(client, exp_id: str) -> dict[tuple[str, str], list]:
    """Every run of the experiment, live or deleted, that carries a mirror tag, by (tag, value).

    Matched client-side: the tag values come from received files and go into no filter string.
    """
    from mlflow.entities import ViewType

    found: dict[tuple[str, str], list] = {}
    token = None
    while True:
        page = client.search_runs([exp_id], run_view_type=ViewType.ALL, max_results=1000, page_token=token)
        for run in page:
            for tag in (RUN_KEY_TAG, SUMMARY_TAG):
                if tag in run.data.tags:
                    found.setdefault((tag, run.data.tags[tag]), []).append(run)
        token = page.token
        if not token:
            return found


def _log_content(client, run_id: str, run: RunRecord) -> None:
    from mlflow.entities import Metric, Param

    flat = [Param(k, v) for k, v in mlflow_params(run.params)[0].items()]
    metrics = [Metric(m, v, run.end_ms, r) for r, m, v in run.records if math.isfinite(v)]  # read_run
    for i in range(0, len(flat), 100):
        client.log_batch(run_id, params=flat[i:i + 100])
    for i in range(0, len(metrics), 1000):
        client.log_batch(run_id, metrics=metrics[i:i + 1000])


def _log_datasets(client, run_id: str, run: RunRecord) -> None:
    """The run's data set as an MLflow dataset input: the Dataset column of the runs table and the run
    page's "Datasets used", filterable as `dataset.name = 'synthetic'` and grouped by in the UI. Logging
    the same input again adds nothing (the store keeps one per data set and run)."""
    if not run.datasets:
        return
    from mlflow.entities import Dataset, DatasetInput, InputTag
    from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

    context = [InputTag(MLFLOW_DATASET_CONTEXT, DATASET_CONTEXT)]
    client.log_inputs(run_id, datasets=[
        DatasetInput(Dataset(name, digest, source_type="local", source=json.dumps({"uri": source})), context)
        for name, digest, source in run.datasets])


def _log_run(client, exp_id: str, run: RunRecord, existing: list) -> tuple[str, list[str]]:
    """Mirror one run; returns its id and the ids of earlier mirrors to purge.

    An unchanged live mirror is updated in place (name, tags, artifacts, end time); otherwise the earlier
    mirrors are deleted and a new run is created: MLflow can neither replace a logged metric value nor
    move a run's start. A new mirror gets its content tag only once its params, metrics and artifacts are
    logged, a mirror updated in place is RUNNING until its artifacts are written over, and a mirror still
    RUNNING was cut off: a mirror killed half-way (Ctrl-C, a killed track job) is replaced, not kept in
    place with part of its params and metrics (an audit found one kept with one param and no metric) or
    with part of its files rewritten.
    """
    from mlflow.entities import RunTag

    tags = {run.key_tag: run.key, CONTENT_TAG: run.content_sha256, **run.tags}
    keep = next((r for r in existing if r.info.lifecycle_stage == "active" and r.info.status != "RUNNING"
                 and r.data.tags.get(CONTENT_TAG) == run.content_sha256), None)
    stale = [r.info.run_id for r in existing if keep is None or r.info.run_id != keep.info.run_id]
    for r in existing:
        if r.info.run_id in stale and r.info.lifecycle_stage == "active":
            client.delete_run(r.info.run_id)
    if keep is not None:
        rid = keep.info.run_id
        # RUNNING while its tags and artifacts are written over (a summary's tables with new bytes): cut off
        # half-way, it is not left FINISHED with some files old and some new, or one truncated, but replaced
        client.update_run(rid, status="RUNNING", name=run.name if keep.info.run_name != run.name else None)
        client.log_batch(rid, tags=[RunTag(k, v) for k, v in tags.items()])
        for k in CONDITIONAL_TAGS:
            if k in keep.data.tags and k not in tags:
                client.delete_tag(rid, k)
    else:
        rid = client.create_run(exp_id, start_time=run.start_ms, run_name=run.name,
                                tags={k: v for k, v in tags.items() if k != CONTENT_TAG}).info.run_id
        _log_content(client, rid, run)
    _log_datasets(client, rid, run)  # also on a mirror kept in place, which older versions logged without
    for path, folder in run.artifacts:
        client.log_artifact(rid, str(path), artifact_path=folder)
    client.set_tag(rid, CONTENT_TAG, run.content_sha256)  # complete: from now on kept in place
    client.set_terminated(rid, status=run.status, end_time=run.end_ms)
    return rid, stale


#: run ids a search for the runs to purge names at once: one page of results, few SQL parameters
PURGE_SEARCH_IDS = 100


def _run_folders(uri: str, run_ids: Sequence[str], experiment_ids: Sequence[str]) -> list[Path]:
    """The local folders `<experiment's artifact location>/<run id>/` of runs (of the experiments given)
    whose artifacts are local files (`<run id>/artifacts`, MLflow's layout); runs with artifacts elsewhere
    (a server's) have none."""
    from urllib.parse import unquote, urlparse

    from mlflow.entities import ViewType
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    artifact_uris: dict[str, str] = {}
    for i in range(0, len(run_ids), PURGE_SEARCH_IDS):  # one search per chunk, not a get_run per run
        # the ids are the store's own (uuid hex), not text from received files: safe in a filter string
        ids = ", ".join(f"'{rid}'" for rid in run_ids[i:i + PURGE_SEARCH_IDS])
        for run in client.search_runs(list(experiment_ids), f"attributes.run_id IN ({ids})",
                                      run_view_type=ViewType.ALL, max_results=PURGE_SEARCH_IDS):
            artifact_uris[run.info.run_id] = run.info.artifact_uri
    folders = []
    for rid in run_ids:
        # a run not found (gone since it was listed) has no folder to remove: mlflow gc says why it failed
        artifacts = urlparse(artifact_uris.get(rid) or "")
        if artifacts.scheme not in ("", "file"):
            continue
        path = Path(unquote(artifacts.path))
        if path.is_absolute() and path.name == "artifacts" and path.parent.name == rid:
            folders.append(path.parent)
    return folders


def _gc(uri: str, run_ids: Sequence[str]) -> None:
    """`mlflow gc --backend-store-uri URI --tracking-uri URI --run-ids ...`, in this process: a `python -m
    mlflow gc` took 5-6 s (an interpreter, mlflow and its CLI's imports), importing the CLI here 2 s, once.
    gc sets the tracking URI, and with it MLFLOW_TRACKING_URI, which decides the next mirror's store
    (tracking_uri): both are put back. What it prints goes into the error, if it fails: any exception, as
    any failure of the process it was before (a `python -m mlflow gc` exiting non-zero) was."""
    import mlflow
    from mlflow.cli import gc

    before = os.environ.get("MLFLOW_TRACKING_URI")
    said = io.StringIO()
    try:
        with redirect_stdout(said), redirect_stderr(said):
            gc.main(["--backend-store-uri", uri, "--tracking-uri", uri, "--run-ids", ",".join(run_ids)],
                    prog_name="mlflow gc", standalone_mode=False)
    except Exception as exc:  # named, with the store, and chained
        raise RuntimeError(f"mlflow gc could not purge {len(run_ids)} replaced run(s) from {uri}:\n"
                           f"{said.getvalue()[-2000:]}{exc}") from exc
    finally:
        mlflow.set_tracking_uri(before)  # None unsets both


def purge_runs(uri: str, run_ids: Sequence[str], experiment_ids: Sequence[str]) -> bool:
    """Hard-delete deleted runs (of the experiments given) and their artifacts with `mlflow gc` (the store
    must be reachable: a tracking server keeps them deleted until its own `mlflow gc`). Returns whether
    they were purged.

    `mlflow gc` deletes a run's `<run id>/artifacts/` but not the `<run id>/` folder above it, which every
    purged run left behind empty: those folders of the runs purged are removed where they are empty (a
    folder holding anything else is kept)."""
    if not run_ids:
        return True
    if not can_hard_delete(uri):
        print(f"warning: {len(run_ids)} replaced run(s) are deleted but not purged on {uri}; run "
              "`mlflow gc` against the server's backend store to remove them", file=sys.stderr)
        return False
    # before gc, after which the store no longer knows the runs
    folders = _run_folders(uri, run_ids, experiment_ids)
    _gc(uri, run_ids)
    for folder in folders:
        try:
            folder.rmdir()  # only an empty folder: rmdir refuses any other
        except OSError:  # not empty (a file of someone's), or never made (a run cut off before its files)
            pass
    return True


@dataclass(frozen=True)
class Mirror:
    """What one mirroring did: MLflow ids by run key, by experiment, and of the summary runs."""

    tracking_uri: str
    runs: dict[str, str]
    experiments: dict[str, str]
    summaries: dict[str, str]
    purged: int

    def to_dict(self) -> dict[str, Any]:
        return {"tracking_uri": self.tracking_uri, "runs": self.runs, "experiments": self.experiments,
                "summaries": self.summaries, "purged": self.purged}


def log_runs(results_dir: str | Path, runs: Iterable[RunRecord], *,
             descriptions: dict[str, str] | None = None, replace_descriptions: bool = True,
             prune: bool = False, prune_summaries: bool = True) -> Mirror:
    """Mirror runs with one client, each experiment's earlier mirrors updated in place or replaced.

    `descriptions` are the experiments' descriptions: written over the store's, or with
    `replace_descriptions=False` only where the experiment has none yet. Deleted runs left by earlier
    mirrors of the same experiment are purged too. With `prune`, the runs given are each experiment's
    whole grid (the workflow's mirror): mirrors of any other run of those experiments (a seed or setting
    that left the config) are deleted and purged, so the MLflow UI shows what the tables read; an earlier
    summary run too, unless `prune_summaries` is False (no summary files were given, by hand).
    """
    from mlflow.tracking import MlflowClient

    results_dir = Path(results_dir)
    uri = tracking_uri(results_dir)
    by_exp: dict[str, dict[tuple[str, str], RunRecord]] = {}
    for run in runs:  # a run given twice is mirrored once
        by_exp.setdefault(run.experiment, {})[(run.key_tag, run.key)] = run
    ids: dict[str, str] = {}
    summaries: dict[str, str] = {}
    exp_ids: dict[str, str] = {}
    with _store_lock(results_dir):
        client = MlflowClient(tracking_uri=uri)
        # each experiment fetched once: the lock keeps another mirror from changing it before it is used
        found = {}
        for name in by_exp:  # every experiment checked before anything is written
            found[name] = exp = client.get_experiment_by_name(name)
            if exp is not None:
                check_artifact_location(uri, exp)
        stale: list[str] = []
        for name, exp_runs in by_exp.items():
            exp = found[name]
            exp_id = exp_ids[name] = _experiment_id(client, name, uri, exp)
            client.set_experiment_tag(exp_id, EXPERIMENT_KIND_TAG, TRAINING_KIND)
            text = (descriptions or {}).get(name)
            # a new experiment has no tags; restoring one keeps them
            if text is not None and (replace_descriptions or exp is None or not exp.tags.get(NOTE_TAG)):
                client.set_experiment_tag(exp_id, NOTE_TAG, text)
            existing = _mirrors(client, exp_id)
            for run in exp_runs.values():
                rid, old = _log_run(client, exp_id, run, existing.pop((run.key_tag, run.key), []))
                (summaries if run.key_tag == SUMMARY_TAG else ids)[run.key] = rid
                stale += old
            for r in (r for rs in existing.values() for r in rs):
                live = r.info.lifecycle_stage != "deleted"
                if live and (not prune or (SUMMARY_TAG in r.data.tags and not prune_summaries)):
                    continue
                if live:
                    client.delete_run(r.info.run_id)
                stale.append(r.info.run_id)
        purged = len(stale) if purge_runs(uri, stale, list(exp_ids.values())) else 0
    return Mirror(uri, ids, exp_ids, summaries, purged)


def mirror_run_dirs(results_dir: str | Path, run_dirs: Iterable[str | Path], *,
                    description: str | None = None, summary_files: Sequence[str | Path] | None = None,
                    rounds: str = "evaluated", prune: bool = False) -> Mirror:
    """Rebuild the MLflow mirror of finished runs from their run.json and metrics.parquet.

    Each experiment's description is written from `description` (the config's top-level text; the
    workflow passes it, possibly empty) and the runs' grid; without it (by hand) only an experiment that
    has no description gets one, from the grid. With `summary_files` (tables and figures) each
    experiment also gets a summary run carrying them; given (even empty), they are the whole set, and
    `prune` then removes an earlier summary run not made again; None (by hand, no --summary) leaves the
    summary runs alone. `rounds`: which rounds' metrics (mirrored_rows).
    """
    runs = [read_run(d, rounds) for d in run_dirs]
    by_exp: dict[str, list[RunRecord]] = {}
    for run in runs:
        by_exp.setdefault(run.experiment, []).append(run)
    descriptions = {e: experiment_description(e, [r.params for r in rs], description or "")
                    for e, rs in by_exp.items()}
    summaries = [summary_record(e, rs, summary_files) for e, rs in by_exp.items()] if summary_files else []
    return log_runs(results_dir, runs + summaries, descriptions=descriptions,
                    replace_descriptions=description is not None, prune=prune,
                    prune_summaries=summary_files is not None)
