"""The algorithm registry: the schema's enum and the smoke grid follow it, and a package outside hetfl
registers an algorithm through the entry point group "hetfl.algorithms"."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from importlib import metadata
from pathlib import Path

import pytest
import yaml

from hetfl.algorithms import ALGORITHM_NAMES, CATALOG, method_label
from hetfl.algorithms.hparams import BUILTIN, describe
from hetfl.algorithms.registry import ENTRY_POINT_GROUP, AlgorithmEntry, discover
from hetfl.config import ConfigError, expand_runs, load_schema, validate_config

ROOT = Path(__file__).resolve().parents[1]

# A package outside hetfl: a server step size on FedAvg, w ← w + step·Σ_k p_τ^k Δ_k. Its registration
# module imports no torch (as the guide recommends); the class lives in a module of its own. Named
# demohalf, not the guide's fedhalf: a reader who installed the guide's example must not break this test.
PLUGIN_INIT = '''
from dataclasses import dataclass
from hetfl.algorithms.hparams import hyper
from hetfl.algorithms.registry import AlgorithmEntry


@dataclass(frozen=True)
class HalfParams:
    step: float = hyper(0.5, "server step size", exclusive_minimum=0.0)


ENTRY = AlgorithmEntry("demohalf", "demo_plugin.algo:FedHalf", HalfParams, "a test plugin", "FedHalf")
'''
PLUGIN_ALGO = '''
from demo_plugin import HalfParams
from hetfl.algorithms.base import Algorithm, deltas, weighted_sum
from hetfl.engine import comm


class FedHalf(Algorithm):
    name = "demohalf"
    Params = HalfParams

    def aggregate(self, state, params, finals, info):
        step = weighted_sum(deltas(params, finals), info.weights)
        new = [w + self.hp.step * s for w, s in zip(params, step)]
        return new, state, comm.round_metrics(up=deltas(params, finals), down=params,
                                              clients=len(info.clients))
'''


def install_plugin(site: Path, entry_points: str) -> None:
    """A package and its dist-info (what `pip install` leaves behind) in a directory for sys.path."""
    pkg = site / "demo_plugin"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text(PLUGIN_INIT)
    (pkg / "algo.py").write_text(PLUGIN_ALGO)
    info = site / "demo_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: demo-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(textwrap.dedent(entry_points))


def test_schema_enum_and_smoke_grid_are_the_registry():
    assert load_schema()["$defs"]["algorithm_name"]["enum"] == list(CATALOG) == list(ALGORITHM_NAMES)
    raw = yaml.safe_load((ROOT / "workflow/config/paper/algorithms_smoke.yaml").read_text())
    smoke = list(expand_runs(validate_config(raw)))
    # `all` plus the experiments for the algorithms whose step correction fixes their scheme: every one runs
    assert set(CATALOG) == {r.algorithm for r in smoke}
    exp = {"table": "none", "dataset": "quadratic", "model": "quadratic", "settings": {"Q": {}},
           "schemes": ["B"], "num_traces": [1], "seeds": [0], "algorithms": "all", "local_steps": [1, 2]}
    runs = list(expand_runs(validate_config({"experiments": {"q": exp}})))
    # under B: every algorithm but EFL, whose coefficient E·p/s is Scheme C (CATALOG["efl"].schemes)
    assert [r.algorithm for r in runs] == [a for a in CATALOG if a != "efl"]
    runs = list(expand_runs(validate_config({"experiments": {"q": {**exp, "schemes": ["C"]}}})))
    assert "fednova" not in {r.algorithm for r in runs} and "efl" in {r.algorithm for r in runs}
    allowed = ('allowed: "all" (every registered algorithm), or a list of registered algorithm names such as '
               '[fedavg, fedprox] (one algorithm: a list of one, or the key `algorithm`)')
    for value in ("every", "fedprox"):  # a name, not a list, was told only "one of \"all\"" is allowed
        with pytest.raises(ConfigError) as err:
            validate_config({"experiments": {"q": {**exp, "algorithms": value}}})
        assert f"'experiments.q.algorithms' has value \"{value}\", which is not allowed; {allowed}" \
            in str(err.value), str(err.value)


def test_every_builtin_has_a_table_label():
    assert all(e.label for e in BUILTIN.values())
    assert method_label("efl") == "EFL" and method_label("not-registered") == "not-registered"


def test_discover_takes_an_entry_or_a_class_and_reports_what_it_cannot_take(tmp_path, monkeypatch):
    install_plugin(tmp_path, "")
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / "demo_plugin" / "bad.py").write_text("raise ImportError('no such dependency')\n")

    def ep(name, value):
        return metadata.EntryPoint(name=name, value=value, group=ENTRY_POINT_GROUP)

    with pytest.warns(UserWarning) as caught:
        catalog = discover(BUILTIN, [
            ep("demohalf", "demo_plugin:ENTRY"),  # an AlgorithmEntry
            ep("demohalf2", "demo_plugin.algo:FedHalf"),  # a class whose name differs from the entry point's
            ep("fedavg", "demo_plugin:ENTRY"),  # a name hetfl already has
            ep("broken", "demo_plugin.bad:X"),  # fails to import
            ep("number", "demo_plugin:__doc__"),  # neither an entry nor a class
        ])
    assert list(catalog) == [*BUILTIN, "demohalf"]
    assert catalog["demohalf"].target == "demo_plugin.algo:FedHalf"
    assert catalog["demohalf"].display == "FedHalf"
    messages = [str(w.message) for w in caught]
    assert len(messages) == 4
    assert "'demohalf2 = demo_plugin.algo:FedHalf'" in messages[0]
    assert "registers the name 'demohalf'" in messages[0]
    assert "'fedavg' is already registered" in messages[1]
    assert "no such dependency" in messages[2]
    assert "allowed: an AlgorithmEntry or an Algorithm subclass" in messages[3]
    # the class form works when the names agree
    from demo_plugin.algo import FedHalf

    (entry,) = discover({}, [ep("demohalf", "demo_plugin.algo:FedHalf")]).values()
    assert entry == AlgorithmEntry("demohalf", "demo_plugin.algo:FedHalf", FedHalf.Params,
                                   "registered by entry point 'demohalf = demo_plugin.algo:FedHalf'")


def test_a_package_outside_hetfl_registers_an_algorithm(tmp_path):
    """Installed like any package (a dist-info with entry_points.txt on the path), the plugin is listed,
    validated, configured, expanded and trained, with no change to hetfl."""
    site = tmp_path / "site"
    install_plugin(site, """
        [hetfl.algorithms]
        demohalf = demo_plugin:ENTRY
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}

    def run(*args):
        proc = subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert "not registered" not in proc.stderr
        return proc.stdout

    assert "demohalf: a test plugin" in run("-m", "hetfl.cli", "algorithms")
    assert "step = 0.5: server step size" in run("-m", "hetfl.cli", "algorithms", "demohalf")
    config = {"experiments": {"q": {
        "table": "none", "dataset": "quadratic", "model": "quadratic", "settings": {"Q": {}},
        "algorithms": ["fedavg", "demohalf"], "algorithm_params": {"demohalf": {"step": 0.25}},
        "local_steps": [2, 3], "lr_schedule": "constant", "eta0": 0.1, "rounds": 1, "schemes": ["B"],
        "num_traces": [1], "seeds": [0]}}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(config))
    listed = run("-m", "hetfl.cli", "runs", "c.yaml", "--json")
    specs = [json.loads(line) for line in listed.splitlines() if line.startswith("{")]
    assert [(s["algorithm"], s["algorithm_params"]) for s in specs] == [("fedavg", {}),
                                                                        ("demohalf", {"step": 0.25})]
    # one round on the quadratic bed from x0 = 0: client i runs y ← y − 0.1·2a_i(y − b_i), 2 and 3 steps
    script = textwrap.dedent("""
        import numpy as np
        from hetfl.algorithms import make_algorithm
        from hetfl.data.quadratic import build_quadratic
        from hetfl.engine.runner import TrainSettings, train
        from hetfl.models.quadratic import Quadratic
        cfg = TrainSettings("B", 1, 1, 0.1, 1, lr_schedule="constant", local_steps=(2, 3))
        res = train(Quadratic(), build_quadratic((1.0, 2.0), (1.0, 5.0)), np.ones((1, 2)), cfg,
                    algorithm=make_algorithm("demohalf", step=0.25))
        print([v for _, m, v in res.records if m == "x"][0])
    """)
    x = float(run("-c", script).strip())
    y1 = 1 + 0.8 ** 2 * (0 - 1)  # (1 − 2·1·0.1)^2
    y2 = 5 + 0.6 ** 3 * (0 - 5)  # (1 − 2·2·0.1)^3
    assert x == pytest.approx(0.25 * 0.5 * (y1 + y2), rel=1e-5)  # 0.25 · (0.18 + 3.92)/2 = 0.5125


