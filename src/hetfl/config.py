"""Configuration: load, validate against the JSON Schema, fill defaults, expand into runs.

The schema (`schemas/config.schema.yaml`, linked from `workflow/schemas/`) is the single source of
truth for keys, types, allowed values and defaults. Errors name the key, the value and what is allowed.
"""

from __future__ import annotations

import copy
import functools
import itertools
import json
import math
import os
from collections.abc import Iterable, Iterator
from dataclasses import MISSING, asdict, dataclass, field, fields, replace
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from hetfl.algorithms import method_label
from hetfl.algorithms.hparams import CATALOG, REFUSED, check_scheme, parse_hyperparameters
from hetfl.algorithms.registry import class_problem, params_problem, target_problem
from hetfl.data.quadratic import DEFAULT_A, DEFAULT_B
from hetfl.data.tracesets import traceset_label
from hetfl.errors import ConfigError
from hetfl.reports.labels import communication_label

if TYPE_CHECKING:
    import jsonschema
    import numpy as np

SCHEMA_RESOURCE = "schemas/config.schema.yaml"


EXACT_INT_MAX = 2**53  # the largest count float64 holds exactly, with every smaller one


def load_schema() -> dict[str, Any]:
    text = resources.files("hetfl").joinpath(SCHEMA_RESOURCE).read_text()
    schema = yaml.safe_load(text)
    # the registry, not the file, lists the algorithms: a new one (or a plugin's) is allowed at once
    schema["$defs"]["algorithm_name"]["enum"] = list(CATALOG)
    _bound_integers(schema)
    return schema


def _bound_integers(schema: dict[str, Any]) -> None:
    """Give every integer key that sets no maximum of its own the maximum 2**53 (in place).

    The jobs take fractions of these counts in float64 and hold them in int64 arrays. local_epochs at 2**63
    or more passed validation, then failed its job; at 2**63 - 1 it trained: f · E rounded up to 2**63, which
    int64 wraps to its minimum, so every device did one step, none was complete, and Scheme A discarded every
    round without a word. Up to 2**53 every such product is exact, as for the sizes (data.sizes). Keys with
    a bound of their own keep it (seeds reach 2**64 - 1, which torch's generator takes)."""
    for node in integer_schemas(schema):
        if "maximum" not in node and "exclusiveMaximum" not in node:
            node["maximum"] = EXACT_INT_MAX


def integer_schemas(node: Any) -> Iterator[dict[str, Any]]:
    """Every subschema of `node` whose type is, or includes, integer."""
    if isinstance(node, dict):
        types = node.get("type")
        if "integer" in (types if isinstance(types, list) else [types]):
            yield node
        for value in node.values():
            yield from integer_schemas(value)
    elif isinstance(node, list):
        for value in node:
            yield from integer_schemas(value)


def _is_integer(checker, instance) -> bool:
    """A whole number written as one: jsonschema's "integer" also takes 4.0, which then reaches paths
    (seed4.0) and `hetfl trace --rounds 4.0` mid-workflow."""
    return isinstance(instance, int) and not isinstance(instance, bool)


def _is_number(checker, instance) -> bool:
    """A finite number: jsonschema's "number" also takes .nan and .inf, which fail in a job, or not at all. An
    int is finite: math.isfinite raised OverflowError for one beyond a float (10**400 written out in YAML)."""
    if isinstance(instance, bool) or not isinstance(instance, int | float):
        return False
    return isinstance(instance, int) or math.isfinite(instance)


def _with_defaults(validator_class: type) -> type:
    """Extend a jsonschema validator so that `default` values are filled in while validating, and integers
    and numbers are whole and finite (_is_integer, _is_number)."""
    import jsonschema

    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for name, sub in properties.items():
                if "default" in sub and name not in instance:
                    instance[name] = copy.deepcopy(sub["default"])
        yield from validate_properties(validator, properties, instance, schema)

    types = validator_class.TYPE_CHECKER.redefine_many({"integer": _is_integer, "number": _is_number})
    return jsonschema.validators.extend(validator_class, {"properties": set_defaults}, type_checker=types)


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
        return f"<= {error.validator_value}" + (" (2**53, the largest count float64 holds exactly)"
                                               if error.validator_value == EXACT_INT_MAX else "")
    if v == "exclusiveMaximum":
        return f"< {error.validator_value}"
    if v == "type":
        words = {"integer": "a whole number written without a decimal point (4, not 4.0)",
                 "number": "a finite number", "object": "a mapping of keys to values ({key: value, ...})",
                 "null": "null",
                 "string": "a string (in quotes where YAML would read a number, true/false or null: \"1\", "
                           "\"yes\")"}
        # a list of types (global_test_samples: [integer, "null"]) is any of them: words.get(list) raised
        types = error.validator_value if isinstance(error.validator_value, list) else [error.validator_value]
        return " or ".join(words.get(t, f"a value of type {t}") for t in types)
    if v == "additionalProperties":
        allowed = sorted(s.get("properties", {}))
        return "only the keys " + ", ".join(allowed) if allowed else "no additional keys"
    if v == "required":
        return "the key to be present"
    if v == "uniqueItems":  # "uniqueItems = True" named the schema's keyword, not what a config may write
        return "each item at most once (no duplicates)"
    if v in ("minItems", "maxItems", "minProperties"):
        n = error.validator_value
        what = "item" if v != "minProperties" else "key"
        return f"{'at most' if v == 'maxItems' else 'at least'} {n} {what}{'s' if n != 1 else ''}"
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
    text = f"config key '{path}' has value {value}, which is not allowed; allowed: {_allowed(error)}"
    if error.validator == "enum" and isinstance(error.instance, str) and error.instance in REFUSED:
        source, why = REFUSED[error.instance]  # a plugin's algorithm left out: the reason was a warning only
        text += f"; the plugin that would register {value} is left out: {source} is not registered: {why}"
    return text


def validate_config(config: dict[str, Any]) -> dict[str, Any]:
    """Validate a config dict and return a copy with every default filled in.

    Raises ConfigError listing every problem, each naming key, value and what is allowed.
    """
    raw = config  # the defaults are filled into the copy: the keys nothing reads are refused as written
    config = copy.deepcopy(config)
    # keys written in the file (before defaults are filled in): some defaults depend on other keys
    exps = config.get("experiments")
    given = {name: set(exp) for name, exp in exps.items() if isinstance(exp, dict)} \
        if isinstance(exps, dict) else {}
    # imported here: every `hetfl` process imports this module, and only the ones that validate a config
    # need jsonschema (≈ 60 ms of a split or trace job's ≈ 0.3 s of imports)
    import jsonschema

    schema = load_schema()
    validator = _with_defaults(jsonschema.Draft202012Validator)(schema)
    errors = sorted(validator.iter_errors(config), key=lambda e: list(map(str, e.absolute_path)))
    if errors:
        raise ConfigError("invalid configuration:\n  " + "\n  ".join(_format_error(e) for e in errors))
    _check_semantics(config, given, _as_written(raw["experiments"]))
    return config


def _as_written(experiments: dict[str, Any]) -> dict[str, dict[str, Any] | None]:
    """experiment -> its mapping as the config wrote it, for the checks of keys nothing reads (_written);
    None for one that already holds every key the schema fills into an experiment. That is validation's own
    output: hetfl project validates a validated config again (projection.scaled_config), and its workflow
    reads that copy back as its config file, where a filled-in default reads as written. A config that
    writes every one of those keys itself is taken for such output: its keys at their defaults pass."""
    filled = set(_schema_defaults("experiment"))
    return {name: None if filled <= set(exp) else exp for name, exp in experiments.items()}


def _written(mapping: dict[str, Any], raw: dict[str, Any] | None, definition: str) -> set[str]:
    """The keys of `mapping` (validated) that the config wrote: those of `raw`, the same mapping before the
    defaults were filled in. Without it (validation's own output, _as_written) a key at the schema's
    default of `definition` cannot be told from a filled-in one, and counts as not written."""
    if raw is not None:
        return set(raw)
    defaults = _schema_defaults(definition)
    return {k for k, v in mapping.items() if k not in defaults or v != defaults[k]}


def _algorithms(exp: dict[str, Any]) -> list[str]:
    """The experiment's algorithm axis: `algorithms` (`all`: every registered one that composes with each of
    the experiment's schemes, CATALOG[name].schemes), else [`algorithm`], else [fedavg]."""
    if exp.get("algorithms") == "all":
        schemes = set(exp.get("schemes") or ())
        return [name for name, entry in CATALOG.items() if schemes <= set(entry.schemes)]
    return list(exp.get("algorithms") or [exp.get("algorithm", "fedavg")])


def _check_algorithms(name: str, exp: dict[str, Any], given: set[str]) -> None:
    if "algorithm" in given and "algorithms" in given:
        raise ConfigError(f"config key 'experiments.{name}.algorithms' is not allowed together with "
                          f"'experiments.{name}.algorithm'; allowed: one of the two")
    for algo in [*_algorithms(exp), *exp["algorithm_params"]]:
        if algo in REFUSED:  # a plugin under a name hetfl has: hetfl's algorithm ran in its place
            source, why = REFUSED[algo]
            key = ("algorithms" if "algorithms" in given else "algorithm") if algo in _algorithms(exp) \
                else f"algorithm_params.{algo}"
            raise ConfigError(f"config key 'experiments.{name}.{key}' names algorithm '{algo}', which "
                              f"{source} also registers, left out ({why}): hetfl's own {algo} would run in "
                              "its place; allowed: a name of the plugin's own (its AlgorithmEntry's and "
                              f"entry point's), or the plugin uninstalled to run hetfl's {algo}")
    for algo in _algorithms(exp):  # a plugin's mistyped target failed only when its training job started
        problem = target_problem(CATALOG[algo].target)
        if problem:
            key = "algorithms" if "algorithms" in given else "algorithm"
            raise ConfigError(f"config key 'experiments.{name}.{key}' names algorithm '{algo}', whose "
                              f"class cannot be imported: {problem}; allowed: a registered target that "
                              "exists and imports (fix the AlgorithmEntry's target in the package that "
                              "registers it, or the module, or install what it imports)")
        problem = class_problem(CATALOG[algo].target)  # it failed in its training job, or ran as FedAvg
        problem = problem or params_problem(CATALOG[algo].target, CATALOG[algo].params.__name__)
        if problem:
            key = "algorithms" if "algorithms" in given else "algorithm"
            raise ConfigError(f"config key 'experiments.{name}.{key}' names algorithm '{algo}', whose "
                              f"class {CATALOG[algo].target} does not fit the engine: {problem}")
    for algo, params in exp["algorithm_params"].items():  # also those not run: a config may trim the axis
        try:
            parse_hyperparameters(algo, params, key=f"experiments.{name}.algorithm_params.{algo}")
        except ValueError as err:
            raise ConfigError(str(err)) from None


def _check_schemes(name: str, exp: dict[str, Any]) -> None:
    """Every algorithm × scheme of the grid composes (FedNova refuses C, EFL needs C: docs/algorithms.md)."""
    for algo in _algorithms(exp):
        for scheme in exp["schemes"]:
            try:
                check_scheme(algo, scheme, key=f"experiments.{name}.schemes")
            except ValueError as err:
                raise ConfigError(str(err)) from None


# Text sources (int64 token ids) and the model each one runs: an image model cannot read token ids, and a
# text model's embedding is sized for its own source's vocabulary (80 characters; 20,000 hashed words).
TEXT_MODELS = {"shakespeare": "char_lstm", "sent140": "sent_lstm"}
# Label skews whose client sizes are part of their definition (data.partition refuses a size skew).
FIXED_SIZE_SKEWS = ("natural", "shards")


def _check_text(name: str, exp: dict[str, Any], given: set[str]) -> None:
    """Text dataset ⇔ its text model (the model defaults to it when not given); a natural or shards split
    takes sizes {distribution: equal} (filled in when sizes is not given)."""
    key = f"experiments.{name}"
    text_model = TEXT_MODELS.get(exp["dataset"])
    if text_model is not None and "model" not in given:
        exp["model"] = text_model
    model = exp["model"]
    if text_model is not None and model != text_model:
        raise ConfigError(f"config key '{key}.model' has value \"{model}\", which is not allowed for dataset "
                          f"\"{exp['dataset']}\" (token ids); allowed: \"{text_model}\"")
    needs = {m: d for d, m in TEXT_MODELS.items()}.get(model)
    if needs is not None and exp["dataset"] != needs:
        others = [m for m in load_schema()["$defs"]["experiment"]["properties"]["model"]["enum"]
                  if m not in TEXT_MODELS.values() and m != "quadratic"]
        raise ConfigError(f"config key '{key}.model' has value \"{model}\", which is not allowed for dataset "
                          f"\"{exp['dataset']}\" ({model} reads {needs} token ids); allowed: one of "
                          + ", ".join(f'"{m}"' for m in others))
    skews = {label: sv["partition"]["label_skew"] for label, sv in exp["settings"].items()
             if isinstance(sv.get("partition"), dict) and "label_skew" in sv["partition"]}
    fixed = [label for label, skew in skews.items() if skew in FIXED_SIZE_SKEWS]
    if not fixed or exp["sizes"]["distribution"] == "equal":
        return
    if "sizes" not in given and len(fixed) == len(skews):
        exp["sizes"]["distribution"] = "equal"
        return
    skew = skews[fixed[0]]
    raise ConfigError(f"config key '{key}.sizes.distribution' has value \"{exp['sizes']['distribution']}\", "
                      f"which is not allowed with {key}.settings.{fixed[0]}.partition.label_skew \"{skew}\" "
                      f"(its client sizes are part of the split); allowed: \"equal\"")


