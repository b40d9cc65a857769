"""The MLflow mirror as a researcher queries it with the client: times, commit, artifacts, descriptions,
names, the training-runs view, in-place re-mirroring with no deleted runs, and untrusted run names."""

import json
import math
import os
from pathlib import Path

import pandas as pd
import pytest
from mlflow.entities import ViewType
from mlflow.tracking import MlflowClient

from hetfl import tracking
from hetfl.config import RunSpec

START, END = "2024-05-01T10:00:00.000+00:00", "2024-05-01T10:02:05.500+00:00"
START_MS, END_MS = 1714557600000, 1714557725500  # the same instants in Unix ms (hand-converted)


def _spec(experiment="expA", run="IID_T8_C_s0", table="accuracy_difference", seed=0):
    return RunSpec(experiment=experiment, run=run, table=table, dataset="synthetic", setting="IID", alpha=0.0,
                   beta=0.0, iid=True, num_devices=4, sizes={"distribution": "equal", "size": 20},
                   test_fraction=0.2, model="logreg", algorithm="fedavg", scheme="C", num_traces=8,
                   trace_order=("T_0",), local_epochs=1, batch_size=10, eta0=1.0, rounds=3, eval_every=1,
                   seed=seed).to_dict()


def _write_run(root: Path, spec: dict, acc=(0.5, 0.6, 0.7), **info) -> Path:
    """A finished run as `hetfl train` leaves it: run.json and metrics.parquet."""
    d = root / spec["experiment"] / spec["run"]
    d.mkdir(parents=True, exist_ok=True)
    m = pd.DataFrame({"round": [1, 2, 3], "metric": ["test_accuracy"] * 3, "value": list(acc)})
    m.to_parquet(d / "metrics.parquet", index=False)
    run = {"spec": spec, "status": "ok", "rounds_done": 3, "git_commit": "0123abcd" * 5, "device": "cpu",
           "wall_time_s": 125.5, "started_at": START, "finished_at": END, **info}
    (d / "run.json").write_text(json.dumps(run))
    return d


def _client(results: Path) -> MlflowClient:
    return MlflowClient(tracking_uri=f"sqlite:///{results / 'mlflow.db'}")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One default store (results/mlflow.db) for the module: creating an MLflow database costs seconds.
    Each test mirrors into experiments of its own."""
    results = tmp_path_factory.mktemp("store") / "results"
    results.mkdir()
    _client(results).search_experiments()  # creates the schema
    return results


@pytest.fixture(autouse=True)
def _default_store(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)


def test_run_shows_training_times_commit_dirty_flag_and_artifacts(store, tmp_path):
    results = store
    d = _write_run(results, _spec("times"), git_dirty=True, code_fingerprint="f00d")
    mirror = tracking.mirror_run_dirs(results, [d])
    client = _client(results)
    run = client.get_run(mirror.runs["times/IID_T8_C_s0"])
    assert (run.info.start_time, run.info.end_time) == (START_MS, END_MS)
    assert (run.info.end_time - run.info.start_time) / 1000 == 125.5  # the training's wall time
    assert run.data.tags["mlflow.source.git.commit"] == "0123abcd" * 5
    assert run.data.tags["hetfl.git_dirty"] == "true" and run.data.tags["hetfl.code_fingerprint"] == "f00d"
    assert run.info.status == "FINISHED"
    assert [m.value for m in client.get_metric_history(run.info.run_id, "test_accuracy")] == [0.5, 0.6, 0.7]
    assert sorted(a.path for a in client.list_artifacts(run.info.run_id)) == ["metrics.parquet", "run.json"]
    local = client.download_artifacts(run.info.run_id, "run.json", str(tmp_path))
    assert Path(local).read_bytes() == (d / "run.json").read_bytes()
    # the default store keeps artifacts beside it, under results/
    assert Path(run.info.artifact_uri.removeprefix("file://")).is_relative_to(results / "mlartifacts")


def test_a_tf32_run_says_so_in_its_tags_and_note(store):
    """A run trained with `hetfl train --tf32` is tagged hetfl.precision = tf32 and its note says so; an
    IEEE run (every run before the option) gets no such tag, so its mirror's tags are as they were."""
    results = store
    tf32 = _write_run(results, _spec("precision", run="tf32"), device="cuda", cuda_tf32=True)
    ieee = _write_run(results, _spec("precision", run="ieee"), device="cuda", cuda_tf32=False)
    mirror = tracking.mirror_run_dirs(results, [tf32, ieee])
    client = _client(results)
    tags = {name: client.get_run(mirror.runs[f"precision/{name}"]).data.tags for name in ("tf32", "ieee")}
    assert tags["tf32"]["hetfl.precision"] == "tf32" and "device cuda, TF32 products)" in \
        tags["tf32"]["mlflow.note.content"]
    assert "hetfl.precision" not in tags["ieee"] and "TF32" not in tags["ieee"]["mlflow.note.content"]


def test_results_without_timestamps_fall_back_to_file_time(store, tmp_path):
    results = store
    d = _write_run(results, _spec("mtime"), started_at=None, finished_at=None)
    os.utime(d / "metrics.parquet", (END_MS / 1000, END_MS / 1000))
    run = _client(results).get_run(tracking.mirror_run_dirs(results, [d]).runs["mtime/IID_T8_C_s0"])
    assert (run.info.start_time, run.info.end_time) == (END_MS - 125500, END_MS)
    assert run.data.tags["hetfl.git_dirty"] == "unknown"  # run.json from before the flag existed


def test_experiment_description_kind_and_unique_names(store, tmp_path):
    results = store
    runs = [_write_run(results, _spec("expA")), _write_run(results, _spec("expA", "IID_T8_C_s1", seed=10)),
            _write_run(results, _spec("expB", table="fast_reboot"))]
    tracking.mirror_run_dirs(results, runs, description="Quick reproduction of Ruan et al. Table 3.")
    client = _client(results)
    exp = client.get_experiment_by_name("expA")
    text = exp.tags["mlflow.note.content"]
    assert text.startswith("**expA**: table `accuracy_difference`")  # its own grid first
    assert text.endswith("\n\nPart of the grid: Quick reproduction of Ruan et al. Table 3.")
    assert "table `accuracy_difference` on dataset `synthetic`, 2 run(s)" in text and "- seeds: 0, 10" in text
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    names = [r.info.run_name for e in ("expA", "expB")
             for r in client.search_runs([client.get_experiment_by_name(e).experiment_id])]
    assert sorted(names) == ["expA/IID_T8_C_s0", "expA/IID_T8_C_s1", "expB/IID_T8_C_s0"]
    # by hand (no config description) the workflow's description is kept
    tracking.mirror_run_dirs(results, runs[:1])
    assert client.get_experiment_by_name("expA").tags["mlflow.note.content"] == text