def test_plugin_fields_without_hetfl_metadata_are_described_and_checked(monkeypatch):
    """A plugin's dataclass may use plain fields and its own annotations (no postponed evaluation)."""
    import dataclasses

    import hetfl.algorithms.hparams as hp

    plain = dataclasses.make_dataclass("Plain", [("beta", float, dataclasses.field(default=0.5))],
                                       frozen=True)
    monkeypatch.setattr(hp, "CATALOG", {**CATALOG, "plain": AlgorithmEntry("plain", "x:Y", plain, "p")})
    assert describe("plain") == [("beta", 0.5, " [a value of type float]")]
    assert hp.parse_hyperparameters("plain", {"beta": 2}).beta == 2.0
    with pytest.raises(ValueError, match=r"'algorithm_params.beta' has value \"x\".*type float"):
        hp.parse_hyperparameters("plain", {"beta": "x"})


def test_class_and_registration_must_agree_on_hyperparameters(monkeypatch):
    from hetfl.algorithms import algorithm_class
    from hetfl.algorithms.hparams import FedProxParams

    monkeypatch.setitem(CATALOG, "mismatch", AlgorithmEntry("mismatch", "hetfl.algorithms.fedavg:FedAvg",
                                                            FedProxParams, "p"))
    with pytest.raises(TypeError, match=r"has Params = NoParams but is registered with FedProxParams"):
        algorithm_class("mismatch")


