"""scripts/install-deps: pip's configuration handed to uv; the installer choice checked before any work."""

import importlib.machinery
import importlib.util
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "install-deps"


@pytest.fixture()
def install_deps():
    loader = importlib.machinery.SourceFileLoader("install_deps", str(SCRIPT))
    spec = importlib.util.spec_from_loader("install_deps", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def _pip_config_list(monkeypatch, module, text):
    def run(cmd, **kwargs):
        assert cmd[-2:] == ["config", "list"], cmd  # nothing but the config may be read here
        return subprocess.CompletedProcess(cmd, 0, stdout=text, stderr="")

    monkeypatch.setattr(module.subprocess, "run", run)


def test_pip_indexes_find_links_and_constraints_become_uv_variables(install_deps, monkeypatch):
    _pip_config_list(monkeypatch, install_deps, "\n".join([
        ":env:.find-links='/opt/wheels'",
        "global.cert='/etc/ssl/certs/ca.crt'",
        "global.constraint='/etc/xdg/pip/constraints.txt'",
        "global.extra-index-url='file:///opt/a/simple file:///opt/b/simple'",
        "global.find-links='/elsewhere'",  # the PIP_FIND_LINKS variable above overrides pip's file
        "global.timeout='60'",  # no uv counterpart: not passed
    ]))
    for name in ("UV_INDEX_URL", "UV_EXTRA_INDEX_URL", "UV_FIND_LINKS", "UV_CONSTRAINT", "SSL_CERT_FILE"):
        monkeypatch.delenv(name, raising=False)
    env = install_deps.uv_env()
    assert env["UV_EXTRA_INDEX_URL"] == "file:///opt/a/simple file:///opt/b/simple"
    assert env["UV_FIND_LINKS"] == "/opt/wheels"
    assert env["UV_CONSTRAINT"] == "/etc/xdg/pip/constraints.txt"
    assert env["SSL_CERT_FILE"] == "/etc/ssl/certs/ca.crt"
    assert "UV_INDEX_URL" not in env


def test_a_uv_variable_the_user_set_wins_over_pip_config(install_deps, monkeypatch):
    _pip_config_list(monkeypatch, install_deps, "global.index-url='https://mirror.example/simple'\n")
    monkeypatch.setenv("UV_INDEX_URL", "https://mine.example/simple")
    assert install_deps.uv_env()["UV_INDEX_URL"] == "https://mine.example/simple"


def test_an_unknown_installer_is_refused_before_anything_is_installed(install_deps, monkeypatch, capsys):
    def run(cmd, **kwargs):
        raise AssertionError(f"ran {cmd}")

    monkeypatch.setattr(install_deps.subprocess, "run", run)
    monkeypatch.setenv("HETFL_INSTALLER", "conda")
    assert install_deps.main(["requirements.lock"]) == 2
    err = capsys.readouterr().err
    assert "HETFL_INSTALLER" in err and "'conda'" in err and "uv" in err and "pip" in err


def _install(install_deps, monkeypatch, uv_fails: bool, child_envs: list | None = None) -> list[list[str]]:
    """main() with every command recorded instead of run (an empty pip config); the commands, in order.
    child_envs: where compile_imports' children's environments are put."""
    calls = []

    def run(cmd, **kwargs):
        calls.append(cmd)
        if uv_fails and "uv" in cmd[2:4]:  # `python -m uv pip install ...`: uv cannot resolve here
            raise subprocess.CalledProcessError(1, cmd)
        if cmd[-2:] == ["config", "list"]:
            return subprocess.CompletedProcess(cmd, 0, stdout="", stderr="")
        return subprocess.CompletedProcess(cmd, 0)

    class Popen:  # compile_imports' children
        def __init__(self, cmd, **kwargs):
            calls.append(cmd)
            if child_envs is not None:
                child_envs.append(kwargs["env"])

        def wait(self):
            return 0

    monkeypatch.setattr(install_deps.subprocess, "run", run)
    monkeypatch.setattr(install_deps.subprocess, "Popen", Popen)
    monkeypatch.delenv("HETFL_INSTALLER", raising=False)
    assert install_deps.main(["requirements.lock"]) == 0
    return calls


def test_pip_is_used_when_uv_fails(install_deps, monkeypatch):
    calls = _install(install_deps, monkeypatch, uv_fails=True)
    pip_installs = [c for c in calls if c[1:4] == ["-m", "pip", "install"]]
    assert pip_installs[-2][4:6] == ["-r", "requirements.lock"]
    assert pip_installs[-1][4:7] == ["--no-deps", "-e", "."]
    assert not [c for c in calls if c[1] == "-c"]  # pip compiled all it installed: nothing to import
    assert calls[-1][1:4] == ["-m", "compileall", "-q"] and calls[-1][4] == str(SCRIPT.parents[1] / "src")


def test_uv_installs_then_what_the_jobs_import_is_compiled_and_hetfl_too(install_deps, monkeypatch):
    """uv installs without compiling (46 of its 51 s went to 15,900 modules, 3,500 of them ever imported);
    then IMPORTS are imported in two processes that may write bytecode, and hetfl's sources compiled.
    Without bytecode, a machine with PYTHONDONTWRITEBYTECODE=1 compiles torch, mlflow, pandas and
    matplotlib from source in every process (import torch 5.3 s instead of 2.2)."""
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    child_envs = []
    calls = _install(install_deps, monkeypatch, uv_fails=False, child_envs=child_envs)
    uv_installs = [c for c in calls if c[1:5] == ["-m", "uv", "pip", "install"]]
    assert len(uv_installs) == 2 and not any("--compile-bytecode" in c for c in uv_installs)
    assert not [c for c in calls if c[1:4] == ["-m", "pip", "install"] and "-r" in c]  # no pip fallback
    imports = [c for c in calls if c[1] == "-c"]
    assert [c[3:] for c in imports] == [list(g) for g in install_deps.IMPORTS]
    assert calls.index(imports[0]) > calls.index(uv_installs[-1])  # after hetfl is installed
    # the children may write bytecode
    assert len(child_envs) == 2 and not any("PYTHONDONTWRITEBYTECODE" in env for env in child_envs)
    assert calls[-1][1:4] == ["-m", "compileall", "-q"] and calls[-1][4] == str(SCRIPT.parents[1] / "src")


def test_the_environment_carries_bytecode_of_the_heavy_imports(install_deps):
    """What make setup leaves: every job imports these, and each would otherwise be compiled again per
    process wherever bytecode may not be written (docs/engine.md)."""
    import importlib.util

    for name in ("torch", "mlflow", "pandas", "matplotlib", "hetfl",
                 *(name for group in install_deps.IMPORTS for name in group)):
        origin = importlib.util.find_spec(name).origin
        assert Path(importlib.util.cache_from_source(origin)).is_file(), (
            f"{name}: no bytecode for {origin}; a .venv made before install-deps compiled it: "
            "`rm -rf .venv && make setup`")


def test_a_training_jobs_memory_check_imports_no_module_without_bytecode():
    """RunLoop.state_bytes runs SCAFFOLD's init_state on the meta device, whose zeros_like imports torch's
    symbolic shapes and sympy. IMPORTS left them out, so every such training job compiled about 470
    modules in memory (2.6 s of an EFL job of 5 s): every installed module it imports has bytecode now."""
    import os
    import sys
    import sysconfig

    code = """
import importlib.util, os, sys, sysconfig, torch
from types import SimpleNamespace
from hetfl.algorithms import make_algorithm
from hetfl.engine.runner import RunLoop
from hetfl.models import make_model
params = [t.unsqueeze(0) for t in make_model("logreg", 60, 10).init_params(torch.Generator())]
loop = SimpleNamespace(params=params, algorithm=make_algorithm("scaffold"),
                       data=SimpleNamespace(fed=SimpleNamespace(num_devices=6)))
assert RunLoop.state_bytes(loop) > 0 and "sympy" in sys.modules
site = sysconfig.get_paths()["purelib"]
for name, module in sorted(sys.modules.items()):
    origin = getattr(getattr(module, "__spec__", None), "origin", None) or ""
    if origin.startswith(site) and origin.endswith(".py"):
        if not os.path.isfile(importlib.util.cache_from_source(origin)):
            print(name)
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    missing = proc.stdout.split()
    assert not missing, (f"{len(missing)} modules without bytecode in {sysconfig.get_paths()['purelib']}, "
                         f"e.g. {missing[:5]}: `make setup` compiles them (scripts/install-deps, IMPORTS)")
