"""Readings where Ruan et al. are silent or ambiguous: config options, the readings axis, and each option's
effect on the data, the traces or the round (docs/readings.md)."""

import copy
import json

import numpy as np
import pytest

from hetfl.config import ConfigError, expand_runs, validate_config
from hetfl.data.federation import from_device_lists
from hetfl.data.traces import generate_traces, make_traces
from hetfl.engine.runner import TrainSettings, train
from hetfl.models import make_model

BASE = {
    "experiments": {
        "t3": {"table": "accuracy_difference", "dataset": "synthetic",
               "settings": {"IID": {"alpha": 0.0, "beta": 0.0, "iid": True},
                            "NIID": {"alpha": 1.0, "beta": 1.0}},
               "num_devices": 6, "schemes": ["A", "C"], "num_traces": [1, 6], "rounds": 3, "seeds": [0, 1]},
    }
}


def _config(**exp):
    cfg = copy.deepcopy(BASE)
    cfg["experiments"]["t3"].update(exp)
    return validate_config(cfg)


def test_defaults_follow_the_paper():
    spec = next(expand_runs(_config()))
    # footnote 1 (E local updates), §5.1 "randomly assigned a trace"; nearest (what devices submit keeps
    # Table 2's moments) and 0.05 are documented choices
    assert (spec.local_work, spec.completion, spec.trace_assignment, spec.p_inactive) == \
        ("steps", "nearest", "random", 0.05)
    assert spec.reading == "" and spec.trace_key == "T1/n6_r3_seed0"


def test_readings_axis_changes_one_reading_at_a_time():
    runs = list(expand_runs(_config(readings={"local_work": ["epochs"], "completion": ["floor"],
                                              "iid": [False]})))
    defaults = [r for r in runs if not r.reading]
    assert len(defaults) == 2 * 2 * 2 * 2  # settings × |T| × schemes × seeds
    epochs = [r for r in runs if r.reading == "local_work=epochs"]
    assert len(epochs) == len(defaults) and all(r.local_work == "epochs" and r.completion == "nearest"
                                                for r in epochs)
    assert epochs[0].run == defaults[0].run + "__local_work-epochs"
    # completion cannot change a run whose traces are all T_0 (every device completes): no variant there
    floor = [r for r in runs if r.reading == "completion=floor"]
    assert {r.num_traces for r in floor} == {6} and len(floor) == len(defaults) // 2
    # iid applies to SYNTHETIC(0, 0) settings only, and gets its own split
    iid = [r for r in runs if r.reading == "iid=false"]
    assert {r.setting for r in iid} == {"IID"} and not any(r.iid for r in iid)
    assert iid[0].split_key == "t3/IID__iid-false/seed0" and iid[0].cell != defaults[0].cell
    assert floor[0].split_key == f"t3/{floor[0].setting}/seed{floor[0].seed}"  # shares the split


def test_readings_grid_restricts_the_variants_only():
    runs = list(expand_runs(_config(readings={"trace_assignment": ["stratified"]},
                                    readings_grid={"seeds": [1], "settings": ["NIID"]})))
    strat = [r for r in runs if r.reading]
    assert {(r.setting, r.seed, r.num_traces) for r in strat} == {("NIID", 1, 6)}
    assert strat[0].trace_key.endswith("_stratified")
    assert len([r for r in runs if not r.reading]) == 16


def test_p_inactive_variant_only_where_an_inactive_trace_is_used():
    runs = list(expand_runs(_config(readings={"p_inactive": [0.02]})))
    variants = [r for r in runs if r.reading]
    assert {r.num_traces for r in variants} == {6}  # T_hi is the 6th trace
    assert variants[0].trace_key.endswith("_pi0.02")


def test_a_p_inactive_the_trace_file_name_rounds_or_writes_with_an_exponent_reaches_its_trace_job(tmp_path):
    """The trace file's name carried p_inactive as `:g` wrote it, and the trace rule read it back from the
    name: 0.00001 was `_pi1e-05`, which the rule's wildcards could not match (the workflow stopped at
    "Missing input files" after validation passed), and 0.0123456789 was drawn at 0.0123457. The name now
    holds every digit; a value `:g` writes exactly keeps its name."""
    import subprocess
    import sys

    from conftest import ROOT

    runs = list(expand_runs(_config(readings={"p_inactive": [0.00001, 0.0123456789, 0.02]})))
    keys = sorted({r.trace_key.rpartition("_pi")[2] for r in runs if r.reading})
    assert keys == ["0.00001", "0.0123456789", "0.02"]
    raw = copy.deepcopy(BASE)
    raw["experiments"]["t3"].update(readings={"p_inactive": [0.00001, 0.0123456789]}, seeds=[0])
    (tmp_path / "c.yaml").write_text(json.dumps(raw))  # YAML reads JSON
    plan = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory",
                           str(tmp_path), "--configfile", str(tmp_path / "c.yaml"), "-n", "-p", "--cores",
                           "1"], capture_output=True, text=True)
    assert plan.returncode == 0, plan.stdout + plan.stderr
    assert "--p-inactive 0.00001 " in plan.stdout and "--p-inactive 0.0123456789 " in plan.stdout, plan.stdout