def test_a_mistyped_target_is_refused_when_the_config_is_validated(monkeypatch):
    """An AlgorithmEntry whose "module:Class" does not exist passed validation and failed only when its
    training job imported it; validation now finds it without importing the module."""
    from hetfl.algorithms.hparams import NoParams
    from hetfl.algorithms.registry import target_problem

    assert target_problem("hetfl.algorithms.fedavg:FedAvg") is None
    typo = AlgorithmEntry("typo", "hetfl.algorithms.fedavg:FedAvgg", NoParams, "p")
    monkeypatch.setitem(CATALOG, "typo", typo)
    monkeypatch.setitem(CATALOG, "nomod", AlgorithmEntry("nomod", "demo_missing.algo:Demo", NoParams, "p"))
    exp = {"table": "none", "dataset": "quadratic", "model": "quadratic", "settings": {"Q": {}},
           "local_steps": [2, 3], "rounds": 1, "schemes": ["B"], "num_traces": [1], "seeds": [0]}
    with pytest.raises(ConfigError, match=r"experiments\.q\.algorithms' names algorithm 'typo'.*"
                                          r"fedavg\.py\) defines no top-level FedAvgg"):
        validate_config({"experiments": {"q": {**exp, "algorithms": ["fedavg", "typo"]}}})
    with pytest.raises(ConfigError, match=r"experiments\.q\.algorithm' names algorithm 'nomod'.*"
                                          r"module demo_missing\.algo cannot be found"):
        validate_config({"experiments": {"q": {**exp, "algorithm": "nomod"}}})
    validate_config({"experiments": {"q": {**exp, "algorithm": "fedavg"}}})