def test_each_experiment_is_fetched_once_a_deleted_one_restored_and_a_new_one_described(store, monkeypatch):
    """One fetch of each experiment serves the copied-store check, its id and the by-hand description
    check (each fetched it again): a deleted experiment is restored under its id with its description
    kept, and a new one gets its grid's description."""
    runs = [_write_run(store, _spec("fetchold")), _write_run(store, _spec("fetchnew"))]
    tracking.mirror_run_dirs(store, runs[:1], description="the config")
    client = _client(store)
    old = client.get_experiment_by_name("fetchold")
    text = old.tags["mlflow.note.content"]
    client.delete_experiment(old.experiment_id)
    calls = []
    for method in ("get_experiment_by_name", "get_experiment"):
        real = getattr(MlflowClient, method)
        monkeypatch.setattr(MlflowClient, method,
                            lambda self, key, real=real, method=method: calls.append((method, key))
                            or real(self, key))
    mirror = tracking.mirror_run_dirs(store, runs)  # by hand: a description only where there is none
    assert calls == [("get_experiment_by_name", "fetchold"), ("get_experiment_by_name", "fetchnew")]
    assert mirror.experiments["fetchold"] == old.experiment_id
    restored, new = (client.get_experiment_by_name(e) for e in ("fetchold", "fetchnew"))
    assert restored.lifecycle_stage == "active" and restored.tags["mlflow.note.content"] == text
    assert new.tags["mlflow.note.content"].startswith("**fetchnew**: table `accuracy_difference`")
    assert "Part of the grid" not in new.tags["mlflow.note.content"]


def test_remirroring_updates_in_place_and_leaves_no_deleted_run(store, tmp_path):
    results = store
    a, b = _write_run(results, _spec("again")), _write_run(results, _spec("again", run="IID_T8_C_s1"))
    first = tracking.mirror_run_dirs(results, [a, b, a / "run.json"])  # a run given twice is one run
    second = tracking.mirror_run_dirs(results, [a, b])
    assert second.runs == first.runs and second.purged == 0  # unchanged runs keep their MLflow ids
    client = _client(results)
    exp_id = client.get_experiment_by_name("again").experiment_id
    history = client.get_metric_history(first.runs["again/IID_T8_C_s0"], "test_accuracy")
    assert [m.value for m in history] == [0.5, 0.6, 0.7]  # not logged twice
    # a store written by the old delete-and-recreate mirror holds soft-deleted mirrors: they go too,
    # but a deleted run that is no mirror is left alone
    old = client.create_run(exp_id, run_name="IID_T8_C_s0", tags={tracking.RUN_KEY_TAG: "again/IID_T8_C_s0"})
    mine = client.create_run(exp_id, run_name="my own run")
    client.delete_run(old.info.run_id)
    client.delete_run(mine.info.run_id)
    # b is retrained: its mirror is replaced, and the replaced run is purged with its artifacts
    _write_run(results, _spec("again", run="IID_T8_C_s1"), acc=(0.1, 0.2, 0.3))
    replaced = Path(client.get_run(first.runs["again/IID_T8_C_s1"]).info.artifact_uri.removeprefix("file://"))
    third = tracking.mirror_run_dirs(results, [a, b])
    assert third.runs["again/IID_T8_C_s0"] == first.runs["again/IID_T8_C_s0"]
    assert third.runs["again/IID_T8_C_s1"] != first.runs["again/IID_T8_C_s1"] and third.purged == 2
    assert [m.value for m in client.get_metric_history(third.runs["again/IID_T8_C_s1"], "test_accuracy")] \
        == [0.1, 0.2, 0.3]
    deleted = client.search_runs([exp_id], run_view_type=ViewType.DELETED_ONLY)
    assert [r.info.run_id for r in deleted] == [mine.info.run_id]
    assert len(client.search_runs([exp_id], run_view_type=ViewType.ACTIVE_ONLY)) == 2
    assert not replaced.exists()


def test_a_mirror_killed_half_way_is_replaced_not_kept(store, monkeypatch):
    """A mirror cut off after its run was created (a killed track job) holds part of its params and no
    metrics: mirroring again must replace it, not update it in place as if complete."""
    results = store
    a = _write_run(results, _spec("killed"))

    class Killed(BaseException):
        pass

    def dying(client, run_id, run):
        from mlflow.entities import Param

        client.log_batch(run_id, params=[Param("seed", "0")])
        raise Killed

    log_content = tracking._log_content
    monkeypatch.setattr(tracking, "_log_content", dying)
    with pytest.raises(Killed):
        tracking.mirror_run_dirs(results, [a])
    monkeypatch.setattr(tracking, "_log_content", log_content)
    again = tracking.mirror_run_dirs(results, [a])
    client = _client(results)
    run = client.get_run(again.runs["killed/IID_T8_C_s0"])
    assert run.data.params == tracking.flatten(_spec("killed"))
    assert [m.value for m in client.get_metric_history(run.info.run_id, "test_accuracy")] == [0.5, 0.6, 0.7]
    assert run.info.status == "FINISHED" and again.purged == 1
    exp_id = client.get_experiment_by_name("killed").experiment_id
    assert len(client.search_runs([exp_id], run_view_type=ViewType.ALL)) == 1


def test_a_pruning_mirror_removes_runs_that_left_the_grid(store):
    """The workflow mirrors an experiment's whole grid (`--prune`): a seed dropped from the config left its
    mirror live before (an audit counted 28 runs in an experiment of 18 and a summary). By hand, without
    --prune, mirroring some runs leaves the others alone."""
    results = store
    runs = [_write_run(results, _spec("pruned", run=f"IID_T8_C_s{s}", seed=s)) for s in range(3)]
    tracking.mirror_run_dirs(results, runs)
    client = _client(results)
    exp_id = client.get_experiment_by_name("pruned").experiment_id
    mine = client.create_run(exp_id, run_name="my own run")  # no mirror tag: never touched
    tracking.mirror_run_dirs(results, runs[:1])  # by hand: the other two stay
    assert len(client.search_runs([exp_id], run_view_type=ViewType.ACTIVE_ONLY)) == 4
    pruned = tracking.mirror_run_dirs(results, runs[:2], prune=True)  # seed 2 left the grid
    live = client.search_runs([exp_id], run_view_type=ViewType.ACTIVE_ONLY)
    assert sorted(r.info.run_name for r in live) == ["my own run", "pruned/IID_T8_C_s0", "pruned/IID_T8_C_s1"]
    assert pruned.purged == 1 and mine.info.run_id in {r.info.run_id for r in live}
    assert client.search_runs([exp_id], run_view_type=ViewType.DELETED_ONLY) == []