def test_a_reading_that_changes_no_run_is_refused():
    with pytest.raises(ConfigError, match=r"readings.boost.*changes no run"):
        _config(readings={"boost": ["multiplicative"]})  # no arrival event in this experiment
    with pytest.raises(ConfigError, match=r"readings.local_work.*changes no run"):
        _config(readings={"local_work": ["steps"]})  # the experiment's own value
    with pytest.raises(ConfigError, match=r'readings_grid.settings. has value "IIDX".*one of "IID", "NIID"'):
        _config(readings={"completion": ["floor"]}, readings_grid={"settings": ["IIDX"]})


def test_stratified_assignment_spreads_devices_evenly():
    tr = generate_traces(8, 50, 3, seed=0, assignment="stratified")
    counts = sorted(tr.devices_per_trace().values())
    assert counts == [6] * 6 + [7] * 2 and sum(counts) == 50
    random = generate_traces(8, 50, 3, seed=0)
    assert sum(random.devices_per_trace().values()) == 50
    with pytest.raises(ValueError, match="assignment='even'.*allowed: random, stratified"):
        generate_traces(8, 50, 3, seed=0, assignment="even")


def test_p_inactive_sets_the_share_of_inactive_rounds(tmp_path):
    names = ("T_hi", "T_mi", "T_lo")
    lo = generate_traces(3, 300, 200, seed=1, names=names, p_inactive=0.01)
    hi = generate_traces(3, 300, 200, seed=1, names=names, p_inactive=0.06)
    assert (lo.fractions == 0).mean() == pytest.approx(0.01, abs=0.003)
    assert (hi.fractions == 0).mean() == pytest.approx(0.06, abs=0.005)
    tr = make_traces(tmp_path / "t.npz", traceset="T6", num_devices=4, rounds=2, seed=3,
                     assignment="stratified", p_inactive=0.03)
    assert tr.params == {"traceset": "T6", "num_devices": 4, "rounds": 2, "seed": 3,
                         "assignment": "stratified", "p_inactive": 0.03}


def _steps_seen(local_work: str, sizes=(30, 90)) -> list[int]:
    """How many local steps each device does in one complete round (a local trainer that records them)."""
    rng = np.random.default_rng(0)
    xs = [rng.normal(size=(n, 4)).astype(np.float32) for n in sizes]
    ys = [rng.integers(0, 2, n) for n in sizes]
    fed = from_device_lists(xs, ys, xs, ys, num_classes=2)
    seen: list[int] = []

    def record(model, params, x, y, idx, steps, lr, **kw):
        seen.extend(int(s) for s in steps)
        return [p.unsqueeze(0).repeat(len(steps), *([1] * p.dim())) for p in params]

    cfg = TrainSettings("B", local_epochs=2, batch_size=10, eta0=0.1, rounds=1, local_work=local_work)
    train(make_model("logreg", 4, 2), fed, np.ones((1, 2)), cfg, local_trainer=record)
    return seen


def test_local_work_steps_or_epochs_in_the_round():
    assert _steps_seen("steps") == [2, 2]  # E = 2 local updates whatever the device's size
    assert _steps_seen("epochs") == [2 * 3, 2 * 9]  # E = 2 epochs of ceil(n/10) minibatches


def test_trace_file_keeps_a_dotted_key():
    from hetfl.paths import trace_file

    spec = next(r for r in expand_runs(_config(readings={"p_inactive": [0.02]})) if r.reading)
    assert trace_file(spec).name == "n6_r3_seed0_pi0.02.npz"


def test_readings_caption_states_each_readings_participation_and_the_commits(tmp_path):
    """docs/readings.md: every caption states the measured participation and the commits of the runs it read.
    The readings tables stated neither, while completion=floor changes who completes a round (T_30: 6 % of
    rounds against the default's 18 % at make reproduce's scale; an audit)."""
    import json

    import pandas as pd

    from hetfl.reports.ruan import build_readings

    dirs = []
    for spec in expand_runs(_config(readings={"completion": ["floor"]})):
        d = tmp_path / "results" / spec.experiment / spec.run
        d.mkdir(parents=True)
        floor = spec.reading == "completion=floor"
        complete = 6.0 if spec.num_traces == 1 else (1.5 if floor else 2.5)
        record = {"spec": spec.to_dict(), "status": "ok", "git_commit": "abcdef1234567", "git_dirty": False,
                  "code_fingerprint": "f00", "traces": {
                      "mean_complete_devices": complete, "sha256": f"{spec.num_traces}-{spec.seed}",
                      "p_complete": ({"T_0": 1.0} if spec.num_traces == 1
                                     else {"T_0": 1.0, "T_30": 0.06 if floor else 0.18})}}
        (d / "run.json").write_text(json.dumps(record))
        acc = 0.5 + 0.01 * spec.seed + {"A": 0.0, "C": 0.02}[spec.scheme]
        pd.DataFrame({"round": [1, 2, 3], "metric": "test_accuracy", "value": [0.1, 0.2, acc]}).to_parquet(
            d / "metrics.parquet")
        dirs.append(d)
    build_readings("accuracy_difference", dirs, tmp_path / "out" / "accuracy_difference_readings")
    caption = (tmp_path / "out" / "accuracy_difference_readings.md").read_text().split("\n\n")[0]
    assert "Under completion=floor: measured from the trace files used" in caption
    assert "synthetic NIID |T|=1: 6.0, |T|=6: 1.5" in caption and "T_30 0.060" in caption
    assert "Runs read: abcdef1234: 24 run(s)" in caption
