"""Data of the one flow: a split spec and a seed become split.npz and manifest.json (pure, seeded).

`hetfl split` and the workflow's split rule call `make_split`; `check_split` tells a run whether an
existing split was made for it (issue: a stale split must never be trained on in silence).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from hetfl.data.federation import GLOBAL_TEST_AVERAGES, Federation, from_device_lists, save_federation


def build_synthetic(alpha: float, beta: float, iid: bool, num_devices: int, size_spec: dict[str, Any],
                    test_fraction: float, seed: int) -> Federation:
    """SYNTHETIC(α, β) with per-device counts from the size distribution and a local train/test holdout."""
    from hetfl.data import sizes as sizes_mod
    from hetfl.data import synthetic

    rng = np.random.default_rng([seed, 0])
    n = sizes_mod.sample_sizes(num_devices, sizes_mod.SizeSpec(**size_spec), rng)
    _check_drawn_sizes_fit(n, size_spec)
    gen = synthetic.generate_synthetic(alpha, beta, n, rng, iid=iid)
    parts: list[list[np.ndarray]] = [[], [], [], []]
    for x, y in zip(gen.xs, gen.ys, strict=True):
        tr, te = synthetic.holdout_split(len(y), test_fraction, rng)
        for lst, arr in zip(parts, (x[tr], y[tr], x[te], y[te]), strict=True):
            lst.append(arr)
    return from_device_lists(*parts, num_classes=gen.b.shape[-1])


def _check_drawn_sizes_fit(n: np.ndarray, size_spec: dict[str, Any]) -> None:
    """Refuse, before generating any sample, drawn sizes whose samples this machine cannot hold (a
    ValueError naming the sizes and what is allowed). The workflow's start refuses the least counts
    (cluster.check_memory); a Pareto draw's tail is only known here: num_devices 1,000,000 at index 0.5
    with max_size 1,000,000,000 drew about 2·10^11 samples, and the split job grew past 16 GB before it
    was stopped."""
    from hetfl.cluster import SYNTHETIC_SAMPLE_BYTES, gib, host_memory_bytes

    total, have = int(n.sum()), host_memory_bytes()
    if have is not None and total * SYNTHETIC_SAMPLE_BYTES > have:
        raise ValueError(
            f"sizes {json.dumps(size_spec)} drew {total:,} samples over {len(n):,} devices (the largest "
            f"{int(n.max()):,}), {gib(total * SYNTHETIC_SAMPLE_BYTES)} at {SYNTHETIC_SAMPLE_BYTES} bytes a "
            f"SYNTHETIC sample, more than this machine's {gib(have)} of memory; allowed: draws within it: a "
            f"smaller sizes.max_size, sizes.size or num_devices")


#: the local holdouts: "random" (a seeded shuffle per device) or "temporal" (sample order with a gap:
#: sliding-window text, whose neighbouring samples overlap; partition.temporal_holdout)
HOLDOUTS = ("random", "temporal")


def default_holdout(dataset: str | None) -> str | None:
    """The holdout a real source's split uses: "temporal" for next-character text (LEAF Shakespeare's
    80-character windows), "random" for the other sources; None for SYNTHETIC and quadratic."""
    from hetfl.data.sources import SOURCES

    info = SOURCES.get(str(dataset))
    if info is None:
        return None
    return "temporal" if info.task == "next-char" else "random"


def build_from_source(name: str, partition_spec: dict[str, Any], num_devices: int,
                      sizes: dict[str, Any] | None, test_fraction: float, seed: int,
                      data_dir: str | None = None, global_test: bool = True,
                      holdout: str | None = None, global_test_average: str = "pooled") -> Federation:
    """A real dataset dealt to devices: label skew × size skew, then a local train/test holdout each.

    `sizes` with distribution "equal" means the partitioner's own equal split of all samples. With
    `global_test`, the source's own test split (when it has one) becomes the global test set. `holdout`
    (default: `default_holdout(name)`): "temporal" keeps every device's last samples for its local test set
    and drops the input length − 1 samples before them, as LEAF does for Shakespeare.
    `global_test_average` "domains" also records, for every global test sample, the device that holds its
    domain (client id), or -1 when no device does: the runner then averages per-domain accuracies.
    A natural split with `partition.equal_counts_holdout` "rest" trains every device on all of its kept
    samples and takes its local test part from the samples the trim left out (data.partition.rest_holdout).
    `test_fraction` 0: no local holdout, every device trains on all of its samples (FedBN's Digits: all 743
    images of a domain); only with the source's own test split, and not under "rest".
    """
    from hetfl.data import sizes as sizes_mod
    from hetfl.data.partition import PartitionSpec, local_holdout, partition, rest_holdout, temporal_holdout
    from hetfl.data.sources import SOURCES, check_text_order, has_split, load_source

    holdout = holdout or default_holdout(name)
    if holdout not in HOLDOUTS:
        raise ValueError(f"split key 'holdout' has value {holdout!r}, which is not allowed; allowed: "
                         + ", ".join(HOLDOUTS))

    src = load_source(name, data_dir=data_dir, split="train")
    if global_test_average not in GLOBAL_TEST_AVERAGES:
        raise ValueError(f"split key 'global_test_average' has value {global_test_average!r}, which is not "
                         f"allowed; allowed: {', '.join(GLOBAL_TEST_AVERAGES)}")
    held_out, test = None, None
    if global_test and has_split(name, "test", data_dir=data_dir):
        test = load_source(name, data_dir=data_dir, split="test")
        held_out = (test.x, test.y)
    if global_test_average == "domains" and (test is None or test.client_ids is None
                                             or src.client_ids is None):
        raise ValueError(f"split key 'global_test_average' has value 'domains', which is not allowed for "
                         f"{name}: it needs a test split and a domain (client id) column in both splits; "
                         "allowed: pooled")
    size_spec = None if not sizes or sizes.get("distribution") == "equal" else sizes_mod.SizeSpec(**sizes)
    spec = PartitionSpec(**partition_spec, sizes=size_spec)
    parts = partition(src.y, spec, num_devices, seed, client_ids=src.client_ids)
    if spec.equal_counts_holdout == "rest" and holdout == "temporal":
        raise ValueError(f"split key 'partition.equal_counts_holdout' has value 'rest', which is not allowed "
                         f"for {name} (its local test part is each device's last samples); allowed: kept")
    if test_fraction == 0:  # no local holdout: the source's own test split is the only one scored
        train_parts, test_parts = _no_holdout(name, parts, spec, held_out is not None)
    elif holdout == "temporal":
        check_text_order(src, np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64))
        gap = SOURCES[name].input_shape[0] - 1  # LEAF's split_data.py: test from n_train + seq_len - 1
        train_parts, test_parts = temporal_holdout(parts, test_fraction, gap)
    elif spec.equal_counts_holdout == "rest":  # test parts from what the trim left out (FedBN's validation)
        whole = partition(src.y, replace(spec, equal_counts=False, equal_counts_fraction=1.0,
                                         equal_counts_pick="random", equal_counts_holdout="kept"),
                          num_devices, seed, client_ids=src.client_ids)
        train_parts, test_parts = rest_holdout(parts, whole, test_fraction, spec.equal_counts_pick, seed)
    else:
        train_parts, test_parts = local_holdout(parts, test_fraction, seed)
    devices = None
    if global_test_average == "domains":
        if spec.label_skew != "natural":
            raise ValueError("split key 'global_test_average' has value 'domains', which is not allowed with "
                             f"label_skew {spec.label_skew!r}; allowed: domains only with label_skew "
                             "'natural'")
        holder = {str(src.client_ids[p[0]]): k for k, p in enumerate(parts) if len(p)}
        devices = np.array([holder.get(str(c), -1) for c in test.client_ids], dtype=np.int64)
    return from_device_lists([src.x[i] for i in train_parts], [src.y[i] for i in train_parts],
                             [src.x[i] for i in test_parts], [src.y[i] for i in test_parts],
                             num_classes=src.num_classes, global_test=held_out, global_devices=devices)


def _no_holdout(name: str, parts: list[np.ndarray], spec: Any, has_test: bool
                ) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(train, test) parts without a local holdout: every device's samples train, its test part is empty.
    ValueError where nothing else would be scored (no global test split) or a test part is asked for
    (equal_counts_holdout "rest"); config validation refuses both first (config._check_no_holdout)."""
    if not has_test:
        raise ValueError(f"split key 'test_fraction' has value 0 (no local holdout), which is not allowed "
                         f"for {name} without its own test split as the global test set (nothing would be "
                         "scored); allowed: a test_fraction in (0, 1), or 0 with global_test and a source "
                         "that has a test split")
    if spec.equal_counts_holdout == "rest":
        raise ValueError("split key 'test_fraction' has value 0 (no local holdout), which is not allowed "
                         "with partition.equal_counts_holdout 'rest' (its local test part is test_fraction's "
                         "share); allowed: a test_fraction in (0, 1), or 0 with 'kept'")
    empty = [k for k, p in enumerate(parts) if not len(p)]
    if empty:
        raise ValueError(f"device {empty[0]} holds no sample; allowed: a split that gives every device one")
    return ([np.asarray(p, dtype=np.int64) for p in parts],
            [np.zeros(0, dtype=np.int64) for _ in parts])