@pytest.mark.parametrize("where", ["algo", "ops"])
@pytest.mark.parametrize("mistake", ["missing_dependency", "syntax_error"])
def test_a_plugin_module_that_cannot_import_is_refused_when_the_config_is_validated(tmp_path, monkeypatch,
                                                                                    where, mistake):
    """A plugin class whose module (or the helper module of its package it imports) imports a package not
    installed passed validation and failed in its training job after Snakemake started; one with a syntax
    error raised a SyntaxError traceback out of `hetfl validate` and Snakemake's start (an audit)."""
    from hetfl.algorithms.hparams import NoParams

    name = f"demo_broken_{mistake}_{where}"  # find_spec of the target imported the package: one per case
    pkg = tmp_path / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "ops.py").write_text("import math\n\n\ndef scale(x):\n    return x\n")
    (pkg / "algo.py").write_text("from hetfl.algorithms.base import Algorithm\n\nfrom . import ops\n\n\n"
                                 "class Demo(Algorithm):\n    name = 'demobroken'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(CATALOG, "demobroken", AlgorithmEntry("demobroken", f"{name}.algo:Demo", NoParams,
                                                              "p"))
    exp = {"table": "none", "dataset": "quadratic", "model": "quadratic", "settings": {"Q": {}},
           "local_steps": [2, 3], "rounds": 1, "schemes": ["B"], "num_traces": [1], "seeds": [0],
           "algorithm": "demobroken"}
    from hetfl.algorithms.registry import target_problem

    validate_config({"experiments": {"q": exp}})  # the package as written is fine
    path = pkg / f"{where}.py"
    broken = {"missing_dependency": "import demo_not_installed_dep\n" + path.read_text(),
              "syntax_error": path.read_text() + "\ndef half(:\n"}[mistake]
    path.write_text(broken)
    target_problem.cache_clear()  # cached per target, and it was read above
    expected = {"missing_dependency": f"module {name}.{where} ({path}) imports "
                                      "demo_not_installed_dep, which is not installed where hetfl runs",
                "syntax_error": f"module {name}.{where} ({path}) is not valid Python: "}[mistake]
    with pytest.raises(ConfigError) as err:
        validate_config({"experiments": {"q": exp}})
    assert "config key 'experiments.q.algorithm' names algorithm 'demobroken', whose class cannot be " \
           "imported" in str(err.value)
    assert expected in str(err.value), str(err.value)
    target_problem.cache_clear()


def test_optional_and_tuple_hyperparameters_and_unsupported_types(monkeypatch):
    """A plugin's `float | None` or `tuple[int, ...]` field was checked as a number, so null or a list
    was refused with "allowed: a value of type float | None", which no value could meet; a type a config
    cannot give (a dict) is now refused when the plugin registers."""
    import dataclasses

    import hetfl.algorithms.hparams as hp

    fields = [("cap", "float | None", dataclasses.field(default=None, metadata={"minimum": 0})),
              ("taus", "tuple[int, ...]", dataclasses.field(default=(1, 2), metadata={"minimum": 1})),
              ("mode", "Optional[str]", dataclasses.field(default=None, metadata={"choices": ["a", "b"]}))]
    params = dataclasses.make_dataclass("Params", fields, frozen=True)
    monkeypatch.setattr(hp, "CATALOG", {**CATALOG, "opt": AlgorithmEntry("opt", "x:Y", params, "p")})
    got = hp.parse_hyperparameters("opt", {"cap": None, "taus": [3, 4.0], "mode": "b"})
    assert (got.cap, got.taus, got.mode) == (None, (3, 4), "b")
    assert hp.parse_hyperparameters("opt", {"cap": 2}).cap == 2.0
    with pytest.raises(ValueError, match=r"taus' has value \[1, 0\].*list of int, each >= 1"):
        hp.parse_hyperparameters("opt", {"taus": [1, 0]})
    with pytest.raises(ValueError, match=r"'algorithm_params\.cap' has value -1.*float or null, >= 0"):
        hp.parse_hyperparameters("opt", {"cap": -1})
    with pytest.raises(ValueError, match=r"'algorithm_params\.mode' has value \"c\".*\"a\", \"b\", or null"):
        hp.parse_hyperparameters("opt", {"mode": "c"})
    assert [d for _, _, d in describe("opt")] == [" [a value of type float or null, >= 0]",
                                                  " [a list of int, each >= 1]",
                                                  ' [one of "a", "b", or null]']

    from hetfl.algorithms.registry import entry_from

    nested = dataclasses.make_dataclass("Nested", [("w", "dict[str, float]")])
    with pytest.raises(ValueError, match=r"hyperparameter 'w' has type 'dict\[str, float\]'.*allowed: bool"):
        entry_from(AlgorithmEntry("bad", "x:Y", nested, "p"), "bad", "test")