def _check_quadratic(name: str, exp: dict[str, Any], given: set[str]) -> None:
    """dataset quadratic ⇔ model quadratic; num_devices = len(a) (filled in when not given)."""
    quad = exp["dataset"] == "quadratic"
    if quad != (exp["model"] == "quadratic"):
        raise ConfigError(f"config key 'experiments.{name}.model' has value \"{exp['model']}\", which is not "
                          f"allowed; allowed: \"quadratic\" exactly when dataset is \"quadratic\"")
    for label, sv in exp["settings"].items():
        key = f"experiments.{name}.settings.{label}"
        if exp["dataset"] == "synthetic":
            for k in ("alpha", "beta"):
                if k not in sv:
                    raise ConfigError(f"config key '{key}.{k}' is missing; it is required for dataset "
                                      f"{exp['dataset']}")
            continue
        if not quad:
            if "partition" not in sv:
                raise ConfigError(f"config key '{key}.partition' is missing; it is required for dataset "
                                  f"{exp['dataset']} (e.g. partition: {{label_skew: iid}})")
            continue
        a, b = sv.setdefault("a", list(DEFAULT_A)), sv.setdefault("b", list(DEFAULT_B))
        for k, v in (("b", b), ("n", sv.get("n", a))):
            if len(v) != len(a):
                raise ConfigError(f"config key '{key}.{k}' has {len(v)} entries, which is not allowed; "
                                  f"allowed: as many as a ({len(a)})")
        if "num_devices" not in given:
            exp["num_devices"] = len(a)
        if exp["num_devices"] != len(a):
            raise ConfigError(f"config key 'experiments.{name}.num_devices' has value {exp['num_devices']}, "
                              f"which is not allowed; allowed: {len(a)} (the length of {key}.a)")
    keys = [(f"experiments.{name}.settings.{label}", sv) for label, sv in exp["settings"].items()]
    for key, steps in [(f"experiments.{name}", exp.get("local_steps"))] + [(k, sv.get("local_steps"))
                                                                            for k, sv in keys]:
        if steps is not None and len(steps) != exp["num_devices"]:
            raise ConfigError(f"config key '{key}.local_steps' has {len(steps)} entries, which is "
                              f"not allowed; allowed: one per device ({exp['num_devices']})")


#: a setting's keys each kind of dataset reads (real sources: partition); every dataset reads _ANY_SETTING
_SETTING_KEYS = {"synthetic": ("alpha", "beta", "iid"), "quadratic": ("a", "b", "n")}
_ANY_SETTING = ("local_epochs", "rounds", "local_steps")


def _check_setting_keys(name: str, exp: dict[str, Any], raw: dict[str, Any] | None) -> None:
    """A setting key another kind of dataset reads is refused: alpha: 0.3 beside a dirichlet partition on
    mnist5k passed, the split used the partition's alpha (0.5), and the runs recorded alpha 0.3 (an
    audit); so did SYNTHETIC's iid on a real source, a partition on SYNTHETIC and the quadratic bed's a.
    `raw`: the experiment as written (_as_written); iid: false filled in is not refused."""
    dataset = exp["dataset"]
    own = _SETTING_KEYS.get(dataset, ("partition",))
    for label, setting in exp["settings"].items():
        written = _written(setting, raw and raw["settings"][label], "setting")
        for k, v in setting.items():
            if k in own or k in _ANY_SETTING or k not in written:
                continue
            hint = "; a Dirichlet alpha is partition's: {label_skew: dirichlet, alpha: ...}" \
                if k == "alpha" and "partition" in own else ""
            shown = "{...}" if isinstance(v, dict) else json.dumps(v)
            raise ConfigError(f"config key 'experiments.{name}.settings.{label}.{k}' has value {shown}, "
                              f"which is not allowed with dataset \"{dataset}\" (it does not read it{hint}); "
                              "allowed: " + ", ".join((*own, *_ANY_SETTING)))


# Models that read flat feature vectors: SYNTHETIC(α, β) is 60 features per sample, not an image.
FLAT_MODELS = ("logreg", "mlp")
_CONV_OPTIONS = ("channels_last", "conv")
#: the keyword arguments each model takes (`model_params`), so that a wrong key fails before any job runs;
#: kept equal to the models' constructors by tests/test_config.py (config validation must not import torch)
MODEL_PARAMS: dict[str, tuple[str, ...]] = {
    "logreg": (), "quadratic": (), "mlp": ("hidden",),
    "cnn": ("channels", "hidden", *_CONV_OPTIONS), "cnn_cifar": ("channels", "hidden", *_CONV_OPTIONS),
    "cnn_bn": ("channels", "hidden", *_CONV_OPTIONS),
    "vgg11": ("cfg", "width", "hidden", "norm", "groups", *_CONV_OPTIONS),
    "resnet20": ("widths", "blocks", "groups", "norm", *_CONV_OPTIONS),
    "resnet_emnist": ("widths", "blocks", "groups", "norm", *_CONV_OPTIONS),
    "char_lstm": ("vocab", "embed", "hidden", "layers", "cell"),
    "sent_lstm": ("vocab", "embed", "hidden", "layers", "cell"),
}
#: model_params that are layer sizes or counts: whole numbers >= 1 (hidden: [-3] failed in training)
SIZE_PARAMS = frozenset({"channels", "hidden", "widths", "blocks", "groups", "vocab", "embed", "layers"})
_CNN_SIZES: dict[str, str | int] = {"channels": 2, "hidden": "list"}
_RESNET_SIZES: dict[str, str | int] = {"widths": "list", "blocks": "int", "groups": "int"}
_LSTM_SIZES: dict[str, str | int] = dict.fromkeys(("vocab", "embed", "hidden", "layers"), "int")
#: each model's size parameters, in the form its constructor takes: "int" a whole number, "list" a
#: non-empty list, n a list of exactly n (the CNNs' two convolutions). The other forms failed in the
#: training job, after the splits (vgg11 `hidden: [512]`, mlp `hidden: 200`: TypeError; cnn `channels:
#: [32]`: IndexError), or trained another model (cnn `channels: [32, 64, 128]` dropped 128);
#: tests/test_config.py builds every model in each form
SIZE_FORMS: dict[str, dict[str, str | int]] = {
    "mlp": {"hidden": "list"}, "cnn": _CNN_SIZES, "cnn_bn": _CNN_SIZES, "cnn_cifar": _CNN_SIZES,
    "vgg11": {"hidden": "int", "groups": "int"}, "resnet20": _RESNET_SIZES, "resnet_emnist": _RESNET_SIZES,
    "char_lstm": _LSTM_SIZES, "sent_lstm": _LSTM_SIZES,
}
_FORM_TEXT = {"int": "a whole number >= 1, not a list", "list": "a non-empty list of whole numbers >= 1"}
CONV_IMPLS = ("auto", "grouped", "unfold")  # models.layers.CONV_IMPLS
LSTM_CELLS = ("fused", "ops")  # models.recurrent.LSTM_CELLS
#: the 2×2 max-poolings of vgg11's default cfg (models.zoo.VGG11_CFG): an image must be 2**5 = 32 wide
VGG11_POOLINGS = 5
#: the smallest image side the other image models train on: McMahan's CNNs' two 'same' 5×5 convolutions
#: with 2×2 pools 4, the CIFAR CNN's two valid ones 16 (cnn_cifar on Digits' 8×8 failed in the training
#: job: "Kernel size can't be greater than actual input size"); the ResNets' global pooling takes any.
#: tests/test_config.py trains each model at its side and fails one below
MIN_IMAGE_SIDE = {"cnn": 4, "cnn_bn": 4, "cnn_cifar": 16}
#: the ResNets' default widths and GroupNorm groups (models.zoo), which must divide every width
RESNET_WIDTHS = {"resnet20": (16, 32, 64), "resnet_emnist": (32, 64)}
RESNET_GROUPS = 2
#: each model's `norm` values: the ResNets' models.blocks.NORMS ("group" the default; "batch" He et al.'s,
#: FedFOR Table 2), VGG-11's none (null, the FL papers') or "group" (models.zoo.VGG)
NORMS: dict[str, tuple[str | None, ...]] = {"resnet20": ("group", "batch"),
                                            "resnet_emnist": ("group", "batch"), "vgg11": (None, "group")}


def _check_model_params(name: str, exp: dict[str, Any]) -> None:
    """model_params: only keys the model takes; conv, cell, norm and channels_last with their allowed
    values."""
    model, params = exp["model"], exp.get("model_params") or {}
    allowed = MODEL_PARAMS.get(model)
    if allowed is None:
        return  # an unknown model is the schema's error
    key = f"experiments.{name}.model_params"
    for k, v in params.items():
        if k not in allowed:
            raise ConfigError(f"config key '{key}.{k}' has value {json.dumps(v)}, which is not a parameter "
                              f"of model \"{model}\"; allowed: "
                              + (", ".join(allowed) if allowed else "none (model_params: {})"))
    for option, values in (("conv", CONV_IMPLS), ("cell", LSTM_CELLS)):
        if option in params and params[option] not in values:
            raise ConfigError(f"config key '{key}.{option}' has value {json.dumps(params[option])}, which is "
                              f"not allowed; allowed: " + ", ".join(f'"{c}"' for c in values))
    if "norm" in params and params["norm"] not in NORMS[model]:
        raise ConfigError(f"config key '{key}.norm' has value {json.dumps(params['norm'])}, which is not "
                          f"allowed for model \"{model}\"; allowed: " + ", ".join(json.dumps(n)
                                                                              for n in NORMS[model]))
    for k in sorted(SIZE_PARAMS.intersection(params)):
        v = params[k]
        sizes = v if isinstance(v, list) else [v]
        if not sizes or not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in sizes):
            raise ConfigError(f"config key '{key}.{k}' has value {json.dumps(v)}, which is not allowed; "
                              "allowed: a whole number >= 1, or a non-empty list of them (a layer's size)")
        form = SIZE_FORMS[model][k]
        if isinstance(v, list) != (form != "int") or (isinstance(form, int) and len(v) != form):
            raise ConfigError(f"config key '{key}.{k}' has value {json.dumps(v)}, which model \"{model}\" "
                              f"does not take; allowed: "
                              + _FORM_TEXT.get(form, f"a list of exactly {form} whole numbers >= 1"))
    if model in RESNET_WIDTHS:  # the ResNets' widths, in the form SIZE_FORMS checked
        widths, groups = params.get("widths", RESNET_WIDTHS[model]), params.get("groups", RESNET_GROUPS)
        if list(widths) != sorted(widths):
            raise ConfigError(f"config key '{key}.widths' has value {json.dumps(widths)}, which is not "
                              "allowed; allowed: widths that never decrease (a stage's shortcut zero-pads "
                              "its input's channels, He et al.'s option A, and cannot drop any)")
        if params.get("norm", "group") == "group" and any(w % groups for w in widths):
            k = "widths" if "widths" in params else "groups"
            raise ConfigError(f"config key '{key}.{k}' has value {json.dumps(params[k])}, which is not "
                              f"allowed with GroupNorm's {groups} groups and widths "
                              f"{json.dumps(list(widths))}; allowed: every width a multiple of groups (or "
                              f"norm \"batch\")")
    cfg = params.get("cfg", [])  # vgg11's layers; the batched model pools after a convolution only
    if not isinstance(cfg, list) or not all(
            (v == "M" and i > 0 and cfg[i - 1] != "M") or (isinstance(v, int) and not isinstance(v, bool)
                                                           and v >= 1) for i, v in enumerate(cfg)):
        raise ConfigError(f"config key '{key}.cfg' has value {json.dumps(cfg)}, which is not allowed; "
                          "allowed: a list of convolutions' widths (whole numbers >= 1), each optionally "
                          "followed by \"M\" (a 2x2 max-pooling)")
    width = params.get("width", 1.0)  # vgg11's channel multiplier
    if isinstance(width, bool) or not isinstance(width, int | float) or not 0 < width < math.inf:
        raise ConfigError(f"config key '{key}.width' has value {json.dumps(width)}, which is not allowed; "
                          "allowed: a number > 0 (the channel multiplier)")
    layout = params.get("channels_last", "auto")
    if not isinstance(layout, bool) and layout != "auto":
        raise ConfigError(f"config key '{key}.channels_last' has value {json.dumps(layout)}, which is not "
                          f"allowed; allowed: true, false, \"auto\"")


def _check_inputs(name: str, exp: dict[str, Any]) -> None:
    """What would fail only after split and trace jobs ran: an image model on SYNTHETIC's feature vectors,
    an image model on images too small for its convolutions and poolings, a data_dir that does not
    exist."""
    key = f"experiments.{name}"
    if exp["dataset"] == "synthetic" and exp["model"] not in FLAT_MODELS:
        raise ConfigError(f"config key '{key}.model' has value \"{exp['model']}\", which is not allowed for "
                          f"dataset \"synthetic\" (60 features per sample, not an image); allowed: "
                          + ", ".join(f'"{m}"' for m in FLAT_MODELS))
    from hetfl.data.sources import DATA_DIR_ENV, SOURCES

    cfg = (exp.get("model_params") or {}).get("cfg")
    info = SOURCES.get(exp["dataset"])
    if info is not None and len(info.input_shape) == 3 and (cfg is None or isinstance(cfg, list)):
        # another cfg: _check_model_params refuses it
        pools = VGG11_POOLINGS if cfg is None else cfg.count("M")
        need = 2**pools if exp["model"] == "vgg11" else MIN_IMAGE_SIDE.get(exp["model"], 1)
        side = min(info.input_shape[-2:])
        if side < need:  # the training job would fail when it builds or runs the model
            why = (f"its {pools} 2x2 max-poolings need" if exp["model"] == "vgg11"
                   else "its convolutions and poolings need")
            more = (f", or model_params.cfg with at most {int(math.log2(side))} \"M\""
                    if exp["model"] == "vgg11" else "")
            raise ConfigError(
                f"config key '{key}.model' has value \"{exp['model']}\", which is not allowed for dataset "
                f"\"{exp['dataset']}\" ({'x'.join(map(str, info.input_shape))} images): {why} images of "
                f"at least {need}x{need}; allowed: a source of larger images{more}")
    data_dir = exp.get("data_dir")
    if data_dir is not None and not Path(data_dir).expanduser().is_dir():
        raise ConfigError(f"config key '{key}.data_dir' has value \"{data_dir}\", which is not an existing "
                          f"directory (relative to {Path.cwd()}); allowed: a directory holding the data "
                          f"(fetch into it: python -m hetfl.data.sources fetch NAME --data-dir DIR)")
    env = os.environ.get(DATA_DIR_ENV)
    reads_root = exp["dataset"] in SOURCES and SOURCES[exp["dataset"]].origin in ("hub", "local")
    if data_dir is None and env and reads_root and not Path(env).expanduser().is_dir():
        # online, the hub copy would be downloaded into the misspelt directory; offline the split job
        # would stop after the trace jobs ran
        raise ConfigError(f"config key '{key}.data_dir' is not given, and the environment variable "
                          f"{DATA_DIR_ENV} it falls back to has value \"{env}\", which is not an existing "
                          f"directory (relative to {Path.cwd()}); allowed: {DATA_DIR_ENV} naming a directory "
                          f"holding the data, or a data_dir key")