def make_split(out_npz: str | Path, split_spec: dict[str, Any], seed: int) -> dict[str, Any]:
    """Write split.npz and manifest.json for a split spec (RunSpec.split_spec())."""
    from hetfl.data import quadratic as quad_data
    from hetfl.data.sources import SOURCES

    s = dict(split_spec)
    dataset = s.get("dataset")
    if dataset == "quadratic":
        q = s.get("quadratic") or {}
        a, b = q.get("a", quad_data.DEFAULT_A), q.get("b", quad_data.DEFAULT_B)
        fed = quad_data.build_quadratic(a, b, q.get("n"))
    elif dataset == "synthetic":
        if s.get("alpha") is None or s.get("beta") is None:
            raise ValueError("dataset 'synthetic' needs alpha and beta")
        fed = build_synthetic(s["alpha"], s["beta"], s.get("iid", False), s["num_devices"],
                              s.get("sizes") or {}, s.get("test_fraction", 0.2), seed)
    elif dataset in SOURCES:
        if default_holdout(dataset) == "temporal":
            s.setdefault("holdout", "temporal")  # in the manifest: splits made before it lack the key
        fed = build_from_source(dataset, s.get("partition") or {"label_skew": "iid"}, s["num_devices"],
                                s.get("sizes"), s.get("test_fraction", 0.2), seed, s.get("data_dir"),
                                s.get("global_test", True), s.get("holdout"),
                                s.get("global_test_average", "pooled"))
    else:
        raise ValueError(f"dataset '{dataset}' is unknown; allowed: synthetic, quadratic, "
                         f"{', '.join(SOURCES)}")
    out_npz = Path(out_npz)
    return save_federation(fed, out_npz, out_npz.with_name("manifest.json"), {**s, "seed": seed})