def test_a_plugin_that_is_not_registered_is_refused_by_name_when_a_config_names_it(tmp_path):
    """A plugin registering a name hetfl already has (its own FedAvgM) was left out with a warning, and a
    config naming it validated and trained hetfl's FedAvgM with the plugin's hyperparameters wherever their
    names agreed (an audit adding its own algorithm); one whose entry point did not import was refused as
    an unknown name, the reason only in a warning above. Validation now refuses both, naming the entry
    point, its package and the reason."""
    site = tmp_path / "site"
    install_plugin(site, """
        [hetfl.algorithms]
        fedavgm = demo_plugin:ENTRY
        demotypo = demo_plugin.registraton:ENTRY
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    exp = {"table": "none", "dataset": "quadratic", "model": "quadratic", "settings": {"Q": {}},
           "local_steps": [2, 3], "lr_schedule": "constant", "eta0": 0.1, "rounds": 1, "schemes": ["B"],
           "num_traces": [1], "seeds": [0]}
    cases = {
        "clash": ({**exp, "algorithm": "fedavgm", "algorithm_params": {"fedavgm": {"server_lr": 0.5}}},
                  r"experiments\.q\.algorithm' names algorithm 'fedavgm', which entry point 'fedavgm = "
                  r"demo_plugin:ENTRY' of package demo-plugin also registers.*already registered.*hetfl's "
                  r"own fedavgm would run in its place; allowed: "),
        "typo": ({**exp, "algorithms": ["fedavg", "demotypo"]},
                 r"experiments\.q\.algorithms\.1' has value \"demotypo\", which is not allowed; allowed: one "
                 r"of .*; the plugin that would register \"demotypo\" is left out: entry point 'demotypo = "
                 r"demo_plugin\.registraton:ENTRY' of package demo-plugin is not registered: No module named "
                 r"'demo_plugin\.registraton'"),
    }
    for case, (config, message) in cases.items():
        (tmp_path / f"{case}.yaml").write_text(yaml.safe_dump({"experiments": {"q": config}}))
        proc = subprocess.run([sys.executable, "-m", "hetfl.cli", "validate", f"{case}.yaml"],
                              capture_output=True, text=True, env=env, cwd=tmp_path)
        assert proc.returncode != 0, (case, proc.stdout)
        import re

        assert re.search(message, proc.stderr, re.S), (case, proc.stderr)
    # hetfl's own FedAvgM still runs where no plugin claims its name
    validate_config({"experiments": {"q": {**exp, "algorithm": "fedavgm"}}})


def test_discover_records_why_each_refused_entry_point_is_left_out():
    refused: dict[str, tuple[str, str]] = {}

    def ep(name, value):
        return metadata.EntryPoint(name=name, value=value, group=ENTRY_POINT_GROUP)

    with pytest.warns(UserWarning):
        discover(BUILTIN, [ep("fedavg", "hetfl.algorithms.registry:AlgorithmEntry"),
                           ep("nomodule", "demo_missing_module:ENTRY")], refused=refused)
    assert set(refused) == {"fedavg", "nomodule"}
    assert refused["fedavg"][0] == "entry point 'fedavg = hetfl.algorithms.registry:AlgorithmEntry'"
    assert "'fedavg' is already registered" in refused["fedavg"][1]
    assert refused["nomodule"] == ("entry point 'nomodule = demo_missing_module:ENTRY'",
                                   "No module named 'demo_missing_module'")


# A plugin's class as a newcomer writes it wrong (an audit): each passed validation, then failed in its
# training job (a TypeError deep in round 1, "Mis() takes no arguments") or, the hook's name misspelt,
# trained as FedAvg without a word.
CLASS_MISTAKES = {
    "nobase": ("class Mis:\n    def aggregate(self, state, params, finals, info):\n        pass\n",
               "class Mis has no base class; allowed: a subclass of hetfl.algorithms.base.Algorithm"),
    "signature": ("from hetfl.algorithms.base import Algorithm\n\nclass Mis(Algorithm):\n"
                  "    def aggregate(self, params, finals, info):\n        pass\n",
                  "Mis.aggregate(self, params, finals, info) takes 4 positional parameters; allowed: "
                  "aggregate(self, state, params, finals, info), the hook the engine calls"),
    "misspelt": ("from hetfl.algorithms.base import Algorithm\n\nclass Mis(Algorithm):\n"
                 "    def agregate(self, state, params, finals, info):\n        pass\n",
                 "Mis defines agregate, which is no hook of Algorithm: the engine never calls it and the "
                 "algorithm runs its base class's aggregate; allowed: a hook's name (aggregate?), or a "
                 "helper named apart from the hooks (_agregate)"),
    # make_algorithm names each instance as registered: a read-only `name` failed the training job only
    "nameprop": ("from hetfl.algorithms.base import Algorithm\n\nclass Mis(Algorithm):\n    @property\n"
                 "    def name(self):\n        return 'mis'\n",
                 "Mis defines name as a method or property; allowed: a plain class attribute "
                 "(name = \"...\"), or none: each instance is named as the algorithm is registered"),
}


def _mistake_module(tmp_path, monkeypatch, case):
    module = f"demo_mistake_{case}"
    (tmp_path / f"{module}.py").write_text(CLASS_MISTAKES[case][0])
    monkeypatch.syspath_prepend(str(tmp_path))
    return f"{module}:Mis"


@pytest.mark.parametrize("case", sorted(CLASS_MISTAKES))
def test_a_plugin_class_that_does_not_fit_the_engine_is_refused_before_any_job(tmp_path, monkeypatch, case):
    from hetfl.algorithms.hparams import NoParams
    from hetfl.algorithms.registry import class_problem

    target = _mistake_module(tmp_path, monkeypatch, case)
    assert CLASS_MISTAKES[case][1] in class_problem(target)
    monkeypatch.setitem(CATALOG, "mis", AlgorithmEntry("mis", target, NoParams, "p"))
    exp = {"table": "none", "dataset": "quadratic", "model": "quadratic", "settings": {"Q": {}},
           "local_steps": [2, 3], "rounds": 1, "schemes": ["B"], "num_traces": [1], "seeds": [0]}
    with pytest.raises(ConfigError) as err:
        validate_config({"experiments": {"q": {**exp, "algorithm": "mis"}}})
    assert f"'experiments.q.algorithm' names algorithm 'mis', whose class {target} does not fit the engine" \
        in str(err.value)
    assert CLASS_MISTAKES[case][1] in str(err.value)


PARAMS_MISTAKES = {
    "none": ("", "class Demo sets no Params (so it takes Algorithm's NoParams) but is registered with "
                 "DemoParams; allowed: `Params = DemoParams` on the class, the dataclass it is registered "
                 "with"),
    "other": ("    Params = dict\n", "class Demo has Params = dict but is registered with DemoParams; "
                                      "allowed: `Params = DemoParams` on the class"),
    "alias": ("    Params = DP\n", None),  # the registered dataclass under another name: fine
    "same": ("    Params = DemoParams\n", None),
}


@pytest.mark.parametrize("case", sorted(PARAMS_MISTAKES))
def test_a_plugin_class_without_its_registered_params_is_refused_before_any_job(tmp_path, monkeypatch, case):
    """A plugin class that forgot `Params = ...` (or set another one) passed validation, and its training
    job refused it after Snakemake had started ("has Params = NoParams but is registered with ...")."""
    import dataclasses

    body, message = PARAMS_MISTAKES[case]
    module = f"demo_params_{case}"
    (tmp_path / f"{module}.py").write_text(
        "from dataclasses import dataclass\n\nfrom hetfl.algorithms.base import Algorithm\n\n\n"
        "@dataclass(frozen=True)\nclass DemoParams:\n    pass\n\n\nDP = DemoParams\n\n\n"
        f"class Demo(Algorithm):\n    name = 'demoparams'\n{body}")
    monkeypatch.syspath_prepend(str(tmp_path))
    params = dataclasses.make_dataclass("DemoParams", [], frozen=True)
    monkeypatch.setitem(CATALOG, "demoparams", AlgorithmEntry("demoparams", f"{module}:Demo", params, "p"))
    exp = {"table": "none", "dataset": "quadratic", "model": "quadratic", "settings": {"Q": {}},
           "local_steps": [2, 3], "rounds": 1, "schemes": ["B"], "num_traces": [1], "seeds": [0],
           "algorithm": "demoparams"}
    if message is None:
        validate_config({"experiments": {"q": exp}})
        return
    with pytest.raises(ConfigError) as err:
        validate_config({"experiments": {"q": exp}})
    assert f"'experiments.q.algorithm' names algorithm 'demoparams', whose class {module}:Demo does not " \
           "fit the engine: " in str(err.value)
    assert message in str(err.value), str(err.value)


def test_a_plugin_subclass_runs_under_its_registered_name_not_its_bases(tmp_path, monkeypatch):
    """The engine checks a run's scheme under the algorithm's `name`, which a subclass inherits from its
    base unless it sets its own. A FedNova subclass registered as an AlgorithmEntry under a name of its own
    and allowing Scheme C passed validation, then its training job refused C as FedNova
    ("not allowed with algorithm fednova"). make_algorithm names the instance as registered."""
    import numpy as np

    from hetfl.algorithms import make_algorithm
    from hetfl.algorithms.fednova import FedNova
    from hetfl.data.quadratic import build_quadratic
    from hetfl.engine.runner import TrainSettings, train
    from hetfl.models.quadratic import Quadratic

    (tmp_path / "demo_nova.py").write_text("from hetfl.algorithms.fednova import FedNova\n\n\n"
                                           "class NovaPlus(FedNova):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(CATALOG, "novaplus", AlgorithmEntry("novaplus", "demo_nova:NovaPlus", FedNova.Params,
                                                            "a test plugin"))
    exp = {"table": "none", "dataset": "quadratic", "model": "quadratic", "settings": {"Q": {}},
           "local_steps": [2, 3], "rounds": 1, "schemes": ["C"], "num_traces": [1], "seeds": [0],
           "algorithm": "novaplus"}
    validate_config({"experiments": {"q": exp}})  # the entry allows C
    algorithm = make_algorithm("novaplus")
    cfg = TrainSettings("C", 1, 1, 0.1, 1, lr_schedule="constant", local_steps=(2, 3))
    data = build_quadratic((1.0, 2.0), (1.0, 5.0))
    assert train(Quadratic(), data, np.ones((1, 2)), cfg, algorithm=algorithm).status == "ok"
    assert algorithm.name == "novaplus" and type(algorithm).name == "fednova"


def test_every_builtin_class_fits_the_engine():
    from hetfl.algorithms import algorithm_class
    from hetfl.algorithms.registry import class_problem

    for name, entry in BUILTIN.items():
        assert class_problem(entry.target) is None, name
        algorithm_class(name)  # the check at import: nothing refused


@pytest.mark.parametrize("case", sorted(CLASS_MISTAKES))
def test_the_training_job_refuses_the_same_class_where_the_source_cannot_tell(tmp_path, monkeypatch, case):
    """Validation reads the class's own source; a hook inherited from a base of the plugin's (or a class
    made at run time) is checked when the training job imports the class, before any run trains."""
    from hetfl.algorithms import algorithm_class
    from hetfl.algorithms.hparams import NoParams

    source, message = CLASS_MISTAKES[case]
    module = f"demo_mistake_inherited_{case}"
    (tmp_path / f"{module}.py").write_text(source.replace("class Mis", "class Base") + "\n\n"
                                           "class Mis(Base):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(CATALOG, "mis", AlgorithmEntry("mis", f"{module}:Mis", NoParams, "p"))
    with pytest.raises(TypeError) as err:
        algorithm_class("mis")
    expected = {"nobase": "is not a subclass of hetfl.algorithms.base.Algorithm; allowed: a subclass",
                "signature": message.replace("Mis.", "Base."),
                "misspelt": message.replace("Mis defines", "Base defines"),
                "nameprop": message.replace("Mis defines", "Base defines")}[case]
    assert f"algorithm 'mis' ({module}:Mis): " in str(err.value), str(err.value)
    assert expected in str(err.value), str(err.value)


def test_a_plugins_runs_record_its_package_and_version(tmp_path, monkeypatch):
    """run.json and the MLflow mirror recorded hetfl's commit, a clean git_dirty and hetfl's version, and
    nothing of the plugin package whose code trained the run (an audit): the plugin's package, version,
    entry point and class are recorded now, for plugins only (hetfl's own runs are unchanged)."""
    import hetfl.algorithms.hparams as hp
    from hetfl.data.build import make_split
    from hetfl.data.traces import make_traces
    from hetfl.pipeline import run_training
    from hetfl.tracking import read_run

    site = tmp_path / "site"
    install_plugin(site, """
        [hetfl.algorithms]
        demohalf = demo_plugin:ENTRY
    """)
    monkeypatch.syspath_prepend(str(site))
    plugins: dict[str, dict[str, str | None]] = {}
    (ep,) = [e for d in metadata.distributions(path=[str(site)]) for e in d.entry_points]
    catalog = discover(BUILTIN, [ep], sources=plugins)
    assert plugins == {"demohalf": {"entry_point": "demohalf = demo_plugin:ENTRY", "package": "demo-plugin",
                                    "version": "0.1", "target": "demo_plugin.algo:FedHalf"}}
    monkeypatch.setitem(CATALOG, "demohalf", catalog["demohalf"])  # as if installed in this process
    monkeypatch.setitem(hp.PLUGINS, "demohalf", plugins["demohalf"])
    exp = {"table": "none", "dataset": "quadratic", "model": "quadratic", "settings": {"Q": {}},
           "algorithms": ["fedavg", "demohalf"], "local_steps": [2, 3], "lr_schedule": "constant",
           "eta0": 0.1, "rounds": 1, "schemes": ["B"], "num_traces": [1], "seeds": [0]}
    specs = list(expand_runs(validate_config({"experiments": {"q": exp}})))
    make_split(tmp_path / "split.npz", specs[0].split_spec(), seed=0)
    make_traces(tmp_path / "t.npz", traceset="T1", num_devices=2, rounds=1, seed=0)
    infos = {}
    for spec in specs:
        run_training(spec, tmp_path / "split.npz", tmp_path / "t.npz", tmp_path / spec.run, progress=False)
        infos[spec.algorithm] = json.loads((tmp_path / spec.run / "run.json").read_text())
    assert "algorithm_source" not in infos["fedavg"]
    assert infos["demohalf"]["algorithm_source"] == plugins["demohalf"]
    tags = read_run(tmp_path / specs[1].run).tags
    assert tags["hetfl.algorithm_package"] == "demo-plugin==0.1"
    assert tags["hetfl.algorithm_target"] == "demo_plugin.algo:FedHalf"
    assert "hetfl.algorithm_package" not in read_run(tmp_path / specs[0].run).tags


def test_a_plugin_whose_defaults_its_own_ranges_refuse_is_not_registered(tmp_path):
    """A default outside its own hyper() range (step = -1 where > 0 is allowed) or of another type was
    never checked: a config that left the key out validated and trained with it. Such a plugin is now
    left out, naming the field, the default and what is allowed; so is a field without a default (a
    config may leave any key out)."""
    site = tmp_path / "site"
    install_plugin(site, """
        [hetfl.algorithms]
        demohalf = demo_plugin:ENTRY
    """)
    init = site / "demo_plugin" / "__init__.py"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    exp = {"table": "none", "dataset": "quadratic", "model": "quadratic", "settings": {"Q": {}},
           "algorithm": "demohalf", "local_steps": [2, 3], "lr_schedule": "constant", "eta0": 0.1,
           "rounds": 1, "schemes": ["B"], "num_traces": [1], "seeds": [0]}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"experiments": {"q": exp}}))
    for default, message in (("-1.0", "hyperparameter 'step' has default -1.0, which is not allowed; "
                                      "allowed: a value of type float, > 0.0"),
                             ('"0.5"', "hyperparameter 'step' has default \"0.5\", which is not allowed; "
                                       "allowed: a value of type float, > 0.0")):
        init.write_text(PLUGIN_INIT.replace("hyper(0.5,", f"hyper({default},"))
        proc = subprocess.run([sys.executable, "-m", "hetfl.cli", "validate", "c.yaml"], capture_output=True,
                              text=True, env=env, cwd=tmp_path)
        assert proc.returncode != 0 and message in proc.stderr, proc.stderr
        assert "the plugin that would register \"demohalf\" is left out" in proc.stderr


def test_every_builtin_default_is_allowed_by_its_own_range():
    import dataclasses

    from hetfl.algorithms.hparams import check_defaults

    for entry in BUILTIN.values():
        check_defaults(entry)
    nodefault = dataclasses.make_dataclass("P", [("beta", float)], frozen=True)
    with pytest.raises(ValueError, match=r"hyperparameter 'beta' has no default; allowed: a default"):
        check_defaults(AlgorithmEntry("x", "x:Y", nodefault, "p"))
