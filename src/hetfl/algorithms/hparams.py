"""Hyperparameters of every algorithm: one dataclass each, plus the catalog (name → paper, class, label).

This module imports no torch, so that validating a config (Snakemake, `hetfl validate`) and listing the
algorithms (`hetfl algorithms`) stay fast. Each field carries its description and allowed range in its
metadata; `parse_hyperparameters` checks a config's `algorithm_params` against them and names the key,
the value and what is allowed when something is wrong.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from typing import Any

from hetfl.algorithms.hptypes import HyperType, hyper_type
from hetfl.algorithms.registry import AlgorithmEntry, discover


def hyper(default: Any, doc: str, *, minimum: float | None = None, exclusive_minimum: float | None = None,
          maximum: float | None = None, exclusive_maximum: float | None = None,
          choices: tuple[Any, ...] | None = None) -> Any:
    """A dataclass field with its description and allowed values (checked by parse_hyperparameters)."""
    meta = {"doc": doc, "minimum": minimum, "exclusive_minimum": exclusive_minimum, "maximum": maximum,
            "exclusive_maximum": exclusive_maximum, "choices": choices}
    return field(default=default, metadata=meta)


@dataclass(frozen=True)
class NoParams:
    """The algorithm has no hyperparameters of its own."""


@dataclass(frozen=True)
class FedProxParams:
    mu: float = hyper(0.01, "proximal weight μ of μ/2‖w − w_g‖²", minimum=0.0)
    prox_step: str = hyper(
        "gradient", "gradient: the prox term's gradient μ(w − w_g) joins each SGD step (FedProx's code); "
        "proximal: the term is taken implicitly, (g + μ(w − w_g))/(1 + ημ), stable for any μ",
        choices=("gradient", "proximal"))


@dataclass(frozen=True)
class ScaffoldParams:
    global_lr: float = hyper(1.0, "server step size η_g of x ← x + η_g·Σ p_τ^k Δy_k", exclusive_minimum=0.0)


@dataclass(frozen=True)
class FedNovaParams:
    mu: float = hyper(0.0, "proximal weight μ of the local objective (FedNova's prox variant)", minimum=0.0)
    momentum: float = hyper(0.0, "local SGD momentum ρ (buffers reset every round)", minimum=0.0,
                            exclusive_maximum=1.0)
    tau_eff: str = hyper(
        "paper", "paper: τ_eff = Σ p_i a_i; official_code: Σ p_i τ_i when μ ≠ 0 (FedNova's released code)",
        choices=("paper", "official_code"))


@dataclass(frozen=True)
class FedDynParams:
    alpha: float = hyper(0.01, "dynamic-regulariser weight α", exclusive_minimum=0.0)


@dataclass(frozen=True)
class FedCurvParams:
    lam: float = hyper(0.01, "penalty weight λ of λ·Σ_{j≠k} (w − w_j)ᵀ diag(F_j) (w − w_j)", minimum=0.0)
    fisher_samples: int = hyper(0, "local samples per client for the Fisher diagonal (0 = all)", minimum=0)


@dataclass(frozen=True)
class FedForParams:
    alpha: float = hyper(5.0, "first-order regulariser weight α (the penalty is α/η·U(...), Eq. 7)",
                         minimum=0.0)


@dataclass(frozen=True)
class EflParams:
    lam: float = hyper(0.01, "elastic-term weight λ of λ/2·Σ_i (w − w_i)ᵀ diag(I_i) (w − w_i)", minimum=0.0)
    q: float = hyper(0.01, "ST sparsity: each tensor keeps its max(⌊nq⌋, 1) largest-magnitude entries",
                     exclusive_minimum=0.0, maximum=1.0)
    compress: bool = hyper(True, "apply ST compression with error feedback up- and downstream")
    fisher_samples: int = hyper(0, "local samples per client for the Fisher diagonal (0 = all)", minimum=0)
    broadcast: str = hyper(
        "participants", "participants: a device receives ST(Δ_G) only in the rounds it takes part in "
        "(Algorithm 1), so one back from inactivity trains from a stale model; all: every device receives "
        "every broadcast", choices=("participants", "all"))


@dataclass(frozen=True)
class ElasticNetParams:
    """FedElasticNet on FedAvg/FedProx (Algorithm 1): λ2 = 0 is FedAvg + ℓ1."""

    lambda1: float = hyper(1e-6, "ℓ1 weight λ1 on ‖w − w_g‖₁ (sign subgradient)", minimum=0.0)
    lambda2: float = hyper(0.01, "ℓ2 weight λ2 on ½‖w − w_g‖² (FedProx's μ)", minimum=0.0)
    epsilon: float = hyper(1e-4, "entries of the sent update with |Δ| ≤ ε are zeroed", minimum=0.0)


@dataclass(frozen=True)
class ScaffoldElasticNetParams:
    """FedElasticNet on SCAFFOLD (Algorithm 2): the control variates fight drift, so λ2 may be 0."""

    global_lr: float = hyper(1.0, "server step size η_g", exclusive_minimum=0.0)
    lambda1: float = hyper(1e-4, "ℓ1 weight λ1 on ‖w − w_g‖₁ (sign subgradient)", minimum=0.0)
    lambda2: float = hyper(0.0, "ℓ2 weight λ2 on ½‖w − w_g‖²", minimum=0.0)
    epsilon: float = hyper(1e-4, "entries of the sent update with |Δ| ≤ ε are zeroed", minimum=0.0)


@dataclass(frozen=True)
class FedDynElasticNetParams:
    """FedElasticNet on FedDyn (Algorithm 3): λ2 plays FedDyn's α."""

    lambda1: float = hyper(1e-4, "ℓ1 weight λ1 on ‖w − w_g‖₁ (sign subgradient)", minimum=0.0)
    lambda2: float = hyper(0.01, "FedDyn's α: weight of ½‖w − w_g‖² and of the server state h",
                           exclusive_minimum=0.0)
    epsilon: float = hyper(1e-4, "entries of the sent update with |Δ| ≤ ε are zeroed", minimum=0.0)