def test_purged_runs_leave_no_empty_artifact_folder(store):
    """`mlflow gc` deletes a purged run's artifacts/ folder but not the folder of the run above it: every
    replaced or pruned run left an empty mlartifacts/<experiment>/<run id>/ behind. The mirror removes the
    folders of the runs it purged where they are empty, and nothing else."""
    runs = [_write_run(store, _spec("emptydirs", run=f"IID_T8_C_s{s}", seed=s)) for s in range(3)]
    first = tracking.mirror_run_dirs(store, runs)
    s0, s1, s2 = (first.runs[f"emptydirs/IID_T8_C_s{s}"] for s in range(3))
    folder = store / "mlartifacts" / "emptydirs"
    assert {p.name for p in folder.iterdir()} == {s0, s1, s2}
    (folder / s2 / "notes.txt").write_text("mine")  # a file in a purged run's folder: the folder stays
    (folder / "not-a-run").mkdir()  # an empty folder of no purged run: stays
    _write_run(store, _spec("emptydirs", run="IID_T8_C_s0", seed=0), acc=(0.1, 0.2, 0.3))  # retrained
    again = tracking.mirror_run_dirs(store, runs[:2], prune=True)  # s0 replaced, s2 left the grid
    new_s0 = again.runs["emptydirs/IID_T8_C_s0"]
    assert again.purged == 2 and new_s0 != s0 and again.runs["emptydirs/IID_T8_C_s1"] == s1
    assert {p.name for p in folder.iterdir()} == {new_s0, s1, s2, "not-a-run"}  # s0's empty folder gone
    assert [p.name for p in (folder / s2).iterdir()] == ["notes.txt"]  # gc took its artifacts/ only
    assert sorted(p.name for p in (folder / s1 / "artifacts").iterdir()) == ["metrics.parquet", "run.json"]
    assert not any((folder / "not-a-run").iterdir())


def test_a_purge_leaves_the_tracking_uri_of_the_process_as_it_was(store, monkeypatch):
    """`mlflow gc` runs in this process (a `python -m mlflow gc` took 5-6 s of each mirror that replaced a
    run): its set_tracking_uri, which also sets MLFLOW_TRACKING_URI, is undone, as the environment read by
    the next mirror decides its store."""
    import mlflow

    client = _client(store)
    exp_id = client.create_experiment("purge_env")
    rids = [client.create_run(exp_id).info.run_id for _ in range(2)]
    for rid in rids:
        client.delete_run(rid)
    uri = tracking.tracking_uri(store)
    for rid, before in zip(rids, (None, "sqlite:////elsewhere/m.db"), strict=True):
        if before:
            monkeypatch.setenv("MLFLOW_TRACKING_URI", before)
        resolved = mlflow.get_tracking_uri()
        assert tracking.purge_runs(uri, [rid], [exp_id]) is True
        assert os.environ.get("MLFLOW_TRACKING_URI") == before and mlflow.get_tracking_uri() == resolved
        with pytest.raises(mlflow.exceptions.MlflowException, match="not found"):  # purged: gone
            client.get_run(rid)


def test_a_purge_that_fails_names_the_store_and_what_mlflow_said(store):
    client = _client(store)
    exp_id = client.create_experiment("purge_fails")
    live = client.create_run(exp_id).info.run_id  # not deleted: gc refuses it
    uri = tracking.tracking_uri(store)
    with pytest.raises(RuntimeError, match=f"mlflow gc could not purge 1 replaced run\\(s\\) from {uri}"
                                           f"(.|\n)*{live}"):
        tracking.purge_runs(uri, [live], [exp_id])
    assert os.environ.get("MLFLOW_TRACKING_URI") is None
    assert client.get_run(live).info.lifecycle_stage == "active"


def test_the_folders_of_runs_to_purge_come_from_one_search_per_chunk(store, monkeypatch):
    """_run_folders asked the store for each run to purge on its own (get_run); a search per chunk of ids
    finds them all, deleted ones included, in the order given, and only in the experiments given."""
    client = _client(store)
    exp_id = client.create_experiment("chunks", artifact_location=tracking.artifact_location(
        tracking.tracking_uri(store), "chunks"))
    other = client.create_experiment("chunks_other")
    rids = [client.create_run(exp_id).info.run_id for _ in range(3)]
    elsewhere = client.create_run(other).info.run_id
    for rid in rids[1:]:
        client.delete_run(rid)
    searches = []
    search_runs = MlflowClient.search_runs
    monkeypatch.setattr(MlflowClient, "search_runs",
                        lambda self, *a, **kw: searches.append(a) or search_runs(self, *a, **kw))
    monkeypatch.setattr(MlflowClient, "get_run", lambda self, rid: pytest.fail(f"get_run({rid})"))
    monkeypatch.setattr(tracking, "PURGE_SEARCH_IDS", 2)
    asked = [rids[2], rids[0], elsewhere, rids[1]]
    folders = tracking._run_folders(tracking.tracking_uri(store), asked, [exp_id])
    assert folders == [store / "mlartifacts" / "chunks" / rid for rid in (rids[2], rids[0], rids[1])]
    assert len(searches) == 2


