"""Configuration: load, validate against the JSON Schema, fill defaults, expand into runs.

The schema (`schemas/config.schema.yaml`, linked from `workflow/schemas/`) is the single source of
truth for keys, types, allowed values and defaults. Errors name the key, the value and what is allowed.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from hetfl.data.tracesets import traceset_label

SCHEMA_RESOURCE = "schemas/config.schema.yaml"


class ConfigError(ValueError):
    """A configuration value is not allowed; the message names key, value and what is allowed."""


def load_schema() -> dict[str, Any]:
    text = resources.files("hetfl").joinpath(SCHEMA_RESOURCE).read_text()
    return yaml.safe_load(text)


def _with_defaults(validator_class: type) -> type:
    """Extend a jsonschema validator so that `default` values are filled in while validating."""
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if "default" in sub and name not in instance:
                    instance[name] = copy.deepcopy(sub["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def _allowed(error: jsonschema.ValidationError) -> str:
    """What the schema allows at the failing key, in words."""
    s = error.schema if isinstance(error.schema, dict) else {}
    v = error.validator
    if v == "enum":
        return "one of " + ", ".join(json.dumps(x) for x in error.validator_value)
    if v == "minimum":
        return f">= {error.validator_value}"
    if v == "exclusiveMinimum":
        return f"> {error.validator_value}"
    if v == "maximum":
        return f"<= {error.validator_value}"
    if v == "exclusiveMaximum":
        return f"< {error.validator_value}"
    if v == "type":
        return f"a value of type {error.validator_value}"
    if v == "additionalProperties":
        allowed = sorted(s.get("properties", {}))
        return "only the keys " + ", ".join(allowed) if allowed else "no additional keys"
    if v == "required":
        return "the key to be present"
    if v in ("minItems", "maxItems", "uniqueItems", "minProperties"):
        return f"{v} = {error.validator_value}"
    if v == "pattern":
        return f"a string matching {error.validator_value}"
    return s.get("description", error.message)


def _format_error(error: jsonschema.ValidationError) -> str:
    path = ".".join(str(p) for p in error.absolute_path) or "<top level>"
    if error.validator == "additionalProperties":
        extra = sorted(set(error.instance) - set(error.schema.get("properties", {})))
        key = f"{path}.{extra[0]}" if path != "<top level>" else extra[0]
        return f"config key '{key}' is not allowed here; allowed: {_allowed(error)}"
    if error.validator == "required":
        missing = error.message.split("'")[1] if "'" in error.message else error.message
        return f"config key '{path}.{missing}' is missing; it is required"
    value = json.dumps(error.instance) if not isinstance(error.instance, dict) else "{...}"
    return f"config key '{path}' has value {value}, which is not allowed; allowed: {_allowed(error)}"


def validate_config(config: dict[str, Any]) -> dict[str, Any]:
    """Validate a config dict and return a copy with every default filled in.

    Raises ConfigError listing every problem, each naming key, value and what is allowed.
    """
    config = copy.deepcopy(config)
    schema = load_schema()
    validator = _with_defaults(jsonschema.Draft202012Validator)(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(_format_error(e) for e in errors))
    _check_semantics(config)
    return config


def _check_semantics(config: dict[str, Any]) -> None:
    """Rules JSON Schema cannot express."""
    for name, exp in config["experiments"].items():
        n_order = len(exp["trace_order"])
        for k in exp["num_traces"]:
            if k > n_order:
                raise ConfigError(
                    f"config key 'experiments.{name}.num_traces' has value {k}, which is not allowed; "
                    f"allowed: 1..{n_order} (the length of trace_order)"
                )
        sizes = exp["sizes"]
        if sizes["max_size"] < sizes["min_size"]:
            raise ConfigError(
                f"config key 'experiments.{name}.sizes.max_size' has value {sizes['max_size']}, which is "
                f"not allowed; allowed: >= sizes.min_size ({sizes['min_size']})"
            )


def load_config(path: str | Path) -> dict[str, Any]:
    """Read a YAML config file and validate it."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level")
    return validate_config(raw)


@dataclass(frozen=True)
class RunSpec:
    """Everything one training job needs: one point of an experiment's grid, fully resolved."""

    experiment: str
    run: str
    table: str
    dataset: str
    setting: str
    alpha: float
    beta: float
    iid: bool
    num_devices: int
    sizes: dict[str, Any]
    test_fraction: float
    model: str
    algorithm: str
    scheme: str
    num_traces: int
    trace_order: tuple[str, ...]
    local_epochs: int
    batch_size: int
    eta0: float
    rounds: int
    eval_every: int
    seed: int
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["trace_order"] = list(self.trace_order)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunSpec:
        d = dict(d)
        d["trace_order"] = tuple(d["trace_order"])
        return cls(**d)

    @property
    def split_key(self) -> str:
        """Runs with equal split keys share one split (the data does not depend on scheme or traces)."""
        return f"{self.experiment}/{self.setting}/seed{self.seed}"

    @property
    def traceset(self) -> str:
        return traceset_label(self.trace_order[: self.num_traces])

    @property
    def trace_key(self) -> str:
        return f"{self.traceset}/n{self.num_devices}_r{self.rounds}_seed{self.seed}"


def run_name(setting: str, num_traces: int, scheme: str, seed: int) -> str:
    """Deterministic run name from the run's grid coordinates."""
    return f"{setting}_T{num_traces}_{scheme}_s{seed}"


def expand_runs(config: dict[str, Any]) -> Iterator[RunSpec]:
    """All runs of a validated config, in a stable order."""
    for exp_name, exp in config["experiments"].items():
        for setting, sv in exp["settings"].items():
            for k in exp["num_traces"]:
                for scheme in exp["schemes"]:
                    for seed in exp["seeds"]:
                        yield RunSpec(
                            experiment=exp_name,
                            run=run_name(setting, k, scheme, seed),
                            table=exp["table"],
                            dataset=exp["dataset"],
                            setting=setting,
                            alpha=float(sv["alpha"]),
                            beta=float(sv["beta"]),
                            iid=bool(sv.get("iid", False)),
                            num_devices=exp["num_devices"],
                            sizes=dict(exp["sizes"]),
                            test_fraction=exp["test_fraction"],
                            model=exp["model"],
                            algorithm=exp["algorithm"],
                            scheme=scheme,
                            num_traces=k,
                            trace_order=tuple(exp["trace_order"]),
                            local_epochs=exp["local_epochs"],
                            batch_size=exp["batch_size"],
                            eta0=float(exp["eta0"]),
                            rounds=exp["rounds"],
                            eval_every=exp["eval_every"],
                            seed=seed,
                        )