@dataclass(frozen=True)
class FedAvgMParams:
    beta: float = hyper(0.9, "server momentum β of m ← βm + Σ p_τ^k Δ_k (0 = FedAvg)", minimum=0.0,
                        exclusive_maximum=1.0)
    server_lr: float = hyper(1.0, "server step size η_s of w ← w + η_s m", exclusive_minimum=0.0)


@dataclass(frozen=True)
class CompressionParams:
    """FedAvg + top-k or ST compression with error feedback (FedElasticNet's reviewers' baseline)."""

    bits_per_entry: float = hyper(1.0, "bit budget per entry of each sent tensor (plus one float32); "
                                  "1 matches scaled sign's cost", exclusive_minimum=0.0, maximum=32.0)


@dataclass(frozen=True)
class ApflParams:
    alpha0: float = hyper(0.5, "initial mixing weight α_k of v̄_k = α_k v_k + (1 − α_k) w_k (FedTorch's "
                               "default)", minimum=0.0, maximum=1.0)
    adaptive: bool = hyper(True, "update α_k by its gradient ⟨v_k − w_k, ∇f_k(v̄_k)⟩ every local step "
                                 "(false: α_k stays alpha0)")
    alpha_lr_scale: float = hyper(1.0, "α's step size as a multiple of the round's learning rate η (the "
                                       "paper uses η)", minimum=0.0)


@dataclass(frozen=True)
class FedAmpParams:
    """Defaults: PFLlib's FedAMP scripts (alk 5e-3, sg 0.1, lam 5e-7); the paper's values are not stated in
    what hetfl could read."""

    alpha_k: float = hyper(5e-3, "attention step α_k of ξ_ij = α_k A'(‖w_i − w_j‖²) and of the prox weight "
                                 "λ/α_k", exclusive_minimum=0.0)
    sigma: float = hyper(0.1, "scale σ of the attention function A(x) = 1 − exp(−x/σ)", exclusive_minimum=0.0)
    lam: float = hyper(5e-7, "λ of the local objective F_i(w) + λ/(2α_k)‖w − u_i‖²", minimum=0.0)
    start: str = hyper("cloud", "local training starts from the cloud model u_i (cloud) or from the device's "
                       "own model w_i (own, PFLlib's client)", choices=("cloud", "own"))


PERIOD_DOC = ("τ_k of the correction update: the steps the device did (done) or a complete round's (full); "
              "the paper has every device do the same τ")


@dataclass(frozen=True)
class VrlSgdParams:
    period: str = hyper("done", PERIOD_DOC, choices=("done", "full"))