EVENT_POLICIES = {"arrival": ("fast_reboot", "vanilla"), "departure": ("include", "exclude")}
EVENT_TABLES = {"fast_reboot": "arrival", "crossing_epochs": "departure", "multiple_arrivals": "arrival"}


_COUNTS_ROUNDS = ("it counts the global epochs after each event one by one, from the curve's value at the "
                  "round before it")
_BEST_OVER_ROUNDS = "its best accuracy is the best over every round, as the paper's is"
#: the tables whose measure reads every round of a curve, and why: with eval_every 5 the event tables'
#: runs trained, then the table failed ("the curve has no value at round τ0 − 1 = 2") or counted only
#: evaluated rounds (7 rounds to recover read as 10); the best-over-rounds tables took the best of every
#: fifth round, lower than the paper's measure of the same run, with no sign of it
EVERY_ROUND_TABLES = {
    "fast_reboot": _COUNTS_ROUNDS, "crossing_epochs": _COUNTS_ROUNDS, "multiple_arrivals": _COUNTS_ROUNDS,
    "bmta": _BEST_OVER_ROUNDS, "efl_lambda": _BEST_OVER_ROUNDS,
    "fedfor_by_e": _BEST_OVER_ROUNDS + ", and ACC_x is the first round that reaches x %",
    "fedfor_concept_shift": "its best accuracy per stretch and its mean over rounds read every round",
}


def _check_eval_every(name: str, exp: dict[str, Any]) -> None:
    """A table that reads every round of its runs' curves (EVERY_ROUND_TABLES) needs every round evaluated."""
    why = EVERY_ROUND_TABLES.get(exp["table"])
    if why and exp["eval_every"] != 1:
        raise ConfigError(f"config key 'experiments.{name}.eval_every' has value {exp['eval_every']}, which "
                          f"is not allowed with table {exp['table']} ({why}, so every round must be "
                          f"evaluated); allowed: 1")


def _check_event(name: str, exp: dict[str, Any]) -> None:
    ev = exp.get("event")
    key = f"experiments.{name}.event"
    if exp["table"] in EVENT_TABLES and (ev is None or ev["kind"] != EVENT_TABLES[exp["table"]]):
        raise ConfigError(f"config key '{key}' is missing or of the wrong kind; table {exp['table']} "
                          f"needs an event of kind {EVENT_TABLES[exp['table']]}")
    if ev is None:
        return
    if exp["table"] not in (*EVENT_TABLES, "none"):
        raise ConfigError(f"config key '{key}' is not allowed with table {exp['table']} (its runs would "
                          "train, then the table would refuse them); allowed: an event only with table "
                          + ", ".join(EVENT_TABLES) + " or none")
    allowed = EVENT_POLICIES[ev["kind"]]
    for pol in ev["policies"]:
        if pol not in allowed:
            raise ConfigError(f"config key '{key}.policies' has value \"{pol}\", which is not allowed for "
                              f"kind {ev['kind']}; allowed: {', '.join(allowed)}")
    n = exp["num_devices"]
    for d in ev.get("devices", []):
        if d >= n:
            raise ConfigError(f"config key '{key}.devices' has value {d}, which is not allowed; "
                              f"allowed: 0..{n - 1} (num_devices = {n})")
    if len(set(ev.get("devices", []))) >= n:
        raise ConfigError(f"config key '{key}.devices' has value {json.dumps(ev['devices'])}, which is not "
                          f"allowed: every device would arrive or depart, leaving rounds with no device in "
                          f"the objective; allowed: at most {n - 1} of the {n} devices")
    if ev["kind"] == "arrival" or "exclude" in ev["policies"]:  # the events that renormalise p^k
        for algo in _algorithms(exp):
            why = CATALOG[algo].events_why
            if why:
                free = [a for a, e in CATALOG.items() if not e.events_why]
                raise ConfigError(f"config key '{key}' ({ev['kind']}, policies {', '.join(ev['policies'])}) "
                                  f"is not allowed with algorithm {algo}: {why}; allowed: such an event with "
                                  f"{', '.join(free)}, or a departure under 'include' only")
    own = [label for label, sv in exp["settings"].items() if "rounds" in sv]
    if own:
        raise ConfigError(f"config key 'experiments.{name}.settings.{own[0]}.rounds' is not allowed with an "
                          f"event; allowed: the experiment's rounds only (events are placed within them)")
    later = len(ev.get("devices", [0])) - 1  # the devices after the first, each `stagger` rounds later
    last = max(ev["rounds"]) + ev["stagger"] * later
    if max(ev["rounds"]) > exp["rounds"]:
        raise ConfigError(f"config key '{key}.rounds' has value {max(ev['rounds'])}, which is not allowed; "
                          f"allowed: events within the run's {exp['rounds']} rounds")
    if last > exp["rounds"]:  # the stagger's fault: the message blamed event.rounds, naming a round in range
        raise ConfigError(f"config key '{key}.stagger' has value {ev['stagger']}, which is not allowed with "
                          f"event.rounds {max(ev['rounds'])} and {later + 1} devices (the last would come at "
                          f"round {last}); allowed: at most {(exp['rounds'] - max(ev['rounds'])) // later} "
                          f"(events within the run's {exp['rounds']} rounds)")


def _check_readings(name: str, exp: dict[str, Any]) -> None:
    """The readings axis must change something: every value of every reading yields at least one variant
    run inside readings_grid, whose values must be the experiment's own."""
    grid = exp.get("readings_grid") or {}
    for key, own in (("settings", list(exp["settings"])), ("num_traces", exp["num_traces"]),
                     ("seeds", exp["seeds"])):
        for value in grid.get(key, []):
            if value not in own:
                raise ConfigError(f"config key 'experiments.{name}.readings_grid.{key}' has value "
                                  f"{json.dumps(value)}, which is not allowed; allowed: one of "
                                  + ", ".join(json.dumps(v) for v in own))
    readings = exp.get("readings") or {}
    if not readings:
        return
    if exp["table"] not in (*READINGS_TABLES, "none"):  # "none": runs without a table (no table built)
        raise ConfigError(f"config key 'experiments.{name}.readings' is not allowed with table "
                          f"{exp['table']} (it has no readings table); allowed: readings only with table "
                          + ", ".join(READINGS_TABLES) + " or none")
    defaults = [s for s in _grid(name, exp) if _in_readings_grid(s, grid)]
    for key, values in readings.items():
        for value in values:
            variants = [v for v in (_variant(s, key, value) for s in defaults) if v is not None]
            if not variants:
                raise ConfigError(f"config key 'experiments.{name}.readings.{key}' has value "
                                  f"{json.dumps(value)}, which changes no run of this experiment (it is the "
                                  "experiment's own value, or the reading does not apply to its runs: see "
                                  "docs/readings.md); allowed: a value that changes a run")
            if key in _NATURAL_EQUAL_COUNTS:
                _check_partition_variants(f"experiments.{name}.readings.{key}", value, variants)


def _check_partition_variants(key: str, value: Any, variants: list[RunSpec]) -> None:
    """A reading of the partition is one change to each setting's own partition: the result must be a split
    hetfl can make (e.g. equal_counts_fraction 1 leaves equal_counts_holdout "rest" nothing to hold out)."""
    from hetfl.data.partition import PartitionSpec

    for spec in variants:
        try:
            PartitionSpec(**spec.partition)
        except ValueError as err:
            raise ConfigError(f"config key '{key}' has value {json.dumps(value)}, which is not allowed with "
                              f"setting {spec.setting}'s partition {json.dumps(spec.partition)}: "
                              f"{err}") from None
        if spec.partition.get("equal_counts_holdout") == "rest":
            _check_rest_holdout(key, spec.dataset, spec.partition)


def _check_traces(name: str, exp: dict[str, Any]) -> None:
    """Every p_inactive the experiment uses (its own, and its readings') must let each inactive trace it
    draws from keep Table 2's std: otherwise the trace jobs would fail after the workflow started."""
    from hetfl.data.traces import NoFitError, trace_distribution

    used = [t for t in exp["trace_order"][:max(exp["num_traces"])] if t in INACTIVE_TRACES]
    values = [("p_inactive", exp["p_inactive"])] + [
        ("readings.p_inactive", v) for v in (exp.get("readings") or {}).get("p_inactive", [])]
    for key, value in values:
        for trace in used:
            try:
                trace_distribution(trace, float(value))
            except NoFitError as err:
                raise ConfigError(f"config key 'experiments.{name}.{key}' has value {json.dumps(value)}, "
                                  f"which is not allowed with trace {trace} ({err.why})") from None


def _check_synthetic_iid(name: str, exp: dict[str, Any]) -> None:
    """FedProx's SYNTHETIC-IID has one W, b for every device: no α, β (data.synthetic)."""
    if exp["dataset"] != "synthetic":
        return
    for label, setting in exp["settings"].items():
        if setting.get("iid") and (setting.get("alpha", 0) != 0 or setting.get("beta", 0) != 0):
            raise ConfigError(f"config key 'experiments.{name}.settings.{label}' has iid: true with alpha "
                              f"{setting.get('alpha', 0)}, beta {setting.get('beta', 0)}, which is not "
                              f"allowed; allowed: alpha 0 and beta 0 with iid (FedProx's SYNTHETIC-IID has "
                              f"no α, β)")


#: tables whose cells pair runs by seed and setting with no method column (Ruan et al.'s, FedAvg throughout)
ONE_ALGORITHM_TABLES = ("accuracy_difference", "fast_reboot", "crossing_epochs", "multiple_arrivals")


#: the tables that read validation_accuracy (reports.fedfor): FedFOR's "best validation accuracy"
VALIDATION_TABLES = ("fedfor_by_e", "fedfor_concept_shift")


def _check_validation_accuracy(name: str, exp: dict[str, Any]) -> None:
    """validation_accuracy is read by FedFOR's tables only; the test split at the best holdout round needs
    the test split."""
    value = exp.get("validation_accuracy", "test_split")
    key = f"experiments.{name}.validation_accuracy"
    if value != "test_split" and exp["table"] not in VALIDATION_TABLES:
        raise ConfigError(f"config key '{key}' has value \"{value}\", which is not allowed with table "
                          f"{exp['table']} (it does not read it); allowed: \"{value}\" only with table "
                          + " or ".join(VALIDATION_TABLES))
    if value == "test_at_best_holdout" and not exp["global_test"]:
        raise ConfigError(f"config key '{key}' has value \"{value}\", which is not allowed with "
                          "global_test false (no test split is scored); allowed: \"holdout\", or global_test "
                          "true")


#: the tables acc_x is allowed with: only fedfor_by_e reads it (reports.fedfor's ACC_x rows; Table 5's
#: concept_shift_table has no ACC_x)
ACC_X_TABLES = ("fedfor_by_e",)


def _check_experiment_keys(name: str, exp: dict[str, Any], raw: dict[str, Any] | None) -> None:
    """An experiment key that nothing reads for this experiment is refused: acc_x: 60 on a bmta table, and
    data_dir or global_test_samples on SYNTHETIC or the quadratic bed, passed, and every run recorded them
    (an audit)."""
    key = f"experiments.{name}"
    if "acc_x" in exp and exp["table"] not in ACC_X_TABLES:  # no schema default: present = given
        raise ConfigError(f"config key '{key}.acc_x' has value {json.dumps(exp['acc_x'])}, which is not "
                          f"allowed with table {exp['table']} (it does not read it); allowed: acc_x only "
                          "with table " + " or ".join(ACC_X_TABLES))
    # generated data reads no source and has no global test set. `written`: a key at its schema default
    # counts too where the config wrote it (global_test: true on SYNTHETIC passed, read by nothing)
    written = _written(exp, raw, "experiment")
    if exp["dataset"] in ("synthetic", "quadratic"):
        for k in ("data_dir", "global_test_samples", "global_test"):
            if k in written:
                raise ConfigError(f"config key '{key}.{k}' has value {json.dumps(exp[k])}, which is not "
                                  f"allowed with dataset \"{exp['dataset']}\" (it does not read it: no "
                                  f"source and no global test set); allowed: {k} only with a real source")
    if "global_test_samples" in written and not exp["global_test"]:
        raise ConfigError(f"config key '{key}.global_test_samples' has value "
                          f"{json.dumps(exp['global_test_samples'])}, which is not allowed with global_test "
                          "false (no global test set to subsample: it does not read it); allowed: no "
                          "global_test_samples, or global_test true")
    if "sampling_weights" in written and exp.get("clients_per_round") is None:
        shown = json.dumps(exp["sampling_weights"])
        raise ConfigError(f"config key '{key}.sampling_weights' has value {shown}, which is not allowed "
                          "without clients_per_round (every device takes part in every round, so there is no "
                          "sampled set to weigh over: it does not read it); allowed: no sampling_weights, or "
                          "clients_per_round set")
    if exp["dataset"] == "quadratic" and "test_fraction" in written:
        raise ConfigError(f"config key '{key}.test_fraction' has value {json.dumps(exp['test_fraction'])}, "
                          "which is not allowed with dataset \"quadratic\" (its devices hold closed-form "
                          "objectives, no samples to hold out: it does not read it); allowed: no "
                          "test_fraction")
    # as written only: hetfl project scales a validated experiment's rounds beside its settings' own
    for k in ("rounds", "local_epochs", "local_steps") if raw is not None else ():
        if k in raw and all(k in setting for setting in exp["settings"].values()):
            raise ConfigError(f"config key '{key}.{k}' has value {json.dumps(exp[k])}, which is not allowed "
                              f"where every setting sets its own {k} (no run reads it); allowed: {k} in the "
                              "settings only, or a setting without one")
    _check_size_keys(name, exp, raw)
    _check_size_bounds(name, exp)


#: the sizes keys each distribution reads (data.sizes.sample_sizes: every one clips to [min_size, max_size])
SIZE_KEYS = {"equal": ("size", "min_size", "max_size"), "pareto": ("size", "index", "min_size", "max_size"),
             "lognormal": ("size", "sigma", "min_size", "max_size")}