def resolve_split_spec(split_spec: dict[str, Any]) -> dict[str, Any]:
    """The split spec as make_split reads it, every default filled in, so two specs that make the same
    data compare equal (a by-hand `hetfl split` may give fewer keys than a config's run spec)."""
    from dataclasses import asdict

    from hetfl.data import quadratic as quad_data
    from hetfl.data.partition import PartitionSpec
    from hetfl.data.sizes import SizeSpec

    s = json.loads(json.dumps(split_spec, sort_keys=True))  # tuples -> lists, a copy
    dataset = s.get("dataset")
    if dataset == "quadratic":
        q = s.get("quadratic") or {}
        a = [float(v) for v in q.get("a", quad_data.DEFAULT_A)]
        b = [float(v) for v in q.get("b", quad_data.DEFAULT_B)]
        n = [int(v) for v in q.get("n", [1] * len(a))]
        return {"dataset": dataset, "quadratic": {"a": a, "b": b, "n": n}}
    out = {"dataset": dataset, "num_devices": s.get("num_devices"),
           "test_fraction": float(s.get("test_fraction", 0.2))}
    sizes = s.get("sizes") or None
    if dataset == "synthetic":
        out.update(alpha=float(s.get("alpha")), beta=float(s.get("beta")), iid=bool(s.get("iid", False)),
                   sizes=asdict(SizeSpec(**sizes)) if sizes else None)
        return out
    part = asdict(PartitionSpec(**(s.get("partition") or {"label_skew": "iid"})))
    part.pop("sizes")
    equal = not sizes or sizes.get("distribution") == "equal"  # build_from_source: the partitioner's split
    out.update(partition=part, sizes=None if equal else asdict(SizeSpec(**sizes)),
               data_dir=s.get("data_dir"), global_test=bool(s.get("global_test", True)))
    if s.get("global_test_average", "pooled") != "pooled":  # absent under the default (earlier splits)
        out["global_test_average"] = s["global_test_average"]
    if default_holdout(dataset) == "temporal":
        # absent: a split made before the temporal holdout existed, i.e. a random one (its local test
        # windows overlap its training windows), which check_split then refuses
        out["holdout"] = s.get("holdout", "random")
    return out


def split_mismatch(manifest: dict[str, Any], split_spec: dict[str, Any], seed: int) -> dict[str, tuple]:
    """{key: (what the split was made with, what the run needs)} for every key that differs."""
    want = {**resolve_split_spec(split_spec), "seed": seed}
    have = {**resolve_split_spec({k: v for k, v in manifest.items() if k in split_spec or k == "dataset"}),
            "seed": manifest.get("seed")}
    return {k: (have.get(k), want[k]) for k in want if have.get(k) != want[k]}


def check_split(split_npz: str | Path, split_spec: dict[str, Any], seed: int) -> None:
    """Refuse a split whose manifest says it was made for other data than the run's split spec."""
    manifest_path = Path(split_npz).with_name("manifest.json")
    if not manifest_path.is_file():
        raise ValueError(f"split {split_npz} has no manifest.json beside it, so hetfl cannot tell what data "
                         "it holds; delete the directory and let hetfl make it again")
    diff = split_mismatch(json.loads(manifest_path.read_text()), split_spec, seed)
    if diff:
        what = "; ".join(f"{k}: split has {json.dumps(a)}, run needs {json.dumps(b)}"
                         for k, (a, b) in diff.items())
        raise ValueError(f"split {split_npz} was made for other data ({what}); delete it (or run "
                         "`snakemake --forcerun split`) so that it is made again for this run")