@dataclass(frozen=True)
class FedGateParams:
    server_lr: float = hyper(1.0, "server step size γ of w ← w − ηγΔ", exclusive_minimum=0.0)
    quantizer: str = hyper("qsgd", "upload quantiser Q: qsgd (unbiased, Alistarh et al. 2017) or none "
                           "(FedGATE without compression)", choices=("qsgd", "none"))
    levels: int = hyper(127, "QSGD levels s: 1 + ⌈log2(s + 1)⌉ bits per entry (127: 8 bits)", minimum=1)
    bucket: int = hyper(512, "QSGD bucket size: one norm per this many entries", minimum=1)
    period: str = hyper("done", PERIOD_DOC, choices=("done", "full"))


#: AlgorithmEntry.events_why of the algorithms whose server state is a running sum over the devices
_RUNNING_SUM = ("its server state is a running sum over the devices (SCAFFOLD's c = Σ p^k c_k, FedDyn's h, "
                "the tracked corrections, the Fisher or attention sums), updated by increments: an event "
                "that renormalises p^k leaves it off Σ p^k (·)_k for the rest of the run, and a departed "
                "device keeps steering the model (an audit; the papers do not say how to re-anchor it)")

BUILTIN: dict[str, AlgorithmEntry] = {e.name: e for e in (
    AlgorithmEntry("fedavg", "hetfl.algorithms.fedavg:FedAvg", NoParams,
                   "McMahan et al. 2017 (FedAvg); Ruan et al. 2021, seed 002 (Schemes A/B/C)", "FedAvg"),
    AlgorithmEntry("fedprox", "hetfl.algorithms.fedprox:FedProx", FedProxParams,
                   "Li et al. 2020 (FedProx), compared in seeds 000, 003, 004", "FedProx"),
    AlgorithmEntry("scaffold", "hetfl.algorithms.scaffold:Scaffold", ScaffoldParams,
                   "Karimireddy et al. 2020 (SCAFFOLD, option II), compared in seeds 000, 003, 004",
                   "SCAFFOLD", events_why=_RUNNING_SUM),
    AlgorithmEntry("fednova", "hetfl.algorithms.fednova:FedNova", FedNovaParams,
                   "Wang et al. 2020 (FedNova), lecture notes seed 001", "FedNova", schemes=("A", "B"),
                   schemes_why="FedNova's τ_eff/a_i already removes the step bias that Scheme C's E/s "
                               "removes: under C the update would be divided by the steps twice"),
    AlgorithmEntry("feddyn", "hetfl.algorithms.feddyn:FedDyn", FedDynParams,
                   "Acar et al. 2021 (FedDyn), compared in seeds 003, 004", "FedDyn",
                   events_why=_RUNNING_SUM),
    AlgorithmEntry("fedcurv", "hetfl.algorithms.fedcurv:FedCurv", FedCurvParams,
                   "Shoham et al. 2019 (FedCurv), compared in seed 003", "FedCurv",
                   events_why=_RUNNING_SUM),
    AlgorithmEntry("fedbn", "hetfl.algorithms.fedbn:FedBN", NoParams,
                   "Li et al. 2021 (FedBN), compared in seed 003", "FedBN"),
    AlgorithmEntry("fedfor", "hetfl.algorithms.fedfor:FedFor", FedForParams,
                   "Tian, Smith, Kira 2022 (FedFOR, Eq. 7), seed 003", "FedFOR"),
    AlgorithmEntry("efl", "hetfl.algorithms.efl:EFL", EflParams,
                   "Ma et al. 2022 (Elastic Federated Learning, Eq. 2-6, Algorithms 1-2), seed 000", "EFL",
                   schemes=("C",),
                   schemes_why="EFL's adaptive coefficient p_τ^k = E·p^k/s_τ^k is Scheme C: under A or B "
                               "EFL would silently drop it", events_why=_RUNNING_SUM),
    AlgorithmEntry("fedelasticnet", "hetfl.algorithms.elasticnet:FedElasticNet", ElasticNetParams,
                   "FedElasticNet Algorithm 1 (on FedAvg/FedProx), seed 004", "FedElasticNet"),
    AlgorithmEntry("scaffold_elasticnet", "hetfl.algorithms.elasticnet:ScaffoldElasticNet",
                   ScaffoldElasticNetParams, "FedElasticNet Algorithm 2 (on SCAFFOLD), seed 004",
                   "SCAFFOLD+ElasticNet", events_why=_RUNNING_SUM),
    AlgorithmEntry("feddyn_elasticnet", "hetfl.algorithms.elasticnet:FedDynElasticNet",
                   FedDynElasticNetParams, "FedElasticNet Algorithm 3 (on FedDyn), seed 004",
                   "FedDyn+ElasticNet", events_why=_RUNNING_SUM),
    AlgorithmEntry("fedavgm", "hetfl.algorithms.fedavgm:FedAvgM", FedAvgMParams,
                   "Hsu, Qi, Brown 2019 (FedAvgM, server momentum); docs/adding-an-algorithm.md", "FedAvgM"),
    AlgorithmEntry("apfl", "hetfl.algorithms.apfl:APFL", ApflParams,
                   "Deng, Kamani, Mahdavi 2020 (APFL, arXiv 2003.13461, Algorithm 1, adaptive α), compared "
                   "in seed 000", "APFL"),
    AlgorithmEntry("fedamp", "hetfl.algorithms.fedamp:FedAMP", FedAmpParams,
                   "Huang et al. 2021 (FedAMP, AAAI, Eq. 7-8), compared in seed 000", "FedAMP",
                   events_why=_RUNNING_SUM),
    AlgorithmEntry("fedgate", "hetfl.algorithms.fedgate:FedGATE", FedGateParams,
                   "Haddadpour et al. 2021 (FedGATE with compression, FedCOMGATE, Algorithm 2), compared in "
                   "seed 000", "FedGATE", events_why=_RUNNING_SUM),
    AlgorithmEntry("vrlsgd", "hetfl.algorithms.vrlsgd:VRLSGD", VrlSgdParams,
                   "Liang et al. 2019 (VRL-SGD, arXiv 1912.12844, Algorithm 1), compared in seed 000",
                   "VRL-SGD", events_why=_RUNNING_SUM),
    AlgorithmEntry("topk_ef", "hetfl.algorithms.compressed:CompressedFedAvg", CompressionParams,
                   "FedAvg + top-k + error feedback at a matched bit budget (seed 004's reviewers)",
                   "FedAvg+top-k+EF"),
    AlgorithmEntry("sign_ef", "hetfl.algorithms.compressed:SignFedAvg", NoParams,
                   "FedAvg + scaled sign + error feedback, EF-SignSGD (seed 004's reviewers)",
                   "FedAvg+sign+EF"),
    AlgorithmEntry("st_ef", "hetfl.algorithms.compressed:TernaryFedAvg", CompressionParams,
                   "FedAvg + sparse ternary (EFL's ST) + error feedback at a matched bit budget "
                   "(seed 004's reviewers)", "FedAvg+ST+EF"),
)}