def test_a_pruning_mirror_without_summary_files_keeps_the_summary_run(store, tmp_path, capsys):
    """`hetfl track --prune RUNS` by hand, without --summary, purged the experiment's summary run (its tables
    and figures) as a run that left the grid, and counted it "replaced"; the workflow's track job, up to
    date, did not bring it back. Given `--summary` (even with no file, an experiment without a table), the
    summary files are the whole set, and an earlier summary run is pruned."""
    from hetfl.cli import main

    runs = [_write_run(store, _spec("prunesum", run=f"IID_T8_C_s{s}", seed=s)) for s in range(2)]
    table = tmp_path / "tables/accuracy_difference.csv"
    table.parent.mkdir(parents=True)
    table.write_text("table")
    first = tracking.mirror_run_dirs(store, runs, description="", summary_files=[table], prune=True)
    client = _client(store)
    base = ["track", "--prune", "--results-root", str(store), *map(str, runs)]
    assert main(base) == 0 and "0 replaced run(s) purged" in capsys.readouterr().err
    assert client.get_run(first.summaries["prunesum"]).info.lifecycle_stage == "active"
    assert main([*base, "--summary"]) == 0 and "1 replaced run(s) purged" in capsys.readouterr().err
    exp_id = client.get_experiment_by_name("prunesum").experiment_id
    assert sorted(r.info.run_name for r in client.search_runs([exp_id], run_view_type=ViewType.ALL)) == \
        ["prunesum/IID_T8_C_s0", "prunesum/IID_T8_C_s1"]


def test_run_name_with_a_quote_is_matched_exactly(store, tmp_path):
    """Issue 11 item 14: a quote in a received run.json must not change how its mirror is found."""
    results = store
    quoted = _write_run(results, _spec("quote", run="x' AND tags.`hetfl.run_key` LIKE '%"))
    plain = _write_run(results, _spec("quote", run="x"))
    first = tracking.mirror_run_dirs(results, [plain, quoted])
    second = tracking.mirror_run_dirs(results, [quoted])
    assert second.runs == {k: v for k, v in first.runs.items() if "'" in k}
    client = _client(results)
    exp_id = client.get_experiment_by_name("quote").experiment_id
    runs = client.search_runs([exp_id], run_view_type=ViewType.ALL)
    assert sorted(r.info.run_name for r in runs) == ["quote/x", "quote/x' AND tags.`hetfl.run_key` LIKE '%"]


def test_summary_run_carries_tables_and_figures(store, tmp_path):
    results = store
    runs = [_write_run(results, _spec("summ"), user="ada"),
            _write_run(results, _spec("summ", run="IID_T8_C_s1"), user="ada")]
    reports = tmp_path / "reports"
    files = [reports / "tables/accuracy_difference.md", reports / "tables/accuracy_difference.csv",
             reports / "figures/scheme_curves.png"]
    for f in files:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(f.name)
    first = tracking.mirror_run_dirs(results, runs, description="", summary_files=files)
    client = _client(results)
    summary = client.get_run(first.summaries["summ"])
    assert summary.info.run_name == "summ/summary" and summary.data.tags["hetfl.kind"] == "summary"
    arts = {a.path for d in ("tables", "figures") for a in client.list_artifacts(summary.info.run_id, d)}
    assert arts == {"tables/accuracy_difference.md", "tables/accuracy_difference.csv",
                    "figures/scheme_curves.png"}
    assert summary.info.start_time == START_MS  # spans the experiment from its first run's start
    # the UI's Source and User columns: the runs' commit and user (an audit found both empty)
    assert summary.data.tags["mlflow.source.git.commit"] == "0123abcd" * 5
    assert summary.data.tags["mlflow.user"] == "ada"
    assert client.get_run(first.runs["summ/IID_T8_C_s0"]).data.tags["mlflow.user"] == "ada"
    files[0].write_text("a table built again")  # new bytes, same files: written over in place
    again = tracking.mirror_run_dirs(results, runs, description="", summary_files=files)
    assert again.summaries == first.summaries and again.runs == first.runs and again.purged == 0
    local = client.download_artifacts(summary.info.run_id, "tables/accuracy_difference.md", str(tmp_path))
    assert Path(local).read_text() == "a table built again"
    with pytest.raises(FileNotFoundError, match="absent.svg"):
        tracking.mirror_run_dirs(results, runs, summary_files=[reports / "figures/absent.svg"])


def test_a_summary_kept_in_place_drops_the_commit_and_user_its_runs_no_longer_share(store, tmp_path):
    """A run retrained at another commit by another user, not the experiment's first: the summary's files and
    start are the same, so it is kept in place; its Version and User columns must then be empty, not the
    old commit and user that half of its runs no longer have."""
    files = [tmp_path / "tables/accuracy_difference.csv"]
    files[0].parent.mkdir(parents=True)
    files[0].write_text("table")
    runs = [_write_run(store, _spec("stale", run=f"IID_T8_C_s{s}", seed=s), user="ada") for s in (0, 1)]
    first = tracking.mirror_run_dirs(store, runs, description="", summary_files=files)
    client = _client(store)
    tags = client.get_run(first.summaries["stale"]).data.tags
    assert tags["mlflow.source.git.commit"] == "0123abcd" * 5 and tags["mlflow.user"] == "ada"
    _write_run(store, _spec("stale", run="IID_T8_C_s1", seed=1), user="bob", git_commit="4567cdef" * 5,
               started_at="2024-05-02T10:00:00.000+00:00", finished_at="2024-05-02T10:02:00.000+00:00")
    again = tracking.mirror_run_dirs(store, runs, description="", summary_files=files)
    assert again.summaries == first.summaries  # same files, same start: in place
    tags = client.get_run(again.summaries["stale"]).data.tags
    assert "mlflow.source.git.commit" not in tags and "mlflow.user" not in tags


def test_a_table_cut_off_by_hand_is_not_mirrored(store, tmp_path):
    """A table file emptied by hand is newer than its runs, so Snakemake does not make it again, and
    `hetfl track --summary` (run on under make reproduce's --keep-going) put the empty table in the summary
    run. It is refused naming the file, and the summary keeps the table it had."""
    runs = [_write_run(store, _spec("cut"))]
    table = tmp_path / "reports/tables/accuracy_difference.csv"
    table.parent.mkdir(parents=True)
    table.write_text("dataset,verdict\nSYNTHETIC,agrees\n")
    first = tracking.mirror_run_dirs(store, runs, description="", summary_files=[table])
    table.write_text("")
    with pytest.raises(ValueError, match=r"summary files are empty: .*accuracy_difference.csv; allowed"):
        tracking.mirror_run_dirs(store, runs, description="", summary_files=[table])
    local = _client(store).download_artifacts(first.summaries["cut"], "tables/accuracy_difference.csv",
                                              str(tmp_path))
    assert Path(local).read_text() == "dataset,verdict\nSYNTHETIC,agrees\n"