@functools.cache
def _schema_defaults(definition: str) -> dict[str, Any]:
    """The keys of the schema's `definition` that it fills in, and their values (parsed once: load_schema
    per experiment doubled a config's validation, which every Snakemake start runs)."""
    return {k: v["default"] for k, v in load_schema()["$defs"][definition]["properties"].items()
            if "default" in v}


def _train_samples(dataset: str) -> int:
    """The training samples of `dataset` by cluster.SOURCE_SIZES; 0 where it lists none (generated data, a
    source whose size is its prepared copy's), which leaves the count checks against it to the split job."""
    from hetfl.cluster import SOURCE_SIZES

    return SOURCE_SIZES.get(dataset, (0, 0))[0]


def _check_size_bounds(name: str, exp: dict[str, Any]) -> None:
    """sizes beyond what can be dealt are refused (the schema caps every count at 2**53, the largest a float
    draw holds exactly): a size above max_size was clipped to it silently (every device max_size), and on a
    real source of known size a size above its training samples or a min_size above them over the devices
    was shrunk away in the split (data.partition._target_sizes). A memory bound for SYNTHETIC's samples
    would depend on the machine: none is set."""
    sizes, dataset = exp["sizes"], exp["dataset"]
    key = f"config key 'experiments.{name}.sizes"
    if dataset == "quadratic" or (dataset != "synthetic" and sizes["distribution"] == "equal"):
        return  # no sizes read (_check_size_keys): the quadratic bed, a real source's own equal split
    if sizes["size"] > sizes["max_size"]:
        raise ConfigError(f"{key}.size' has value {sizes['size']}, which is not allowed with sizes.max_size "
                          f"{sizes['max_size']} (every count is clipped to the cap, so no device would hold "
                          f"{sizes['size']}); allowed: at most {sizes['max_size']}, or a larger max_size")
    train = _train_samples(dataset)
    if not train:
        return
    if sizes["size"] > train:
        raise ConfigError(f"{key}.size' has value {sizes['size']}, which is not allowed with dataset "
                          f"{dataset}; allowed: at most {train:,} (its training samples)")
    n = exp["num_devices"]
    if train // n < 2 and sizes["min_size"] * n > train:  # "at most 1": below min_size's own floor, 2
        raise ConfigError(f"config key 'experiments.{name}.num_devices' has value {n}, which is not allowed "
                          f"with dataset {dataset} and sizes.distribution \"{sizes['distribution']}\" (every "
                          "device holds at least sizes.min_size samples, and min_size is at least 2); "
                          f"allowed: at most {train // 2:,} ({train:,} training samples over devices of 2)")
    if sizes["min_size"] * n > train:
        raise ConfigError(f"{key}.min_size' has value {sizes['min_size']}, which is not allowed with dataset "
                          f"{dataset} and num_devices {n}; allowed: at most {train // n} ({train:,} training "
                          f"samples over {n} devices)")


def _check_size_keys(name: str, exp: dict[str, Any], raw: dict[str, Any] | None) -> None:
    """A sizes key its distribution does not read is refused: sizes.size beside distribution equal on a real
    source (the partitioner deals the source out itself: data.build), index beside lognormal, and any sizes
    or test_fraction on the quadratic bed passed, and every run recorded them (an audit). As with partition
    keys, a key written at the schema's default is refused too; one validation filled in is not (`raw`, the
    experiment as written: _as_written)."""
    sizes, dataset = exp["sizes"], exp["dataset"]
    written = _written(sizes, raw and raw.get("sizes", {}), "sizes")
    if dataset == "quadratic":
        reads: tuple[str, ...] = ()
        why = "dataset \"quadratic\" (its devices hold closed-form objectives, not samples: "
    elif dataset != "synthetic" and sizes["distribution"] == "equal":
        reads = ("distribution",)
        why = f"dataset \"{dataset}\" and distribution \"equal\" (the partition deals the source out itself: "
    else:
        reads = ("distribution", *SIZE_KEYS[sizes["distribution"]])
        why = f"distribution \"{sizes['distribution']}\" ("
    for k, v in sizes.items():
        if k in reads or k not in written:
            continue
        raise ConfigError(f"config key 'experiments.{name}.sizes.{k}' has value {json.dumps(v)}, which is "
                          f"not allowed with {why}it does not read it); allowed: "
                          + (", ".join(reads) if reads else "no sizes (the defaults)"))


def _check_table_fits(name: str, exp: dict[str, Any]) -> None:
    """A table that reads what only some runs have: objective_inconsistency the quadratic bed's closed
    forms, efl_lambda EFL's λ. Other runs trained, then the table failed (an audit)."""
    key, table = f"experiments.{name}", exp["table"]
    if table == "objective_inconsistency" and exp["dataset"] != "quadratic":
        raise ConfigError(f"config key '{key}.dataset' has value \"{exp['dataset']}\", which is not allowed "
                          f"with table objective_inconsistency (it compares with the quadratic bed's closed "
                          f"forms); allowed: \"quadratic\"")
    given = "algorithms" if "algorithms" in exp else "algorithm"
    value = json.dumps(exp.get(given, "fedavg"))
    algorithms = _algorithms(exp)
    if table == "efl_lambda" and "efl" not in algorithms:
        raise ConfigError(f"config key '{key}.{given}' has value {value}, which is not allowed with table "
                          "efl_lambda (it reads EFL's λ); allowed: efl among the algorithms")
    if table in ONE_ALGORITHM_TABLES and len(algorithms) > 1:
        raise ConfigError(f"config key '{key}.{given}' has value {value}, which is not allowed with table "
                          f"{table} (its cells pair runs by seed and setting, with no method column: two "
                          "algorithms' runs would be merged); allowed: one algorithm (another one in a "
                          "config of its own, run in a directory of its own: docs/adding-an-algorithm.md)")
    if table == "objective_inconsistency":
        from hetfl.reports.fixed_points import ALGORITHMS as CLOSED_FORMS

        if set(algorithms) - set(CLOSED_FORMS):
            raise ConfigError(f"config key '{key}.{given}' has value {value}, which is not allowed with "
                              f"table objective_inconsistency; allowed: those with closed forms, "
                              + ", ".join(CLOSED_FORMS))


def _check_one_algorithm_tables(experiments: dict[str, Any], given: dict[str, set[str]]) -> None:
    """The experiments of a table without a method column (ONE_ALGORITHM_TABLES) run one algorithm with one
    set of hyperparameters: a second experiment with another (a researcher's own algorithm beside the
    grid's FedAvg) trained, then Table 3 refused the runs and Tables 4-5 paired them by seed silently."""
    first: dict[str, tuple[str, str, dict[str, Any]]] = {}
    for name, exp in experiments.items():
        if exp["table"] not in ONE_ALGORITHM_TABLES:
            continue
        algo = _algorithms(exp)[0]  # one: _check_table_fits refuses more
        params = asdict(parse_hyperparameters(algo, exp["algorithm_params"].get(algo)))
        if exp["table"] not in first:
            first[exp["table"]] = (name, algo, params)
            continue
        other, other_algo, other_params = first[exp["table"]]
        if (algo, params) == (other_algo, other_params):
            continue
        mine = given.get(name, set(exp))
        if algo != other_algo:
            key = "algorithms" if "algorithms" in mine else "algorithm"
            value = json.dumps(exp.get(key, "fedavg"))
        else:
            key, value = f"algorithm_params.{algo}", json.dumps(exp["algorithm_params"].get(algo, {}))
        shown = other_algo + (f" {json.dumps(other_params)}" if other_params else "")
        raise ConfigError(
            f"config key 'experiments.{name}.{key}' has value {value}, which is not allowed with table "
            f"{exp['table']} beside experiment {other} ({shown}): the table's cells pair runs by seed and "
            "setting, with no method column, so the two experiments' runs would be merged or refused after "
            f"training; allowed: {shown}, as {other} runs; another algorithm or hyperparameters on this "
            "table in a config of its own, run in a directory of its own (docs/adding-an-algorithm.md), or "
            "in a table with a method column (bmta, communication_cost)")


#: hetfl dataset name -> the paper's dataset label, the tables' dataset column (a reduced stand-in says so
#: in the caption; hetfl.reports.tables)
DATASET_LABELS = {"synthetic": "SYNTHETIC", "mnist5k": "MNIST", "mnist": "MNIST", "emnist-balanced": "EMNIST",
                  "emnist-byclass": "EMNIST", "emnist-letters": "EMNIST-L", "cifar10": "CIFAR10",
                  "cifar100": "CIFAR100", "femnist": "FEMNIST", "digits": "DIGITS", "sent140": "Sent140",
                  "shakespeare": "Shakespeare"}


def dataset_label(dataset: str) -> str:
    """The paper's label of a hetfl data set (DATASET_LABELS; an unlisted one in capitals)."""
    return DATASET_LABELS.get(dataset, str(dataset).upper())


def _label(spec: RunSpec) -> str:
    return dataset_label(spec.dataset)


def _event(spec: RunSpec, key: str) -> Any:
    return (spec.event or {}).get(key)


#: table -> (the tables whose runs it reads as well as its own, its cell's keys and the key telling apart
#: the runs of one seed in a cell, each as a name and a function of a run, and the runs it reads): the
#: report code's grouping (accuracy_difference.CELL, event_tables, bmta.KEYS, efl_lambda.GROUP,
#: fedfor.fedfor_by_e, communication_cost.communication_cost, objective_inconsistency's (τ, setting, η,
#: algorithm)); fairness reads the bmta runs too (reports.tables.SOURCES)
_BY_SEED = ("seed", lambda s: s.seed)
_EVENT = [("dataset", _label), ("setting", lambda s: s.setting), ("τ0", lambda s: _event(s, "round")),
          ("policy", lambda s: _event(s, "policy")), _BY_SEED]
#: bmta and fairness print the method by its display label (bmta.layout keys its rows by it, and reads the
#: paper's value by it): two algorithms of one label were one row of the .md, the later's cells over the
#: earlier's
_EFL = [("method", lambda s: method_label(s.algorithm)), ("dataset", _label),
        ("setting", lambda s: s.setting), ("|T|", lambda s: s.num_traces), ("scheme", lambda s: s.scheme),
        _BY_SEED]
#: FedFOR's Tables 2-4 (fedfor_by_e) and Table 5 (fedfor.concept_shift_table) group alike, the method by
#: its display label (method_label), as the tables do: two algorithms of one label (a plugin registered as
#: "FedAvg" beside fedavg) merged their seeds in one cell
_FEDFOR = [("dataset", lambda s: s.dataset), ("E", lambda s: s.local_epochs),
           ("method", lambda s: method_label(s.algorithm)), _BY_SEED]


def _tau(spec: RunSpec) -> tuple[int, ...]:
    """objective_inconsistency's τ column: the local steps, one per client (1 each where none are given)."""
    return spec.local_steps or (1,) * len((spec.quadratic or {}).get("a") or (1, 1))


TABLE_CELLS: dict[str, tuple[tuple[str, ...], list[tuple[str, Any]], Any]] = {
    "accuracy_difference": ((), [("dataset", _label), ("setting", lambda s: s.setting),
                                 ("|T|", lambda s: s.num_traces), ("scheme", lambda s: s.scheme), _BY_SEED],
                            None),
    "fast_reboot": ((), _EVENT, None),
    "multiple_arrivals": ((), _EVENT, None),
    "crossing_epochs": ((), [*_EVENT[:2], ("alpha", lambda s: s.alpha), ("beta", lambda s: s.beta),
                             *_EVENT[2:]], None),
    "bmta": ((), _EFL, None),
    "fairness": (("bmta",), _EFL, None),
    "efl_lambda": ((), [*_EFL[1:5], ("λ", lambda s: s.algorithm_params.get("lam")), _BY_SEED],
                   lambda s: s.algorithm == "efl"),
    "fedfor_by_e": ((), _FEDFOR, None),
    "fedfor_concept_shift": ((), _FEDFOR, None),
    # a row per data set (the source's name) and setting: two data sets share the table
    "communication_cost": ((), [("dataset", lambda s: s.dataset), ("setting", lambda s: s.setting),
                                ("method", lambda s: communication_label(s.algorithm)), _BY_SEED], None),
    "objective_inconsistency": ((), [("τ", _tau), ("setting", lambda s: s.setting), ("η", lambda s: s.eta0),
                                     ("method", lambda s: s.algorithm), _BY_SEED], None),
}
#: RunSpec fields that name a run, not what it trained
_NAMING = ("experiment", "run", "table")
#: one experiment's grid axes (_grid) as (config key, the run's value on it): two of its runs of one seed
#: differ in these alone, and fall into one cell of a table whose keys none of them tells apart
_AXES = (("algorithms", lambda s: s.algorithm), ("settings", lambda s: s.setting),
         ("num_traces", lambda s: s.num_traces), ("schemes", lambda s: s.scheme),
         ("event.rounds", lambda s: _event(s, "round")), ("event.policies", lambda s: _event(s, "policy")))
_PAIRED = ("pair the two sources' runs seed by seed as one data set's, or show them as rows no reader can "
           "tell apart")
#: tables whose cells group runs by the paper's data set label (DATASET_LABELS), where two sources of one
#: label (mnist and mnist5k are both "MNIST") meet: table -> (the tables whose runs it reads as well as its
#: own, the keys within which two sources must not meet, the runs it reads, what the table would do with
#: them). bmta refuses two sources of a label outright (bmta.bmta). The others key their rows by label and
#: setting, and pair the runs of a row across a key of the cell: fairness's Δ vs FedAvg
#: (bmta.reference_runs), efl_lambda's λ against λ = 0 (efl_lambda.GROUP), Table 3's schemes
#: (accuracy_difference.CELL), the policies of Tables 4-5 and Figure 5 (event_tables, multiple_arrivals);
#: so two sources under one setting name were paired seed by seed silently (mnist's EFL against mnist5k's
#: FedAvg), or, at another |T| or τ0, shown as rows of one data set. Under setting names of their own the
#: rows are apart, and the settings note names each one's source (tables.settings_note).
ONE_SOURCE_PER_LABEL: dict[str, tuple[tuple[str, ...], list[tuple[str, Any]], Any, str]] = {
    "bmta": ((), [("dataset", _label)], None, "refuse the two sources"),
    "fairness": (("bmta",), [("dataset", _label), ("setting", lambda s: s.setting)], None, _PAIRED),
    "efl_lambda": ((), [("dataset", _label), ("setting", lambda s: s.setting)],
                   lambda s: s.algorithm == "efl", _PAIRED),
    **{table: ((), [("dataset", _label), ("setting", lambda s: s.setting)], None, _PAIRED)
       for table in ONE_ALGORITHM_TABLES},  # Ruan et al.'s Tables 3-5 and Figure 5's
}