def _allowed(meta: dict[str, Any], typ: HyperType) -> str:
    if meta.get("choices"):
        each = "one of " + ", ".join(json.dumps(c) for c in meta["choices"])
        text = f"a list, each {each}" if typ.sequence else each
        return text + (", or null" if typ.nullable else "")
    parts = [str(typ)]
    for key, op in (("minimum", ">="), ("exclusive_minimum", ">"), ("maximum", "<="),
                    ("exclusive_maximum", "<")):
        if meta.get(key) is not None:
            parts.append(f"{'each ' if typ.sequence else ''}{op} {meta[key]}")
    return ", ".join(parts)


def _check_scalar(typ: str, meta: dict[str, Any], value: Any, bad: ValueError) -> Any:
    if typ == "bool":
        if not isinstance(value, bool):
            raise bad
        return value
    if typ == "str":
        if not isinstance(value, str) or (meta.get("choices") and value not in meta["choices"]):
            raise bad
        return value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise bad
    if typ == "int" and not float(value).is_integer():
        raise bad
    v = float(value)
    if not math.isfinite(v):
        raise bad
    for mkey, ok in (("minimum", lambda m: v >= m), ("exclusive_minimum", lambda m: v > m),
                     ("maximum", lambda m: v <= m), ("exclusive_maximum", lambda m: v < m)):
        if meta.get(mkey) is not None and not ok(meta[mkey]):
            raise bad
    return int(v) if typ == "int" else v