def test_tracking_uri_from_the_environment(tmp_path, monkeypatch):
    store = tmp_path / "elsewhere"
    store.mkdir()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{store / 'm.db'}")
    results = tmp_path / "results"
    d = _write_run(results, _spec("env"))
    rid = tracking.mirror_run_dirs(results, [d]).runs["env/IID_T8_C_s0"]
    client = MlflowClient(tracking_uri=f"sqlite:///{store / 'm.db'}")
    assert sorted(a.path for a in client.list_artifacts(rid)) == ["metrics.parquet", "run.json"]
    assert (store / "mlartifacts" / "env").is_dir() and not (results / "mlflow.db").exists()


def test_a_path_that_is_no_run_directory_is_named(store, tmp_path):
    (tmp_path / "mlflow.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match="mlflow.json is not a run directory"):
        tracking.mirror_run_dirs(store, [tmp_path / "mlflow.json"])


def test_a_summary_path_that_is_no_file_is_named_with_its_flag(store, tmp_path, capsys):
    """`hetfl track RUN --summary DIR` said "summary files do not exist: DIR" of a directory that exists,
    without the flag or what it takes."""
    from hetfl.cli import main

    d = _write_run(store, _spec("summflag"))
    assert main(["track", "--results-root", str(store), str(d), "--summary", str(tmp_path),
                 "--summary", str(tmp_path / "no.md")]) == 2
    err = capsys.readouterr().err
    assert f"--summary has value(s) {tmp_path}, {tmp_path / 'no.md'}, which are not files" in err
    assert "allowed: the tables and figures" in err
    assert not [e for e in _client(store).search_experiments() if e.name == "summflag"]


def test_summary_takes_one_file_is_repeated_and_runs_may_follow_it(store, tmp_path, capsys, monkeypatch):
    """`--summary` took every path after it (nargs="*"): `hetfl track --summary T.md RUN...` made the runs
    summary files, and the error told users to give the runs first. It takes one file and is repeated, the
    runs may come before or after it, a bare `--summary` still says the summary files are none, and the
    old form (several files after one --summary) is refused naming the file, not mirrored without it."""
    from hetfl.cli import main

    runs = [_write_run(store, _spec("summone", run=f"IID_T8_C_s{s}", seed=s)) for s in range(2)]
    r0, r1 = map(str, runs)
    md, csv = tmp_path / "tables/accuracy_difference.md", tmp_path / "tables/accuracy_difference.csv"
    md.parent.mkdir()
    md.write_text("table")
    csv.write_text("table")
    base = ["track", "--results-root", str(store)]
    out = tmp_path / "mlflow.json"
    assert main([*base, "--out", str(out), "--summary", str(md), r0, r1]) == 0, capsys.readouterr().err
    ids = json.loads(out.read_text())
    assert sorted(ids["runs"]) == ["summone/IID_T8_C_s0", "summone/IID_T8_C_s1"]
    assert [a.path for a in _client(store).list_artifacts(ids["summaries"]["summone"], "tables")] == \
        ["tables/accuracy_difference.md"]

    calls = []
    monkeypatch.setattr(tracking, "mirror_run_dirs", lambda root, runs, **kw: calls.append(
        ([str(r) for r in runs], kw["summary_files"])) or tracking.Mirror("uri", {}, {}, {}, 0))
    for argv, summary in [([r0, "--summary", str(md), "--summary=" + str(csv), r1], [md, csv]),
                          ([r0, r1, "--summary"], []), (["--summary", "--rounds", "all", r0, r1], []),
                          ([r0, r1], None)]:
        assert main([*base, *argv]) == 0, capsys.readouterr().err
        assert calls.pop() == ([r0, r1], summary), argv
    for argv, said in [([r0, "--summary", str(md), str(csv)],
                        f"run path {csv} is a table or figure, not a run; allowed: run directories or their "
                        "run.json files; --summary takes one file: give each table and figure its own "
                        "--summary"),
                       (["--summary", f"{r0}/run.json", r1],
                        f"--summary has value(s) {r0}/run.json, which are runs, not tables or figures; "
                        "allowed: the tables and figures"),
                       # a run directory after --summary: it said only "which are not files"
                       (["--summary", str(r0), r1],
                        f"--summary has value(s) {r0}, which are runs, not tables or figures; "
                        "allowed: the tables and figures")]:
        assert main([*base, *argv]) == 2 and said in capsys.readouterr().err, argv
    assert calls == []


def test_track_refuses_a_results_root_that_is_no_directory(store, tmp_path, capsys, monkeypatch):
    """`hetfl track --results-root PATH` with a folder that does not exist (a typo; the default results/
    from another directory) made it and a new MLflow store in it, and mirrored there. It is refused before
    any work, naming the flag, the value and what is allowed; a file is refused the same way."""
    from hetfl.cli import main

    d = _write_run(store, _spec("noroot"))
    (tmp_path / "a_file").write_text("")
    for value in (tmp_path / "typo", tmp_path / "a_file"):
        assert main(["track", "--results-root", str(value), str(d)]) == 2
        err = capsys.readouterr().err
        assert f"hetfl track: error: --results-root has value '{value}', which is not an existing " \
            f"directory (relative to {Path.cwd()}); allowed: " in err
        assert "the results directory" in err
    monkeypatch.chdir(tmp_path)  # the default, results/, where there is none
    assert main(["track", str(d)]) == 2
    said = f"--results-root has value 'results', which is not an existing directory (relative to {tmp_path})"
    assert said in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a_file"]  # nothing made: no typo/, no results/


def test_a_copied_store_is_refused_before_it_touches_the_originals_artifacts(tmp_path):
    """A SQLite store keeps each experiment's artifact location as an absolute path: in a copy of a project
    (cp -r), mirroring again purged the original's artifacts of the runs it replaced or pruned and wrote its
    new runs' artifacts into the original's results/mlartifacts. The copy is refused, naming both places."""
    import re
    import shutil

    original = tmp_path / "a" / "results"
    runs = [_write_run(original, _spec("copied", run=f"IID_T8_C_s{s}", seed=s)) for s in range(2)]
    tracking.mirror_run_dirs(original, runs)
    arts = sorted(p.relative_to(original) for p in (original / "mlartifacts").rglob("*") if p.is_file())
    assert len(arts) == 4
    copy = tmp_path / "b" / "results"
    shutil.copytree(original, copy)
    said = re.escape(f"experiment 'copied' keeps its artifacts in {original / 'mlartifacts' / 'copied'}, not "
                     f"beside {copy / 'mlflow.db'}")
    with pytest.raises(ValueError, match=said):
        tracking.mirror_run_dirs(copy, [copy / "copied" / "IID_T8_C_s0"], prune=True)
    assert sorted(p.relative_to(original) for p in (original / "mlartifacts").rglob("*") if p.is_file()) \
        == arts


def test_a_tracking_server_is_not_purged_from_the_client(capsys):
    assert tracking.can_hard_delete("sqlite:///x.db") and tracking.can_hard_delete("postgresql://h/db")
    assert not tracking.can_hard_delete("http://127.0.0.1:5000")
    assert tracking.purge_runs("https://mlflow.example", ["abc"], ["1"]) is False
    assert "mlflow gc" in capsys.readouterr().err
    assert tracking.artifact_location("http://127.0.0.1:5000", "e") is None  # the server's own default


def test_track_verb_writes_ids_and_the_experiment_links(store, tmp_path, capsys):
    from hetfl.cli import main

    d = _write_run(store, _spec("verb"))
    out = tmp_path / "mlflow.json"
    assert main(["track", "--results-root", str(store), "--out", str(out), "--description", "it's a config",
                 str(d)]) == 0
    ids = json.loads(out.read_text())
    assert set(ids["runs"]) == {"verb/IID_T8_C_s0"} and set(ids["experiments"]) == {"verb"}
    exp_id = ids["experiments"]["verb"]
    assert f"#/experiments/{exp_id}/runs?workflowType=machine_learning" in capsys.readouterr().err
    exp = _client(store).get_experiment_by_name("verb")
    assert exp.tags["mlflow.note.content"].endswith("Part of the grid: it's a config")


def test_training_by_hand_records_its_times_and_mirrors_itself(store, tmp_path):
    from hetfl.cli import main
    from hetfl.data.build import make_split
    from hetfl.data.traces import make_traces

    spec = RunSpec.from_dict(_spec(experiment="hand", run="r"))
    make_split(tmp_path / "split.npz", spec.split_spec(), spec.seed)
    make_traces(tmp_path / "t.npz", traceset=spec.traceset, num_devices=4, rounds=3, seed=0)
    out = store / "hand/r"
    assert main(["train", "--spec", json.dumps(spec.to_dict()), "--split", str(tmp_path / "split.npz"),
                 "--traces", str(tmp_path / "t.npz"), "--out", str(out), "--results-root", str(store)]) == 0
    info = json.loads((out / "run.json").read_text())
    exp = _client(store).get_experiment_by_name("hand")
    (run,) = _client(store).search_runs([exp.experiment_id])
    assert run.info.run_name == "hand/r"
    assert run.info.start_time == tracking._ms(info["started_at"])
    assert run.info.end_time == tracking._ms(info["finished_at"])
    assert abs(run.info.end_time - run.info.start_time - info["wall_time_s"] * 1000) <= 1


def _steps(client, run_id, metric):
    return [m.step for m in client.get_metric_history(run_id, metric)]


def test_metrics_are_mirrored_at_the_evaluated_rounds_unless_all_are_asked_for(store, capsys):
    """eval_every = 2 over 5 rounds: evaluated at 2, 4 and the last round 5; lr is recorded every round.
    The mirror logs every metric at 2, 4, 5; `--rounds all` logs lr at 1..5, and switching the mode
    replaces the mirror (its metrics cannot be taken back) and purges the old one."""
    from hetfl.cli import main

    d = _write_run(store, _spec("evalrounds", run="IID_T8_C_s0"))
    rows = [(r, "lr", 1.0 / r) for r in range(1, 6)]
    rows += [(r, m, v) for r in (2, 4, 5) for m, v in (("test_loss", 2.0 / r), ("test_accuracy", r / 10))]
    pd.DataFrame(rows, columns=["round", "metric", "value"]).to_parquet(d / "metrics.parquet", index=False)
    client = _client(store)
    first = tracking.mirror_run_dirs(store, [d]).runs["evalrounds/IID_T8_C_s0"]
    assert _steps(client, first, "lr") == [2, 4, 5]
    assert [m.value for m in client.get_metric_history(first, "lr")] == [0.5, 0.25, 0.2]
    assert _steps(client, first, "test_accuracy") == [2, 4, 5]
    assert client.get_run(first).data.tags["hetfl.mirrored_rounds"] == "evaluated"
    assert main(["track", "--results-root", str(store), "--rounds", "all", str(d)]) == 0
    (exp,) = [e for e in client.search_experiments() if e.name == "evalrounds"]
    (run,) = client.search_runs([exp.experiment_id], run_view_type=ViewType.ALL)
    assert run.info.run_id != first and _steps(client, run.info.run_id, "lr") == [1, 2, 3, 4, 5]
    assert "1 replaced run(s) purged" in capsys.readouterr().err
    with pytest.raises(ValueError, match="rounds has value 'some'.*allowed: evaluated, all"):
        tracking.read_run(d, "some")


def test_a_run_without_a_local_holdout_is_mirrored_at_its_evaluated_rounds(store):
    """test_fraction 0 (FedFOR's Table 4): no test_loss is recorded, but train_loss and global_test_* are, at
    the evaluated rounds 3 and 6; lr and bytes_up every round. The mirror logs every metric at 3 and 6, as
    its tag `hetfl.mirrored_rounds = evaluated` says (it logged all six rounds of lr and bytes_up)."""
    d = _write_run(store, _spec("noholdout", run="IID_T8_C_s0"))
    rows = [(r, m, v) for r in range(1, 7) for m, v in (("lr", 0.05), ("bytes_up", 80.0 * r))]
    rows += [(r, m, v) for r in (3, 6) for m, v in (("train_loss", 2.0 / r), ("global_test_accuracy", r / 10),
                                                    ("test_samples", 0.0))]
    pd.DataFrame(rows, columns=["round", "metric", "value"]).to_parquet(d / "metrics.parquet", index=False)
    run_id = tracking.mirror_run_dirs(store, [d]).runs["noholdout/IID_T8_C_s0"]
    client = _client(store)
    assert client.get_run(run_id).data.tags["hetfl.mirrored_rounds"] == "evaluated"
    assert {m: _steps(client, run_id, m) for m in ("lr", "bytes_up", "train_loss", "global_test_accuracy")} \
        == {"lr": [3, 6], "bytes_up": [3, 6], "train_loss": [3, 6], "global_test_accuracy": [3, 6]}
    from hetfl.engine.runner import EVAL_LOSSES

    assert tracking.EVALUATION_MARKERS == EVAL_LOSSES  # the losses every evaluated round records


def test_a_flat_stretch_is_mirrored_at_its_two_ends(store):
    """Of the evaluated rounds over which a metric keeps one value, the mirror logs the first and the last:
    MLflow's line through them is the same. A change, a return to an earlier value and NaN are kept."""
    frame = pd.DataFrame(
        [(r, "bytes_up", 8.0) for r in range(1, 7)]  # flat throughout: rounds 1 and 6
        + [(r, "active", v) for r, v in zip(range(1, 7), [5, 5, 5, 4, 5, 5], strict=True)]
        + [(r, "loss", v) for r, v in zip(range(1, 7), [1, 1, math.nan, math.nan, 1, 1], strict=True)],
        columns=["round", "metric", "value"])
    kept = tracking.flat_ends(frame)
    rounds = {metric: sorted(kept.loc[kept["metric"] == metric, "round"])
              for metric in frame["metric"].unique()}
    assert rounds == {"bytes_up": [1, 6], "active": [1, 3, 4, 5, 6], "loss": [1, 2, 3, 4, 5, 6]}

    d = _write_run(store, _spec("flat", run="IID_T8_C_s0"))
    rows = [(r, m, v) for r in range(1, 6) for m, v in (("test_loss", 2.0 / r), ("bytes_up", 80.0))]
    pd.DataFrame(rows, columns=["round", "metric", "value"]).to_parquet(d / "metrics.parquet", index=False)
    run_id = tracking.mirror_run_dirs(store, [d]).runs["flat/IID_T8_C_s0"]
    client = _client(store)
    assert _steps(client, run_id, "bytes_up") == [1, 5]
    assert _steps(client, run_id, "test_loss") == [1, 2, 3, 4, 5]


def _documented_tags() -> set[str]:
    """The tags docs/tracking.md's "Tags" table lists (its first column)."""
    import re

    text = (Path(__file__).resolve().parents[1] / "docs/tracking.md").read_text()
    section = text.split("\n## Tags\n", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([^`]+)` \|", section, flags=re.MULTILINE))


def _every_tag_written(store: Path, tmp_path: Path, experiment: str) -> set[str]:
    """The tags of a training run that has every optional tag and of a summary run."""
    spec = {**_spec(experiment), "data_dir": "/d" * 4000}  # longer than MLflow keeps
    d = _write_run(store, spec, acc=(0.5, 0.6, math.nan), user="ada", code_fingerprint="f00d",
                   git_dirty=False, device="cuda", cuda_tf32=True,  # and a plugin's algorithm:
                   algorithm_source={"package": "fedadam-plugin", "version": "0.1",
                                     "target": "fa.algo:FedAdam"})
    table = tmp_path / "reports/tables/accuracy_difference.md"
    table.parent.mkdir(parents=True, exist_ok=True)
    table.write_text("a table")
    mirror = tracking.mirror_run_dirs(store, [d], description="", summary_files=[table])
    client = _client(store)
    return {k for rid in (mirror.runs[f"{experiment}/IID_T8_C_s0"], mirror.summaries[experiment])
            for k in client.get_run(rid).data.tags}


def test_every_tag_the_mirror_writes_is_documented(store, tmp_path):
    """docs/tracking.md named some tags and left out others (mlflow.source.name and .type, hetfl.kind,
    hetfl.runs; an audit), and called the commit's column Source (MLflow 3 shows it under Version)."""
    written = _every_tag_written(store, tmp_path, "tagdoc")
    documented = _documented_tags()
    assert written - documented == set(), "written but not documented"
    assert documented - written == set(), "documented but never written"


def test_a_summary_run_names_the_table_whose_runs_it_was_built_from(store, tmp_path):
    """quick.yaml's bmta table reads the runs of four experiments (and fairness reads bmta's): each of their
    summary runs said 'Tables and figures built from the N run(s) of <experiment>', which was false; it
    also left the UI's Source column empty."""
    runs = [_write_run(store, _spec("summnote", run=f"IID_T8_C_s{s}", table="bmta", seed=s)) for s in (0, 1)]
    table = tmp_path / "reports/tables/bmta.md"
    table.parent.mkdir(parents=True, exist_ok=True)
    table.write_text("a table")
    mirror = tracking.mirror_run_dirs(store, runs, description="", summary_files=[table])
    tags = _client(store).get_run(mirror.summaries["summnote"]).data.tags
    assert tags["hetfl.table"] == "bmta"
    note = tags["mlflow.note.content"]
    assert "params.table = 'bmta'" in note and "summnote's 2 run(s) among them" in note
    assert "built from the 2 run(s) of summnote" not in note
    assert (tags["mlflow.source.name"], tags["mlflow.source.type"]) == ("hetfl table, figure", "LOCAL")


def test_a_figures_caption_and_the_split_chart_sit_beside_the_figures(store, tmp_path):
    """A figure's caption went to reports/, away from its figure; the split chart has its own folder."""
    runs = [_write_run(store, _spec("captions"))]
    reports = tmp_path / "reports"
    files = [reports / "figures/scheme_curves.png", reports / "figures/scheme_curves.caption.html",
             reports / "figures/splits/captions.png", reports / "figures/splits/captions.caption.html",
             reports / "tables/accuracy_difference.md"]
    for f in files:
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(f.name)
    rid = tracking.mirror_run_dirs(store, runs, description="", summary_files=files).summaries["captions"]
    client = _client(store)
    paths = {a.path for d in ("tables", "figures", "figures/splits") for a in client.list_artifacts(rid, d)}
    assert paths >= {"figures/scheme_curves.png", "figures/scheme_curves.caption.html",
                     "figures/splits/captions.png", "figures/splits/captions.caption.html",
                     "tables/accuracy_difference.md"}
    assert {a.path for a in client.list_artifacts(rid)} == {"figures", "tables"}


def test_a_runs_description_says_what_the_run_is(store):
    """The runs table's Description column (mlflow.note.content) read 'Mirror of `results/x/y` (status
    ok, ...)': a path repeating the run's name. It now starts with the run's set-up."""
    spec = {**_spec("note"), "algorithm": "fedprox", "algorithm_params": {"mu": 0.01},
            "reading": "completion=floor", "event": {"kind": "arrival", "round": 3, "policy": "fast_reboot"}}
    rid = tracking.mirror_run_dirs(store, [_write_run(store, spec)]).runs["note/IID_T8_C_s0"]
    note = _client(store).get_run(rid).data.tags["mlflow.note.content"]
    assert note.startswith("fedprox (mu = 0.01), scheme C, |T| = 8, seed 0 on synthetic IID (4 devices, 3 "
                           "rounds); arrival at round 3 (fast_reboot); reading completion=floor. Mirror of `")
    assert note.endswith("(status ok, 3 rounds, device cpu); run.json and metrics.parquet are its artifacts.")


def test_a_run_logs_its_split_as_a_dataset_input(store):
    """The runs table's Dataset column was empty and `dataset.name = 'synthetic'` found nothing: the run's
    split is now its dataset input (name, the split's sha256 as digest, its path as source), logged once
    however often the run is mirrored again."""
    split = {"path": "data_splits/ds/IID/seed0/split.npz", "sha256": "0cd167b5" + "0" * 56}
    d = _write_run(store, _spec("ds"), split=split)
    client = _client(store)
    for _ in range(2):  # the second mirror keeps the run in place
        rid = tracking.mirror_run_dirs(store, [d]).runs["ds/IID_T8_C_s0"]
        (found,) = client.get_run(rid).inputs.dataset_inputs
    assert (found.dataset.name, found.dataset.digest) == ("synthetic", "0cd167b5")
    assert json.loads(found.dataset.source) == {"uri": split["path"]}
    assert [(t.key, t.value) for t in found.tags] == [("mlflow.data.context", "training")]
    exp_id = client.get_experiment_by_name("ds").experiment_id
    assert [r.info.run_id for r in client.search_runs([exp_id], "dataset.name = 'synthetic'")] == [rid]


def test_a_diverged_runs_nonfinite_values_are_left_out_and_said_so(store):
    """A diverged run's round of NaN accuracy and infinite loss: NaN was left out silently (its last finite
    values then read as the run's final ones) and +inf was logged, which MLflow's SQL store keeps as
    1.8e308. Neither is logged now, and the tag and the description name the metrics and the round."""
    d = _write_run(store, _spec("diverged"), status="diverged")
    rows = [(1, "test_accuracy", 0.5), (2, "test_accuracy", 0.6), (3, "test_accuracy", math.nan),
            (1, "test_loss", 2.0), (2, "test_loss", 1.5), (3, "test_loss", math.inf)]
    pd.DataFrame(rows, columns=["round", "metric", "value"]).to_parquet(d / "metrics.parquet", index=False)
    rid = tracking.mirror_run_dirs(store, [d]).runs["diverged/IID_T8_C_s0"]
    client = _client(store)
    run = client.get_run(rid)
    assert run.info.status == "FAILED" and run.data.tags["hetfl.status"] == "diverged"
    assert [(m.step, m.value) for m in client.get_metric_history(rid, "test_loss")] == [(1, 2.0), (2, 1.5)]
    assert _steps(client, rid, "test_accuracy") == [1, 2]
    assert run.data.tags["hetfl.nonfinite_metrics"] == "test_accuracy, test_loss"
    assert "NaN or ±inf values of test_accuracy, test_loss (first at round 3;" in \
        run.data.tags["mlflow.note.content"]


def test_a_mirror_killed_while_updating_in_place_is_not_left_finished(store, tmp_path, monkeypatch):
    """A summary run kept in place gets its tables' new bytes written over one file after another: a track
    job killed between two files left it FINISHED, complete by its content tag, with one table new and
    the other old. Now it is RUNNING until the last file is written, and the next mirror replaces it."""
    runs = [_write_run(store, _spec("inplace"))]
    md, csv = tmp_path / "reports/tables/t.md", tmp_path / "reports/tables/t.csv"
    md.parent.mkdir(parents=True, exist_ok=True)
    md.write_text("old md")
    csv.write_text("old csv")
    first = tracking.mirror_run_dirs(store, runs, description="", summary_files=[md, csv])
    md.write_text("new md")
    csv.write_text("new csv")

    class Killed(BaseException):
        pass

    log_artifact = MlflowClient.log_artifact
    written = []

    def dying(self, run_id, local_path, artifact_path=None):  # killed between the summary's two tables
        if artifact_path == "tables":
            if written:
                raise Killed
            written.append(local_path)
        return log_artifact(self, run_id, local_path, artifact_path)

    monkeypatch.setattr(MlflowClient, "log_artifact", dying)
    with pytest.raises(Killed):
        tracking.mirror_run_dirs(store, runs, description="", summary_files=[md, csv])
    monkeypatch.setattr(MlflowClient, "log_artifact", log_artifact)
    client = _client(store)
    assert client.get_run(first.summaries["inplace"]).info.status == "RUNNING"  # not shown as complete
    again = tracking.mirror_run_dirs(store, runs, description="", summary_files=[md, csv])
    summary = client.get_run(again.summaries["inplace"])
    assert summary.info.status == "FINISHED" and again.summaries != first.summaries
    for name, text in (("t.md", "new md"), ("t.csv", "new csv")):
        local = client.download_artifacts(summary.info.run_id, f"tables/{name}", str(tmp_path / "dl"))
        assert Path(local).read_text() == text
    assert again.runs == first.runs  # the training run, unchanged, was kept in place


def test_a_param_longer_than_mlflow_keeps_is_cut_visibly(store):
    """MLflow keeps 6,000 characters of a param; the mirror cut longer values silently, so the UI showed a
    value no run had. The cut one now ends in a marker, and the tag hetfl.cut_params names it."""
    spec = {**_spec("cut"), "data_dir": "/d" * 4000}
    runs = [_write_run(store, spec), _write_run(store, _spec("cut", run="short"))]
    mirror = tracking.mirror_run_dirs(store, runs)
    client = _client(store)
    run = client.get_run(mirror.runs["cut/IID_T8_C_s0"])
    value = run.data.params["data_dir"]
    assert len(value) == 6000 and value.endswith(tracking.CUT) and value.startswith("/d/d")
    assert run.data.tags["hetfl.cut_params"] == "data_dir" and run.data.params["seed"] == "0"
    assert "hetfl.cut_params" not in client.get_run(mirror.runs["cut/short"]).data.tags