def spec_differences(a: Any, b: Any, names: tuple[str, str] | None = None) -> str:
    """'eta0 (0.05 in A, 0.1 in B)' for the fields two runs differ in (names aside), at most three; A and B
    are the runs' experiments unless `names` are given (the builder's guard: 'the first', 'the second')."""
    da, db = a.to_dict(), b.to_dict()
    first, second = names or (a.experiment, b.experiment)
    keys = [k for k in dict.fromkeys([*da, *db]) if k not in _NAMING and da.get(k) != db.get(k)]
    shown = [f"{k} ({json.dumps(da.get(k), default=str)} in {first}, {json.dumps(db.get(k), default=str)} "
             f"in {second})" for k in keys[:3]]
    more = f" and {len(keys) - 3} more" if len(keys) > 3 else ""
    if shown:
        return ", ".join(shown) + more
    named = any(da.get(k) != db.get(k) for k in _NAMING)
    return "nothing but their names" if named else "nothing: one run in two directories"


def _hashable(value: Any) -> Any:
    """A key's value as a dict key (a run.json's spec has lists where a RunSpec has tuples)."""
    if isinstance(value, list | tuple):
        return tuple(_hashable(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    return value


def _cell(keys: list[tuple[str, Any]], spec: Any) -> tuple[Any, ...]:
    return tuple(_hashable(f(spec)) for _, f in keys)


def cell_text(keys: list[tuple[str, Any]], cell: tuple[Any, ...]) -> str:
    """'dataset MNIST, setting NIID, seed 0': a cell of a table as its messages name it."""
    return ", ".join(f"{k} {v:g}" if isinstance(v, float) else f"{k} {v}"
                     for (k, _), v in zip(keys, cell, strict=True))


def source_clash(table: str, specs: Iterable[Any]) -> tuple[Any, Any] | None:
    """The first two of `specs` from two sources that `table` groups under one paper label within its keys
    (ONE_SOURCE_PER_LABEL), among the runs it reads; None where there are none, or the table does not group
    by label. `specs`: RunSpecs (validation) or anything with their fields (the builder's guard,
    reports.tables.check_runs): one function for both, so that they cannot drift apart."""
    if table not in ONE_SOURCE_PER_LABEL:
        return None
    _, keys, reads, _ = ONE_SOURCE_PER_LABEL[table]
    first: dict[tuple[Any, ...], Any] = {}
    for spec in specs:
        if reads is not None and not reads(spec):
            continue
        other = first.setdefault(_cell(keys, spec), spec)
        if other.dataset != spec.dataset:
            return other, spec
    return None


def cell_clash(table: str, specs: Iterable[Any]) -> tuple[Any, Any, str] | None:
    """The first two of `specs` that fall into one cell of `table` (TABLE_CELLS), among the runs it reads,
    with the cell as text; None where every run has a cell of its own. `specs` as for source_clash."""
    _, keys, reads = TABLE_CELLS[table]
    seen: dict[tuple[Any, ...], Any] = {}
    for spec in specs:
        if reads is not None and not reads(spec):
            continue
        cell = _cell(keys, spec)
        other = seen.setdefault(cell, spec)
        if other is not spec:
            return other, spec, cell_text(keys, cell)
    return None


def _config_value(exp: dict[str, Any], key: str) -> str:
    """The experiment's value under a dotted key, as JSON (event.rounds -> [5, 10])."""
    value: Any = exp
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return json.dumps(list(value) if isinstance(value, dict) else value, default=str)


def _refuse_within(exp: dict[str, Any], table: str, keys: list[tuple[str, Any]], where: str, a: RunSpec,
                   b: RunSpec) -> None:
    """Two runs of one experiment's grid in one cell of `table`: name the grid axis that parts them."""
    axes = [(key, f(a), f(b)) for key, f in _AXES if f(a) != f(b)]  # one at least: unique lists
    key = axes[0][0]
    parted = ", ".join(f"{k} ({json.dumps(x, default=str)} and {json.dumps(y, default=str)})"
                       for k, x, y in axes)
    raise ConfigError(
        f"config key 'experiments.{a.experiment}.{key}' has value {_config_value(exp, key)}, which is not "
        f"allowed with table {table}: its runs {a.run} and {b.run} put seed {a.seed} into one cell "
        f"({where}), which the table pairs seed by seed, one run each, and would refuse or merge after every "
        f"run trained; the two differ in {parted}, and the table has no column for that; allowed: one value "
        f"of {key} (or values whose runs differ in the cell's keys: {', '.join(k for k, _ in keys)}); "
        f"another in a config of its own, run in a directory of its own (docs/adding-an-algorithm.md)")


def _check_one_source_per_label(specs: list[RunSpec]) -> None:
    """Two sources of one paper label where a table's cells group runs by that label (ONE_SOURCE_PER_LABEL):
    bmta refused them after every run trained; the others paired them seed by seed silently."""
    for table, (sources, keys, _, does) in ONE_SOURCE_PER_LABEL.items():
        if not any(s.table == table for s in specs):
            continue
        clash = source_clash(table, [s for s in specs if s.table in (table, *sources)])
        if clash is None:
            continue
        other, spec = clash
        label = _label(spec)
        setting = len(keys) > 1
        raise ConfigError(
            f"config key 'experiments.{spec.experiment}.dataset' has value \"{spec.dataset}\", which is "
            f"not allowed beside experiment {other.experiment} (dataset \"{other.dataset}\") on table "
            f"{table}: both are the paper's {label}"
            + (f" under setting {spec.setting}" if setting else "")
            + ", and the table's cells group runs by that label"
            + (" and setting" if setting else "")
            + f", so it would {does} after every run trained; allowed: \"{other.dataset}\", as "
            f"{other.experiment} has, or a source of another label"
            + (" or a setting name of its own (rows of its own, the caption naming each source)"
               if setting else "")
            + "; the other source in a config of its own, run in a directory of its own")


def _check_table_cells(config: dict[str, Any]) -> None:
    """Two runs of one seed that fall into one cell of a table: the table job refused them (Tables 3-5,
    bmta, fairness) or merged them silently (efl_lambda, fedfor_by_e, communication_cost,
    objective_inconsistency) after every run trained. From two experiments, e.g. two FedAvg experiments on
    Table 4 with the same setting and τ0 and another step size; from one experiment's grid, e.g. a Table 4
    experiment with two schemes or two |T| (the table has no column for either). The readings variants are
    not in `_grid`: they have tables of their own (<table>_readings), a column per reading."""
    specs = [s for name, exp in config["experiments"].items() for s in _grid(name, exp)]
    _check_one_source_per_label(specs)
    for table, (sources, keys, _) in TABLE_CELLS.items():
        if not any(s.table == table for s in specs):
            continue
        clash = cell_clash(table, [s for s in specs if s.table in (table, *sources)])
        if clash is None:
            continue
        other, spec, where = clash
        if other.experiment == spec.experiment:
            _refuse_within(config["experiments"][spec.experiment], table, keys, where, other, spec)
        raise ConfigError(
            f"config key 'experiments.{spec.experiment}' is not allowed beside experiment "
            f"{other.experiment} on table {table}: both put a run into its cell ({where}), which the "
            f"table pairs seed by seed, one run each, and would refuse or merge after every run trained; "
            f"the two differ in {spec_differences(other, spec)}, and the table has no column for that; "
            f"allowed: experiments whose runs differ in the cell's keys "
            f"({', '.join(k for k, _ in keys)}); one that differs only in another key in a config of "
            "its own, run in a directory of its own (docs/adding-an-algorithm.md)")


#: per-class training counts of the registered sources whose counts are published, known without loading
#: them: the offline sources (data.sources: digits' and mnist5k's fixed stratified 80/20 split; tests check
#: them against the sources), MNIST's training set (LeCun et al.'s distribution: 5,421 fives to 6,742
#: ones), CIFAR-10's and CIFAR-100's (Krizhevsky 2009: 5,000 and 500 images a class) and EMNIST Balanced's
#: and Letters' (Cohen et al. 2017: 2,400 and 4,800 a class). EMNIST ByClass, FEMNIST and the
#: text sources are uneven or natural: their split job reports a class running out.
CLASS_COUNTS: dict[str, tuple[int, ...]] = {
    "digits": (142, 146, 142, 146, 145, 146, 145, 143, 139, 144),
    "mnist5k": (400,) * 10,
    "mnist": (5_923, 6_742, 5_958, 6_131, 5_842, 5_421, 5_918, 6_265, 5_851, 5_949),
    "cifar10": (5_000,) * 10,
    "cifar100": (500,) * 100,
    "emnist-balanced": (2_400,) * 47,
    "emnist-letters": (4_800,) * 26,
}


def _longtail_ranks(counts: tuple[int, ...], part: dict[str, Any]) -> np.ndarray:
    """A device's samples of its classes by rank, as data.partition._longtail deals them without a size
    skew: int(h · ρ^(r/(C−1))) with head h = floor(client_fraction · n / C)."""
    from hetfl.data.partition import longtail_profile

    n, n_classes = sum(counts), len(counts)
    head = math.floor(part.get("client_fraction", 0.1) * n / n_classes + 1e-9)  # 1e-9: as _longtail
    return (head * longtail_profile(n_classes, part.get("imbalance_ratio", 0.01))).astype(int)


def _longtail_disjoint_fits(counts: tuple[int, ...], n_devices: int, part: dict[str, Any]) -> int | None:
    """None when longtail's disjoint draw (no size skew) may deal n_devices from classes of these counts;
    else the most devices it may deal. data.partition._longtail gives every device the same counts, one
    rank per class; a block of C devices takes every class once at every rank, so B full blocks take
    B · (the device's total) of every class, and a partial block of k takes k distinct ranks of each. The
    smallest class then gives at least the k smallest counts: beyond that it certainly runs out. Between
    that and the k largest counts it runs out for some seeds only (the class order is drawn), which the
    split job reports, naming the class and the device. A tail of 0 samples is _check_longtail_tail's."""
    n_classes = len(counts)
    low = sorted(int(c) for c in _longtail_ranks(counts, part))

    def fits(devices: int) -> bool:
        blocks, k = divmod(devices, n_classes)
        return blocks * sum(low) + sum(low[:k]) <= min(counts)

    if fits(n_devices):
        return None
    return max((d for d in range(1, n_devices) if fits(d)), default=0)


def _check_longtail_tail(key: str, source: str, part: dict[str, Any]) -> None:
    """longtail without a size skew gives every device int(h·ρ) samples of its tail class, h =
    floor(client_fraction · n / C) (data.partition._longtail): where that is 0 the split job failed ("its
    tail ... rounds to 0"), so on a source of known class counts it is refused first. mnist5k at the default
    client_fraction 0.1: h = 40, 40 · 0.01 = 0.4; 0.25 gives h = 100 and a tail of 1."""
    counts = CLASS_COUNTS[source]
    n, n_classes = sum(counts), len(counts)
    fraction, ratio = part.get("client_fraction", 0.1), part.get("imbalance_ratio", 0.01)
    per = _longtail_ranks(counts, part)
    if per[-1] >= 1:
        return
    head, tail = int(per[0]), ratio  # the profile's ends: ρ^0 = 1 and ρ^1 = ρ
    need = math.ceil(1 / tail - 1e-9)  # the smallest head whose tail is a sample
    need += int(need * tail) < 1  # 1/ρ rounded to a head the float product still takes to 1
    least = math.ceil(need * n_classes / n * 1e4) / 1e4  # rounded up: the floor above then reaches need

    def ratio_for(h: int) -> float:  # the smallest ρ, rounded up, that gives a head of h a tail of 1
        r = math.ceil(1e4 / h) / 1e4
        return r if int(h * r) >= 1 else r + 1e-4

    if least <= 1:
        fix = f"client_fraction {least:g} or more, or a larger imbalance_ratio"
    elif head >= 1:
        fix = (f"imbalance_ratio {ratio_for(head):g} or more at this client_fraction (at client_fraction 1, "
               "its largest, the tail would still round to 0)")
    else:  # not one sample of the head class: only the largest client_fraction leaves a ratio that works
        fix = f"client_fraction 1 with imbalance_ratio {ratio_for(n // n_classes):g} or more"
    raise ConfigError(f"config key '{key}.client_fraction' has value {fraction}, which is not allowed with "
                      f"dataset {source} and imbalance_ratio {ratio}: a device's head class holds {head} "
                      f"samples, so its tail class rounds to 0; allowed: {fix}")


def _check_source_fits(name: str, exp: dict[str, Any]) -> None:
    """What a registered real source's size refuses in the split job, refused first: a pathological m above
    its classes, more devices than its training samples (an audit found both passing validation)."""
    from hetfl.data.sources import SOURCES

    info = SOURCES.get(exp["dataset"])
    if info is None:
        return
    key = f"experiments.{name}"
    for label, setting in exp["settings"].items():
        part = setting.get("partition") or {}
        if part.get("label_skew") != "pathological":
            continue
        m = part.get("m", 2)
        if m > info.num_classes:
            raise ConfigError(f"config key '{key}.settings.{label}.partition.m' has value {m}, which is "
                              f"not allowed with dataset {info.name}; allowed: 1..{info.num_classes} (its "
                              "classes)")
        # cyclic: the num_devices · m classes dealt must reach every class, or data.partition refuses to
        # lose the rest; checked where the classes present are known (CLASS_COUNTS)
        classes = len(CLASS_COUNTS.get(info.name, ()))
        if part.get("label_choice", "cyclic") == "cyclic" and exp["num_devices"] * m < classes:
            raise ConfigError(f"config key '{key}.settings.{label}.partition.m' has value {m}, which is "
                              f"not allowed with num_devices {exp['num_devices']} on dataset {info.name} "
                              f"({classes} classes): cyclic classes reach every class only when num_devices "
                              f"x m >= {classes}, and the split would lose the samples of the others; "
                              f"allowed: m >= {-(-classes // exp['num_devices'])}, more devices, or "
                              "label_choice \"random\" (Ruan et al.), which drops the classes nobody draws")
    train = _train_samples(info.name)
    natural = any((s.get("partition") or {}).get("label_skew") == "natural" for s in exp["settings"].values())
    if train and not natural and exp["num_devices"] > train:
        raise ConfigError(f"config key '{key}.num_devices' has value {exp['num_devices']}, which is not "
                          f"allowed with dataset {info.name}; allowed: at most {train:,} (its training "
                          "samples)")
    n = exp["num_devices"]
    for label, setting in exp["settings"].items() if train else ():
        # what data.partition refuses by count alone: a shard a sample at least; dirichlet's redraw (no size
        # skew) needs min_size samples on every device (both passed, then the split job failed: an audit)
        part = setting.get("partition") or {}
        option = {"shards": "shards_per_client", "dirichlet": "min_size"}.get(part.get("label_skew"))
        if option == "min_size" and exp["sizes"]["distribution"] != "equal":
            continue  # FedDyn's split of the size skew: min_size is not read
        # a source without published counts (CLASS_COUNTS) is known only once loaded: its split job reports
        # a tail of 0 or a class running out (data.partition._longtail, naming the class and the device)
        longtail = (part.get("label_skew") == "longtail" and exp["sizes"]["distribution"] == "equal"
                    and info.name in CLASS_COUNTS)
        if longtail:
            _check_longtail_tail(f"{key}.settings.{label}.partition", info.name, part)
        if longtail and part.get("draw", "disjoint") == "disjoint":
            most = _longtail_disjoint_fits(CLASS_COUNTS[info.name], n, part)
            if most is not None:
                # fewer than 2 fit: num_devices is at least 2, so "at most 0 devices" was no way out
                fewer = f"at most {most} devices, or " if most >= 2 else ""
                raise ConfigError(
                    f"config key '{key}.num_devices' has value {n}, which is not allowed with dataset "
                    f"{info.name} and setting {label}'s partition (label_skew \"longtail\", draw "
                    f"\"disjoint\", client_fraction {part.get('client_fraction', 0.1)}, imbalance_ratio "
                    f"{part.get('imbalance_ratio', 0.01)}): every sample is dealt once, and its smallest "
                    f"class ({min(CLASS_COUNTS[info.name])} training samples) runs out; allowed: "
                    f"{fewer}draw \"independent\" or a smaller client_fraction")
        if option is not None and part[option] * n > train:
            raise ConfigError(f"config key '{key}.settings.{label}.partition.{option}' has value "
                              f"{part[option]}, which is not allowed with dataset {info.name} and "
                              f"num_devices {n}; allowed: at most {train // n} ({train:,} training samples "
                              f"over {n} devices)")


def _check_no_holdout(name: str, exp: dict[str, Any]) -> None:
    """test_fraction 0 (no local holdout) leaves the source's own test split the only accuracy a run records:
    allowed where a table reports that and nothing else (FedFOR's, under validation_accuracy test_split).
    The per-device metrics (test_accuracy, test_loss, mean_client_accuracy) need a holdout."""
    from hetfl.data.sources import SOURCES

    if exp["test_fraction"] != 0:
        return
    key = (f"config key 'experiments.{name}.test_fraction' has value 0 (no local holdout), which is not "
           "allowed")
    info = SOURCES.get(exp["dataset"])
    if info is None or "test" not in info.hub_splits:
        raise ConfigError(f"{key} with dataset \"{exp['dataset']}\" (it has no test split of its own, so the "
                          "runs would score no accuracy at all); allowed: a test_fraction in (0, 1), or 0 "
                          "with a real source that has a test split")
    if not exp["global_test"]:
        raise ConfigError(f"{key} with global_test false (the runs would score no accuracy at all); allowed: "
                          "a test_fraction in (0, 1), or 0 with global_test true")
    if exp["table"] not in VALIDATION_TABLES:
        raise ConfigError(f"{key} with table {exp['table']} (it reads the local holdouts' accuracy or loss, "
                          "which a run without a holdout does not record); allowed: a test_fraction in (0, "
                          "1), or 0 with table " + " or ".join(VALIDATION_TABLES)
                          + " under validation_accuracy \"test_split\"")
    how = exp.get("validation_accuracy", "test_split")
    if how != "test_split":
        raise ConfigError(f"{key} with validation_accuracy \"{how}\" (it reads the local holdouts' accuracy, "
                          "mean_client_accuracy, which a run without a holdout does not record); allowed: a "
                          "test_fraction in (0, 1), or 0 with validation_accuracy \"test_split\"")
    rest = [label for label, setting in exp["settings"].items()
            if ((setting.get("partition") or {}).get("equal_counts_holdout")) == "rest"]
    rest_readings = "rest" in (exp.get("readings") or {}).get("equal_counts_holdout", [])
    if rest or rest_readings:
        where = f"settings.{rest[0]}.partition" if rest else "readings"
        raise ConfigError(f"{key} with experiments.{name}.{where}.equal_counts_holdout \"rest\" (its "
                          "local test part is test_fraction's share); allowed: a test_fraction in (0, 1) "
                          "with \"rest\", or 0 with \"kept\"")


def _check_test_fraction(name: str, exp: dict[str, Any]) -> None:
    """A SYNTHETIC device of the fewest samples its sizes allow must keep a training sample after its
    holdout (data.synthetic.holdout_split: n_test = max(1, round(test_fraction·n))); test_fraction 0.99
    passed validation, then every split job failed. The fewest is the floor min_size, or for equal and
    pareto sizes the larger of size and min_size (data.sizes: every count is clipped to the floor)."""
    if exp["dataset"] != "synthetic":
        return  # a real dataset's device sizes are known only once it is dealt
    sizes, tf = exp["sizes"], exp["test_fraction"]
    low = max(sizes["size"], sizes["min_size"]) if sizes["distribution"] in ("equal", "pareto") \
        else sizes["min_size"]
    high = max(low, min(sizes["max_size"], low + 1000))
    short = next((n for n in range(low, high + 1) if n - max(1, round(tf * n)) < 1), None)
    if short is None:
        return
    # tf·n ≤ n − 1.5 keeps a training sample, and 1 − 1.5/n grows with n: the fewest samples (the schema's
    # min_size ≥ 2) bound it. Shown to 3 decimals, or as many more as keep it a fraction that leaves one:
    # 3 rounded 1 − 1.5/10000 up to 1.000, which test_fraction < 1 refuses
    bound = (low - 1.5) / low
    shown = next((t for t in (f"{bound:.{d}f}" for d in range(3, 18))
                  if low - max(1, round(float(t) * low)) >= 1), repr(bound))
    raise ConfigError(f"config key 'experiments.{name}.test_fraction' has value {tf}, which is not allowed "
                      f"with sizes as given (a device of {short} samples would keep no training sample); "
                      f"allowed: a fraction that leaves one, e.g. <= {shown} for {low}")


def _domains_allowed(dataset: str, partition: dict[str, Any] | None, global_test: bool) -> bool:
    """global_test_average "domains" needs a source with a client (domain) column, a natural split and the
    global test set."""
    from hetfl.data.sources import SOURCES

    info = SOURCES.get(dataset)
    return (bool(global_test) and info is not None and info.client_column is not None
            and (partition or {}).get("label_skew") == "natural")


def _check_global_test_average(name: str, exp: dict[str, Any]) -> None:
    if exp["global_test_average"] == "pooled":
        return
    for label, setting in exp["settings"].items():
        if not _domains_allowed(exp["dataset"], setting.get("partition"), exp["global_test"]):
            raise ConfigError(
                f"config key 'experiments.{name}.global_test_average' has value "
                f"\"{exp['global_test_average']}\", which is not allowed with dataset \"{exp['dataset']}\", "
                f"global_test {str(bool(exp['global_test'])).lower()} and setting {label}'s partition "
                f"{setting.get('partition')}; allowed: \"pooled\", or \"domains\" only for a source with a "
                "domain column (domainnet, digit5, ...), label_skew \"natural\" and global_test true")


#: the options of a natural split with equal_counts (data.partition.PartitionSpec): their defaults, and what
#: a value other than the default is
_NATURAL_EQUAL_COUNTS = {
    "equal_counts_fraction": (1, "a share of the smallest domain's count"),
    "equal_counts_pick": ("random", "\"first\""),
    "equal_counts_holdout": ("kept", "\"rest\""),
}


def _check_rest_holdout(key: str, dataset: str, part: dict[str, Any]) -> None:
    """equal_counts_holdout "rest" holds out what the trim leaves: with equal_counts_fraction 1 the smallest
    domain keeps everything, and a temporal holdout (Shakespeare) keeps each device's last samples."""
    from hetfl.data.build import default_holdout

    if part.get("equal_counts_fraction", 1) == 1:
        raise ConfigError(f"config key '{key}' has value \"rest\", which is not allowed with "
                          "equal_counts_fraction 1 (the smallest domain keeps all of its samples and has "
                          "none left to hold out); allowed: \"rest\" with equal_counts_fraction below 1, or "
                          "\"kept\"")
    if default_holdout(dataset) == "temporal":
        raise ConfigError(f"config key '{key}' has value \"rest\", which is not allowed with dataset "
                          f"\"{dataset}\" (its local test part is each device's last samples); allowed: "
                          "\"kept\"")


def _check_equal_counts(name: str, exp: dict[str, Any]) -> None:
    """partition.equal_counts trims an iid, pathological or natural split with no size skew
    (data.partition)."""
    from hetfl.data.partition import EQUAL_COUNT_SKEWS

    for label, setting in exp["settings"].items():
        part = setting.get("partition")
        key = f"experiments.{name}.settings.{label}.partition"
        for option, (default, what) in _NATURAL_EQUAL_COUNTS.items():
            if isinstance(part, dict) and part.get(option, default) != default and not (
                    part.get("label_skew") == "natural" and part.get("equal_counts")):
                raise ConfigError(f"config key '{key}.{option}' has value {json.dumps(part[option])}, which "
                                  f"is not allowed with label_skew \"{part.get('label_skew')}\" and "
                                  f"equal_counts {str(bool(part.get('equal_counts'))).lower()}; allowed: "
                                  f"{what} only with label_skew \"natural\" and equal_counts true")
        if not isinstance(part, dict) or not part.get("equal_counts"):
            continue
        if part.get("equal_counts_holdout") == "rest":
            _check_rest_holdout(f"{key}.equal_counts_holdout", exp["dataset"], part)
        if part.get("label_skew") not in EQUAL_COUNT_SKEWS:
            raise ConfigError(f"config key '{key}.equal_counts' has value true, which is not allowed with "
                              f"label_skew \"{part.get('label_skew')}\"; allowed: true only with label_skew "
                              + " or ".join(f'"{k}"' for k in EQUAL_COUNT_SKEWS))
        if exp["sizes"]["distribution"] != "equal":
            raise ConfigError(f"config key '{key}.equal_counts' has value true, which is not allowed with "
                              f"experiments.{name}.sizes.distribution \"{exp['sizes']['distribution']}\" (a "
                              f"size skew); allowed: true only with sizes.distribution \"equal\"")


#: partition keys a label skew reads only without a size skew (data.partition: with one, FedDyn's Dirichlet
#: split takes the redraw's place, and longtail's drawn sizes give its head counts)
_SIZE_SKEW_UNREAD = (("dirichlet", "min_size"), ("longtail", "client_fraction"))


def _check_partition_keys(name: str, exp: dict[str, Any], raw: dict[str, Any] | None) -> None:
    """A partition key its label skew does not read is refused: m beside label_skew dirichlet, alpha beside
    pathological, shards_per_client beside iid passed, the split ignored them and every run recorded them
    (an audit). The keys each skew reads are data.partition.SKEW_KEYS (the split figures' captions show the
    same); dirichlet's min_size is read only without a size skew (with one, FedDyn's split takes the redraw's
    place), natural's equal_counts_* only with equal_counts.
    A key written at the schema's default (m: 2 beside dirichlet) is refused too; validation fills those
    (alpha 0.5, m 2, shards_per_client 2, imbalance_ratio 0.01, min_size 10) into every partition, and
    those are not (`raw`, the experiment as written: _as_written)."""
    from hetfl.data.partition import SKEW_KEYS

    skewed = exp["sizes"]["distribution"] != "equal"  # data.build: "equal" is the partitioner's own split
    for label, setting in exp["settings"].items():
        part = setting.get("partition")
        if not isinstance(part, dict) or part.get("label_skew") not in SKEW_KEYS:
            continue
        skew = part["label_skew"]
        written = _written(part, raw and raw["settings"][label]["partition"], "partition")
        reads = [k for k in SKEW_KEYS[skew] if not (skewed and (skew, k) in _SIZE_SKEW_UNREAD)
                 and not (k.startswith("equal_counts_") and not part.get("equal_counts"))]
        for k, v in part.items():
            if k == "label_skew" or k in reads or k not in written:
                continue
            if (skew, k) in _SIZE_SKEW_UNREAD:
                why = (f"label_skew \"{skew}\" and experiments.{name}.sizes.distribution "
                       f"\"{exp['sizes']['distribution']}\" (a size skew: it does not read it)")
            elif k in SKEW_KEYS[skew]:
                why = f"label_skew \"{skew}\" and equal_counts false (it does not read it)"
            else:
                why = f"label_skew \"{skew}\" (it does not read it)"
            raise ConfigError(f"config key 'experiments.{name}.settings.{label}.partition.{k}' has value "
                              f"{json.dumps(v)}, which is not allowed with {why}; allowed: "
                              + (", ".join(reads) or "none besides label_skew"))


# names beside the experiments' directories: results/mlflow.db, results/mlartifacts, data_splits/traces
RESERVED_NAMES = ("mlflow.db", "mlartifacts", "traces")


def _check_names(names: Iterable[str]) -> None:
    """An experiment's name is a directory under results/ and data_splits/ and, with every character
    outside [A-Za-z0-9_] made '_', part of its Snakemake rule names (workflow/rules/train.smk)."""
    import re

    seen: dict[str, str] = {}
    for name in names:
        if name in RESERVED_NAMES:
            raise ConfigError(f"config key 'experiments.{name}' is not allowed: the name is taken by hetfl's "
                              f"own files; allowed: any other name (not {', '.join(RESERVED_NAMES)})")
        rule = re.sub(r"[^A-Za-z0-9_]", "_", name)
        if rule in seen:
            raise ConfigError(f"config key 'experiments.{name}' is not allowed beside "
                              f"'experiments.{seen[rule]}': both make the Snakemake rule train_{rule}; "
                              "allowed: names that differ in more than '.' and '-' against '_'")
        seen[rule] = name
        if len(f"{name}{_LONGEST_EXPERIMENT_SUFFIX}".encode()) > NAME_MAX:
            raise ConfigError(f"config key 'experiments.{_shown(name)}' has a name of {len(name.encode())} "
                              f"bytes, which is not allowed; allowed: at most "
                              f"{NAME_MAX - len(_LONGEST_EXPERIMENT_SUFFIX)} bytes (a file name holds "
                              f"{NAME_MAX}, and the experiment's split figure is <name>"
                              f"{_LONGEST_EXPERIMENT_SUFFIX})")


#: the bytes a file name holds (NAME_MAX on Linux and macOS); hetfl's longest names are an experiment's split
#: figure caption (reports/figures/splits/<experiment>.caption.html) and a run's log (<run>.log)
NAME_MAX = 255
_LONGEST_EXPERIMENT_SUFFIX = ".caption.html"
_RUN_LOG_SUFFIX = ".log"


def _shown(name: str) -> str:
    """A name as a message shows it: a long one cut to its first 40 characters."""
    return name if len(name) <= 48 else f"{name[:40]}…"


def _check_trace_name(spec: RunSpec) -> None:
    """A trace file's name writes p_inactive in every digit (_positional): 5e-324 named a file of 346 bytes,
    which its trace job could not write, after validation passed."""
    trace = f"{Path(spec.trace_key).name}.npz"  # and .csv and .log beside it: no longer
    if len(trace.encode()) <= NAME_MAX:
        return
    digits = len(_positional(spec.p_inactive))
    key = "readings.p_inactive" if spec.reading.startswith("p_inactive=") else "p_inactive"
    size = len(trace.encode())
    raise ConfigError(f"config key 'experiments.{spec.experiment}.{key}' has value {spec.p_inactive!r}, "
                      f"which is not allowed: its trace file name ({_shown(trace)}) writes it in {digits} "
                      f"characters and is {size} bytes; allowed: a p_inactive written in at most "
                      f"{digits - (size - NAME_MAX)} characters (a file name holds {NAME_MAX} bytes)")


def _check_run_names(config: dict[str, Any]) -> None:
    """Two runs of one name share a results directory: readings eta0 [0.1, 0.1000001] named both variants
    ...__eta0-0.1 (_format_value's 6 significant digits), and the training job trained both into it, the
    second over the first (an audit)."""
    seen: dict[str, RunSpec] = {}
    for spec in expand_runs(config):
        if len(f"{spec.run}{_RUN_LOG_SUFFIX}".encode()) > NAME_MAX:  # it trained, then its directory failed
            raise ConfigError(f"config key 'experiments.{spec.experiment}.settings.{_shown(spec.setting)}' "
                              f"names run {_shown(spec.run)} of {len(spec.run.encode())} bytes, which is "
                              f"not allowed; allowed: run names of at most {NAME_MAX - len(_RUN_LOG_SUFFIX)} "
                              f"bytes (a file name holds {NAME_MAX}, and the run's log is "
                              f"<run>{_RUN_LOG_SUFFIX}): a shorter setting name")
        _check_trace_name(spec)
        other = seen.setdefault(f"{spec.experiment}/{spec.run}", spec)
        if other is spec:
            continue
        key = spec.reading.split("=", 1)[0] or "readings"
        mine, theirs = (getattr(s, key, (s.partition or {}).get(key, s.reading)) for s in (spec, other))
        raise ConfigError(f"config key 'experiments.{spec.experiment}.readings.{key}' has value "
                          f"{json.dumps(mine, default=str)}, which is not allowed beside "
                          f"{json.dumps(theirs, default=str)}: both name a run {spec.run} (a run name shows "
                          "a number to 6 significant digits), and the second would be trained over the "
                          "first; allowed: values that differ within their first 6 significant digits")


def _check_semantics(config: dict[str, Any], given: dict[str, set[str]] | None = None,
                     written: dict[str, dict[str, Any] | None] | None = None) -> None:
    """Rules JSON Schema cannot express; `written`: _as_written's experiments (none: all taken as filled)."""
    _check_names(config["experiments"])
    for name, exp in config["experiments"].items():
        raw = (written or {}).get(name)
        _check_event(name, exp)
        _check_algorithms(name, exp, (given or {}).get(name, set(exp)))
        _check_schemes(name, exp)
        _check_text(name, exp, (given or {}).get(name, set(exp)))
        _check_quadratic(name, exp, (given or {}).get(name, set(exp)))
        _check_setting_keys(name, exp, raw)
        _check_inputs(name, exp)
        _check_model_params(name, exp)
        _check_eval_every(name, exp)
        n_order = len(exp["trace_order"])
        for k in exp["num_traces"]:
            if k > n_order:
                raise ConfigError(
                    f"config key 'experiments.{name}.num_traces' has value {k}, which is not allowed; "
                    f"allowed: 1..{n_order} (the length of trace_order)"
                )
        k = exp.get("clients_per_round")
        if k is not None and k > exp["num_devices"]:
            raise ConfigError(f"config key 'experiments.{name}.clients_per_round' has value {k}, which is "
                              f"not allowed; allowed: 1..{exp['num_devices']} (num_devices)")
        sizes = exp["sizes"]
        if sizes["max_size"] < sizes["min_size"]:
            raise ConfigError(
                f"config key 'experiments.{name}.sizes.max_size' has value {sizes['max_size']}, which is "
                f"not allowed; allowed: >= sizes.min_size ({sizes['min_size']})"
            )
        _check_synthetic_iid(name, exp)
        _check_equal_counts(name, exp)
        _check_partition_keys(name, exp, raw)
        _check_global_test_average(name, exp)
        _check_validation_accuracy(name, exp)
        _check_experiment_keys(name, exp, raw)
        _check_no_holdout(name, exp)
        _check_test_fraction(name, exp)
        _check_table_fits(name, exp)
        _check_source_fits(name, exp)
        _check_traces(name, exp)
        _check_readings(name, exp)
    _check_one_algorithm_tables(config["experiments"], given or {})
    _check_table_cells(config)
    _check_run_names(config)


def _yaml_problem(err: yaml.YAMLError) -> str:
    """What the parser found and where (1-based): 'found character ... at line 2, column 1'."""
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    what = getattr(err, "problem", None) or str(err).splitlines()[0]
    context = getattr(err, "context", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
    return f"{what}{where}" + (f" ({context})" if context else "")


class _UniqueKeyLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (YAML keeps the last one silently:
    two `rounds:` lines ran the second, with no word)."""


def _unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[str, int] = {}
    for key_node, _ in node.value:
        if not isinstance(key_node, yaml.ScalarNode) or key_node.tag == "tag:yaml.org,2002:merge":
            continue
        line = key_node.start_mark.line + 1
        if key_node.value in seen:
            raise ConfigError(f"config key '{key_node.value}' is given twice in one mapping (lines "
                              f"{seen[key_node.value]} and {line}), which is not allowed; allowed: each key "
                              "once (YAML would keep the last one without a word)")
        seen[key_node.value] = line
    return loader.construct_mapping(node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


def read_config_file(path: str | Path) -> Any:
    """A config file's YAML, each key once (ConfigError naming the file otherwise)."""
    path = Path(path)
    try:
        return yaml.load(path.read_text(), Loader=_UniqueKeyLoader)  # noqa: S506 (a SafeLoader)
    except ConfigError as err:
        raise ConfigError(f"config file {path}: {err}") from None


def load_config(path: str | Path) -> dict[str, Any]:
    """Read a YAML config file and validate it."""
    path = Path(path)
    try:
        raw = read_config_file(path)
    except FileNotFoundError:
        raise ConfigError(f"config file {path} does not exist") from None
    except yaml.YAMLError as err:
        raise ConfigError(f"config file {path} is not valid YAML: {_yaml_problem(err)}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level")
    return validate_config(raw)


def _split_made(split_npz: Path, spec: RunSpec) -> bool:
    """Whether the split at `split_npz` is there and made for `spec`'s data: its manifest.json says so, read
    as the training job's hetfl.data.build.check_split reads it. Otherwise its data is read again: a missing
    split.npz or manifest.json is made again (Snakemake makes a job's missing output), and one made for other
    data is made again too (the split rule's `spec` param changed) or, where Snakemake has no record of it (a
    split copied from elsewhere), refused by the training job until it is. One whose code fingerprint alone
    changed (the rule's `code` param) counts as made: its manifest does not record the fingerprint, and
    whether Snakemake makes it again depends on its own record (.snakemake/, absent for a copied split);
    the workflow's onstart, which asks Snakemake's plan, checks that one (docs/datasets.md)."""
    from hetfl.data.build import check_split

    if not split_npz.is_file():
        return False
    try:
        check_split(split_npz, spec.split_spec(), spec.seed)
    except (ValueError, OSError):  # no manifest, one for other data, one that is not JSON
        return False
    return True


def check_data(config: dict[str, Any], *, experiments: Iterable[str] | None = None,
               splits_root: str | Path | None = None) -> None:
    """Refuse, before any job starts, a (validated) config whose split jobs could not read their data: a
    source that loads only from a local copy (FedBN's domainnet and digit5) with none under the data root,
    or a local copy that is there but unreadable (hetfl.data.sources.check_available: file existence, the
    save_to_disk JSON files and IDX headers only; no data is read and the network is not touched), or, in
    offline mode (hetfl.data.sources.offline_switches), a hub source with neither a local copy nor a
    prepared one in the datasets cache <data root>/hf_cache. Online, a hub source without a local copy
    passes: whether the hub answers is the split job's to find.

    `experiments`: check only these (the workflow passes those whose split jobs will run); `splits_root`:
    skip an experiment whose every split is already there and made for its data (_split_made: nothing reads
    its data again). Not part of validate_config: a config stays valid on a machine without its data (dry
    runs, `hetfl project`)."""
    from hetfl.data.sources import SOURCES, SourceUnavailableError, check_available, has_split

    wanted = None if experiments is None else set(experiments)
    made: dict[str, bool] = {}
    if splits_root is not None:
        current: dict[str, bool] = {}
        for spec in expand_runs(config):
            if spec.split_key not in current:  # runs that share a split share its spec
                current[spec.split_key] = _split_made(Path(splits_root) / spec.split_key / "split.npz", spec)
            made[spec.experiment] = made.get(spec.experiment, True) and current[spec.split_key]
    users: dict[tuple[str, str | None], list[str]] = {}
    for name, exp in config["experiments"].items():
        if exp["dataset"] in SOURCES and (wanted is None or name in wanted) and not made.get(name, False):
            users.setdefault((exp["dataset"], exp.get("data_dir")), []).append(name)
    problems = []
    for (dataset, data_dir), names in users.items():
        domains = any(config["experiments"][n]["global_test_average"] == "domains" for n in names)
        try:
            splits = ("train", "test") if domains or has_split(dataset, "test", data_dir=data_dir) \
                else ("train",)
            check_available(dataset, data_dir=data_dir, splits=splits)
        except (SourceUnavailableError, ValueError) as err:
            also = f" (and in experiment(s) {', '.join(names[1:])})" if len(names) > 1 else ""
            problems.append(f"config key 'experiments.{names[0]}.dataset'{also} has value \"{dataset}\", "
                            f"whose data cannot be read, so its split jobs would fail (nothing ran): {err}")
    if problems:
        raise ConfigError("data not available:\n  " + "\n  ".join(problems))


# The traces with inactive rounds (Ruan et al. Table 2): p_inactive only changes runs that use one of them.
INACTIVE_TRACES = ("T_hi", "T_mi", "T_lo")
DEFAULT_P_INACTIVE = 0.05
# readings that change the data split (a variant with one of them gets its own split); global_test_average
# "domains" records every global test sample's device in the split
SPLIT_READINGS = ("iid", "label_choice", "equal_counts_fraction", "equal_counts_pick", "equal_counts_holdout",
                  "global_test_average")
#: the tables with a readings table (<table>_readings; reports.tables.READINGS_BUILDERS builds them)
READINGS_TABLES = ("accuracy_difference", "fast_reboot", "crossing_epochs", "fedfor_by_e",
                   "fedfor_concept_shift")


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
    algorithm_params: dict[str, Any] = field(default_factory=dict)  # resolved, defaults included
    lr_schedule: str = "staircase"
    local_steps: tuple[int, ...] | None = None
    quadratic: dict[str, list[float]] | None = None  # {"a", "b"[, "n"]: [...]} for dataset quadratic
    partition: dict[str, Any] | None = None  # real datasets: the label skew (data.partition.PartitionSpec)
    data_dir: str | None = None
    global_test: bool = True  # real datasets: also evaluate on the source's own test split
    global_test_samples: int | None = None  # a fixed, seeded subsample of that split (None: all of it)
    global_test_average: str = "pooled"  # global_test_*: "pooled" over samples or the mean of "domains"
    model_params: dict[str, Any] = field(default_factory=dict)
    event: dict[str, Any] | None = None  # {kind, round, policy, devices, stagger, departure_test_set, boost}
    # readings where the paper is silent or ambiguous (docs/readings.md)
    local_work: str = "steps"  # E counts local updates (steps) or epochs
    completion: str = "nearest"  # fraction of the round -> updates: nearest or floor
    trace_assignment: str = "random"  # device -> trace: random or stratified
    p_inactive: float = DEFAULT_P_INACTIVE  # inactive probability of T_hi, T_mi, T_lo
    reading: str = ""  # "" = the experiment's own readings; "key=value" = a variant of the readings axis
    clients_per_round: int | None = None  # K of N sampled per round (engine.sampling); None = all
    sampling_weights: str = "sampled"  # the scheme's weights over the sampled set (engine.sampling)
    acc_x: float | None = None  # FedFOR's ACC_x target (%), read by reports.fedfor; None = the paper's
    concept_shift: dict[str, Any] | None = None  # {probability}: FedFOR's label shifts (data.concept_shift)
    # FedFOR's "best validation accuracy" (reports.fedfor): the test split, the local holdouts, or the test
    # split at the best holdout round
    validation_accuracy: str = "test_split"

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["trace_order"] = list(self.trace_order)
        d["local_steps"] = list(self.local_steps) if self.local_steps is not None else None
        # only where it is not the default: every other run's spec (its checkpoint key, its cell's params,
        # its run.json) stays what it was before the key existed
        if d["validation_accuracy"] == "test_split":
            del d["validation_accuracy"]
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RunSpec:
        """A spec from to_dict's output (a run.json's "spec", a cell's run); anything else is a
        ConfigError naming the keys that are missing or not allowed, and the allowed ones."""
        if not isinstance(d, dict):
            raise ConfigError(f"a run spec is a JSON object of its fields; got a JSON {type(d).__name__}: "
                              f"{d!r:.80}")
        names = [f.name for f in fields(cls)]
        unknown = [k for k in d if k not in names]
        missing = [f.name for f in fields(cls)
                   if f.default is MISSING and f.default_factory is MISSING and f.name not in d]
        if unknown or missing:
            said = [f"key(s) {', '.join(map(repr, unknown))}, which are not allowed" if unknown else "",
                    f"no key(s) {', '.join(missing)}, which are required" if missing else ""]
            raise ConfigError(f"a run spec has {' and '.join(x for x in said if x)}; allowed keys: "
                              f"{', '.join(names)}")
        d = dict(d)
        d["trace_order"] = tuple(d["trace_order"])
        if d.get("local_steps") is not None:
            d["local_steps"] = tuple(d["local_steps"])
        return cls(**d)

    def split_spec(self) -> dict[str, Any]:
        """What the split depends on (runs that differ only in scheme, traces or algorithm share it)."""
        spec: dict[str, Any] = {"dataset": self.dataset, "num_devices": self.num_devices,
                                "test_fraction": self.test_fraction, "sizes": self.sizes}
        if self.dataset == "synthetic":
            spec.update(alpha=self.alpha, beta=self.beta, iid=self.iid)
        elif self.dataset == "quadratic":
            spec = {"dataset": self.dataset, "quadratic": self.quadratic}
        else:
            spec.update(partition=self.partition, data_dir=self.data_dir, global_test=self.global_test)
            if self.global_test_average != "pooled":  # the split then records every test sample's device
                spec["global_test_average"] = self.global_test_average
            from hetfl.data.build import default_holdout

            if default_holdout(self.dataset) == "temporal":  # only where it is not the random holdout
                spec["holdout"] = "temporal"
        return spec

    @property
    def evaluated_rounds(self) -> int:
        """Rounds at which the global model is evaluated: every eval_every-th and the last
        (engine.runner's RunLoop.finish, not counting a diverged round)."""
        return math.ceil(self.rounds / self.eval_every)

    @property
    def split_setting(self) -> str:
        """The setting's split directory: a reading that changes the data (iid, label_choice) gets its own."""
        key = self.reading.split("=", 1)[0]
        return f"{self.setting}__{reading_suffix(self.reading)}" if key in SPLIT_READINGS else self.setting

    @property
    def split_key(self) -> str:
        """Runs with equal split keys share one split (the data does not depend on scheme or traces)."""
        return f"{self.experiment}/{self.split_setting}/seed{self.seed}"

    @property
    def traceset(self) -> str:
        return traceset_label(self.trace_order[: self.num_traces])

    @property
    def trace_options(self) -> str:
        """Suffix of the trace file for readings that change the traces ('' under the defaults)."""
        used = self.trace_order[: self.num_traces]
        opts = "_stratified" if self.trace_assignment == "stratified" else ""
        if self.p_inactive != DEFAULT_P_INACTIVE and set(used) & set(INACTIVE_TRACES):
            opts += f"_pi{_positional(self.p_inactive)}"
        return opts

    @property
    def trace_key(self) -> str:
        return f"{self.traceset}/n{self.num_devices}_r{self.rounds}_seed{self.seed}{self.trace_options}"

    @property
    def cell(self) -> str:
        """The runs that share this run's split: they train in one process, alone or with the other cells of
        their setting or experiment when those are short (hetfl.cluster.cells_per_job)."""
        return self.split_key


def by_cell(specs: Iterable[RunSpec]) -> dict[str, list[RunSpec]]:
    """cell (RunSpec.cell) -> its runs, both in the order given."""
    cells: dict[str, list[RunSpec]] = {}
    for spec in specs:
        cells.setdefault(spec.cell, []).append(spec)
    return cells


def specs_to_json(specs: list[RunSpec]) -> str:
    """The runs a training job trains, as one command-line argument: {"common": the fields every run has
    alike, "runs": each run's other fields}. Listing each spec in full outgrows Linux's limit on one
    argument (MAX_ARG_STRLEN, 128 KiB) at about 125 SYNTHETIC runs; the runs of a job differ in a few
    fields (scheme, |T|, seed, run name), so this form is about a tenth of that."""
    dicts = [s.to_dict() for s in specs]
    common = {k: v for k, v in dicts[0].items() if all(d[k] == v for d in dicts[1:])} if dicts else {}
    runs = [{k: v for k, v in d.items() if k not in common} for d in dicts]
    return json.dumps({"common": common, "runs": runs}, sort_keys=True)


def specs_from_data(data: Any) -> list[RunSpec]:
    """The runs of specs_to_json's text once parsed (json.loads), or of a JSON list of full specs."""
    if isinstance(data, dict) and set(data) == {"common", "runs"}:
        return [RunSpec.from_dict({**data["common"], **run}) for run in data["runs"]]
    if isinstance(data, list):
        return [RunSpec.from_dict(d) for d in data]
    raise ConfigError("a cell is a JSON list of run specs or {\"common\": {...}, \"runs\": [...]}; got a "
                      f"JSON {type(data).__name__}")


def reading_suffix(reading: str) -> str:
    """'local_work=epochs' -> 'local_work-epochs' (run names and split directories)."""
    return reading.replace("=", "-")


def run_name(setting: str, num_traces: int, scheme: str, seed: int, algorithm: str | None = None,
             event: dict[str, Any] | None = None, reading: str = "") -> str:
    """Deterministic run name from the run's grid coordinates (the algorithm first when the experiment
    runs more than one; the event's round and policy when it has one; the reading variant last)."""
    ev = f"_{event['kind'][:3]}{event['round']}_{event['policy']}" if event else ""
    name = f"{setting}_T{num_traces}_{scheme}{ev}_s{seed}"
    name = f"{algorithm}_{name}" if algorithm else name
    return f"{name}__{reading_suffix(reading)}" if reading else name


def _events(exp: dict[str, Any]) -> list[dict[str, Any] | None]:
    """The experiment's event axis: one resolved event per (round, policy), or [None]."""
    ev = exp.get("event")
    if ev is None:
        return [None]
    devices = list(ev.get("devices") or [exp["num_devices"] - 1])
    return [{"kind": ev["kind"], "round": r, "policy": pol, "devices": devices, "stagger": ev["stagger"],
             "departure_test_set": ev["departure_test_set"], "boost": ev["boost"],
             # only where it is not the default: every run's spec (its fingerprint, its MLflow params) stays
             # what it was before the reading existed
             **({"boost_decay": ev["boost_decay"]} if ev["boost_decay"] != "shifted" else {})}
            for r in ev["rounds"] for pol in ev["policies"]]


def _positional(p: float) -> str:
    """p as a trace file's name writes it and the trace rule reads it back (workflow/rules/common.smk, digits
    and a point): `:g` where that is exact and has no exponent (every name written before), else every
    digit repr has. `:g` gave 1e-05 for 0.00001, whose file the workflow's wildcards could not match, and
    0.0123457 for 0.0123456789, whose traces were then drawn at the rounded value."""
    from decimal import Decimal

    short = f"{p:g}"
    return short if "e" not in short and float(short) == p else format(Decimal(repr(float(p))), "f")


def _format_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _variant(spec: RunSpec, key: str, value: Any) -> RunSpec | None:
    """`spec` with reading `key` set to `value`, or None when the reading does not apply to this run or
    cannot change it (the readings table then shows the default run under that reading)."""
    used = set(spec.trace_order[: spec.num_traces])
    changes: dict[str, Any]
    if key in ("local_work", "completion", "trace_assignment", "p_inactive", "local_epochs", "eta0"):
        if getattr(spec, key) == value:
            return None
        if key in ("completion", "trace_assignment") and used <= {"T_0"}:
            return None  # every device completes every round: nothing to round or to assign
        if key == "p_inactive" and not used & set(INACTIVE_TRACES):
            return None
        changes = {key: value}
    elif key == "iid":
        if spec.dataset != "synthetic" or spec.alpha or spec.beta or spec.iid == value:
            return None
        changes = {"iid": value}
    elif key == "label_choice":
        part = spec.partition or {}
        if part.get("label_skew") != "pathological" or part.get("label_choice", "cyclic") == value:
            return None
        changes = {"partition": {**part, "label_choice": value}}
    elif key in _NATURAL_EQUAL_COUNTS:  # FedFOR Tables 3-5: what FedBN's code keeps of every domain
        part = spec.partition or {}
        if (part.get("label_skew") != "natural" or not part.get("equal_counts")
                or part.get(key, _NATURAL_EQUAL_COUNTS[key][0]) == value):
            return None
        changes = {"partition": {**part, key: value}}
    elif key == "global_test_average":
        if spec.global_test_average == value or (
                value == "domains" and not _domains_allowed(spec.dataset, spec.partition, spec.global_test)):
            return None
        changes = {"global_test_average": value}
    elif key in ("departure_test_set", "boost", "boost_decay"):
        ev = spec.event
        kind = "departure" if key == "departure_test_set" else "arrival"
        own = (ev or {}).get(key, "shifted") if key == "boost_decay" else (ev or {}).get(key)
        if ev is None or ev["kind"] != kind or own == value:
            return None
        if key in ("boost", "boost_decay") and ev["policy"] != "fast_reboot":
            return None  # vanilla reboot has no boost to compose or decay (its runs were bit-identical)
        changes = {"event": {**ev, key: value}}
    else:  # the schema lists every key; this guards the two lists against drifting apart
        raise ConfigError(f"config key 'readings.{key}' is not a reading hetfl knows")
    reading = f"{key}={_format_value(value)}"
    name = f"{spec.run}__{reading_suffix(reading)}"
    return replace(spec, run=name, reading=reading, **changes)


def _in_readings_grid(spec: RunSpec, grid: dict[str, list[Any]]) -> bool:
    return all([spec.num_traces in grid.get("num_traces", [spec.num_traces]),
                spec.seed in grid.get("seeds", [spec.seed]),
                spec.setting in grid.get("settings", [spec.setting])])


def _local_steps(exp: dict[str, Any], setting: dict[str, Any]) -> tuple[int, ...] | None:
    """Fixed local steps per device: the setting's own, else the experiment's, else None (E·⌈n/B⌉)."""
    steps = setting.get("local_steps") or exp.get("local_steps")
    return tuple(steps) if steps else None


def expand_runs(config: dict[str, Any]) -> Iterator[RunSpec]:
    """All runs of a validated config, in a stable order: each experiment's grid under its own readings,
    then, for each reading of its `readings` axis, the variants (one reading changed at a time)."""
    for exp_name, exp in config["experiments"].items():
        defaults = list(_grid(exp_name, exp))
        yield from defaults
        grid = exp.get("readings_grid") or {}
        for key, values in (exp.get("readings") or {}).items():
            for value in values:
                for spec in defaults:
                    variant = _variant(spec, key, value) if _in_readings_grid(spec, grid) else None
                    if variant is not None:
                        yield variant


def _grid(exp_name: str, exp: dict[str, Any]) -> Iterator[RunSpec]:
    """The experiment's grid under its own readings."""
    algorithms = _algorithms(exp)
    tag = len(algorithms) > 1  # run names carry the algorithm only when there is more than one
    for algorithm, setting, sv in ((a, s, v) for a in algorithms for s, v in exp["settings"].items()):
        hp = parse_hyperparameters(algorithm, exp["algorithm_params"].get(algorithm))
        quad = {"a": [float(v) for v in sv["a"]], "b": [float(v) for v in sv["b"]]} \
            if exp["dataset"] == "quadratic" else None
        if quad is not None and "n" in sv:  # only when given: earlier splits keep their params
            quad["n"] = [int(v) for v in sv["n"]]
        for k, scheme, event, seed in itertools.product(exp["num_traces"], exp["schemes"], _events(exp),
                                                        exp["seeds"]):
            yield RunSpec(
                experiment=exp_name,
                run=run_name(setting, k, scheme, seed, algorithm if tag else None, event),
                table=exp["table"],
                dataset=exp["dataset"],
                setting=setting,
                alpha=float(sv.get("alpha", 0.0)),
                beta=float(sv.get("beta", 0.0)),
                iid=bool(sv.get("iid", False)),
                num_devices=exp["num_devices"],
                sizes=dict(exp["sizes"]),
                test_fraction=float(exp["test_fraction"]),  # YAML's 0 is an int
                model=exp["model"],
                algorithm=algorithm,
                scheme=scheme,
                num_traces=k,
                trace_order=tuple(exp["trace_order"]),
                local_epochs=sv.get("local_epochs", exp["local_epochs"]),
                batch_size=exp["batch_size"],
                eta0=float(exp["eta0"]),
                rounds=sv.get("rounds", exp["rounds"]),
                eval_every=exp["eval_every"],
                seed=seed,
                algorithm_params=asdict(hp),
                lr_schedule=exp["lr_schedule"],
                local_steps=_local_steps(exp, sv),
                quadratic=quad,
                partition=dict(sv["partition"]) if "partition" in sv else None,
                data_dir=exp.get("data_dir"),
                global_test=exp["global_test"],
                global_test_samples=exp["global_test_samples"],
                global_test_average=exp["global_test_average"],
                model_params=dict(exp["model_params"]),
                event=event,
                local_work=exp["local_work"],
                completion=exp["completion"],
                trace_assignment=exp["trace_assignment"],
                p_inactive=float(exp["p_inactive"]),
                clients_per_round=exp.get("clients_per_round"),
                sampling_weights=exp["sampling_weights"],
                acc_x=exp.get("acc_x"),
                concept_shift=dict(exp["concept_shift"]) if exp.get("concept_shift") else None,
                validation_accuracy=exp.get("validation_accuracy", "test_split"),
            )