def _check_value(f: dataclasses.Field, value: Any, key: str) -> Any:
    meta, typ = f.metadata, hyper_type(f)
    shown = json.dumps(value) if not isinstance(value, dict) else "{...}"
    bad = ValueError(f"config key '{key}' has value {shown}, which is not allowed; "
                     f"allowed: {_allowed(meta, typ)}")
    if value is None:
        if typ.nullable:
            return None
        raise bad
    if typ.sequence:
        if not isinstance(value, list | tuple):
            raise bad
        return tuple(_check_scalar(typ.scalar, meta, v, bad) for v in value)
    return _check_scalar(typ.scalar, meta, value, bad)


def parse_hyperparameters(algorithm: str, raw: dict[str, Any] | None, key: str = "algorithm_params") -> Any:
    """The algorithm's hyperparameter dataclass from a config mapping (missing keys take defaults).

    Raises ValueError naming the key, the value and what is allowed.
    """
    if algorithm not in CATALOG:
        raise ValueError(f"config key '{key}' names algorithm '{algorithm}', which is not allowed; allowed: "
                         f"one of {', '.join(CATALOG)}")
    cls = CATALOG[algorithm].params
    fields = {f.name: f for f in dataclasses.fields(cls)}
    raw = raw or {}
    if not isinstance(raw, dict):
        raise ValueError(f"config key '{key}' must be a mapping of hyperparameters; allowed keys: "
                         f"{', '.join(fields) or 'none'}")
    values = {}
    for name, value in raw.items():
        if name not in fields:
            raise ValueError(f"config key '{key}.{name}' is not allowed here; allowed: "
                             + (f"only the keys {', '.join(fields)}" if fields else
                                f"no keys ({algorithm} has no hyperparameters)"))
        values[name] = _check_value(fields[name], value, f"{key}.{name}")
    return cls(**values)


def check_scheme(algorithm: str, scheme: str, key: str = "schemes") -> None:
    """Refuse a scheme the algorithm does not compose with (CATALOG[algorithm].schemes); the message names
    the key, the value, the reason and what is allowed."""
    entry = CATALOG.get(algorithm)
    if entry is None or scheme in entry.schemes:
        return
    raise ValueError(f"config key '{key}' has value \"{scheme}\", which is not allowed with algorithm "
                     f"{algorithm} ({entry.schemes_why}); allowed: {', '.join(entry.schemes)}")


def describe(algorithm: str) -> list[tuple[str, Any, str]]:
    """(name, default, description with allowed values) of each hyperparameter."""
    cls = CATALOG[algorithm].params
    return [(f.name, f.default, f"{f.metadata.get('doc', '')} [{_allowed(f.metadata, hyper_type(f))}]")
            for f in dataclasses.fields(cls)]


def check_defaults(entry: AlgorithmEntry) -> None:
    """Every hyperparameter has a default its own range allows (ValueError naming the field, the default and
    what is allowed): a config that leaves a key out gets the default, unchecked until now."""
    for f in dataclasses.fields(entry.params):
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ValueError(f"hyperparameter '{f.name}' has no default; allowed: a default for every "
                             "hyperparameter (a config may leave any key out)")
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        try:
            _check_value(f, list(default) if isinstance(default, tuple) else default, f.name)
        except ValueError:
            plain = isinstance(default, str | int | float | bool | None)
            shown = json.dumps(default) if plain else repr(default)
            raise ValueError(f"hyperparameter '{f.name}' has default {shown}, which is not allowed; allowed: "
                             f"{_allowed(f.metadata, hyper_type(f))}") from None


#: entry point name -> (entry point and package, why) of each plugin algorithm that was not registered
#: (registry.discover); config validation refuses a config naming one (hetfl.config)
REFUSED: dict[str, tuple[str, str]] = {}
#: name -> entry point, package, version and target of each plugin algorithm registered (registry.discover):
#: its runs record them (hetfl.pipeline), as hetfl's own record hetfl's commit
PLUGINS: dict[str, dict[str, str | None]] = {}
#: every algorithm hetfl knows: its own (BUILTIN) and those other packages register through the entry point
#: group "hetfl.algorithms" (registry.discover). The config schema's enum is filled in from it.
CATALOG: dict[str, AlgorithmEntry] = discover(BUILTIN, refused=REFUSED, sources=PLUGINS, check=check_defaults)
