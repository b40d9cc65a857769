"""The label-distribution chart of an experiment's splits (`hetfl split-figure`, rule split_figure): a panel
per setting and a caption stating each split, from hand-made manifests whose numbers are worked out in the
comments; bad manifests are named before anything is written; the workflow draws the experiments' own
splits of their first seed and no chart for a dataset without labels."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hetfl.cli import main
from hetfl.reports.split_figures import build_split_figure, draw_split_panels, load_panels

ROOT = Path(__file__).resolve().parents[1]

# 4 devices, 3 classes. Train sizes are the row sums 4, 5, 6, 4: sorted 4 4 5 6, median (4 + 5) / 2 = 4.5.
# Classes held (non-zero counts) 2, 1, 3, 1: sorted 1 1 2 3, median 1.5.
SYNTHETIC = {"dataset": "synthetic", "alpha": 0.5, "beta": 1.0, "iid": False, "num_devices": 4,
             "sizes": {"distribution": "pareto", "size": 20, "index": 0.5, "sigma": 0.3, "min_size": 10,
                       "max_size": 1000},
             "test_fraction": 0.2, "seed": 3, "num_classes": 3,
             "label_histogram": [[3, 0, 1], [0, 0, 5], [2, 2, 2], [0, 4, 0]],
             "train_sizes": [4, 5, 6, 4], "test_sizes": [1, 1, 2, 1], "global_test_size": 0}
# 3 devices, 2 classes: sizes 10, 7, 2 (median 7); classes held 1, 1, 2 (median 1); MNIST's test split.
MNIST = {"dataset": "mnist5k", "num_devices": 3, "seed": 3, "num_classes": 2,
         "partition": {"label_skew": "pathological", "m": 1, "label_choice": "random", "alpha": 0.5,
                       "shards_per_client": 2},
         "sizes": {"distribution": "equal", "size": 20},
         "label_histogram": [[10, 0], [0, 7], [1, 1]], "train_sizes": [10, 7, 2], "test_sizes": [3, 2, 1],
         "global_test_size": 1000}
QUADRATIC = {"dataset": "quadratic", "quadratic": {"a": [1.0, 2.0], "b": [1.0, 5.0]}, "seed": 0,
             "label_histogram": [[1], [1]], "train_sizes": [1, 1], "test_sizes": [1, 1],
             "global_test_size": 0}


def _manifest(root: Path, setting: str, manifest: dict) -> Path:
    path = root / "data_splits" / "exp" / setting / f"seed{manifest['seed']}" / "manifest.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(manifest))
    return path


def test_caption_states_each_settings_split(tmp_path):
    paths = [_manifest(tmp_path, "NIID", SYNTHETIC), _manifest(tmp_path, "m1", MNIST)]
    out = tmp_path / "reports" / "exp"
    build_split_figure(paths, out)
    caption = (out.parent / "exp.caption.html").read_text()
    assert ("<tr><td>NIID</td><td>3</td><td>4</td><td>4 / 4.5 / 6</td><td>1 / 1.5 / 3</td><td>0</td>"
            "<td>SYNTHETIC(α = 0.5, β = 1.0); sizes pareto (size 20, index 0.5, min_size 10, max_size 1000)"
            "</td></tr>") in caption
    # only the keys the label skew reads; a real source's 'equal' reads no size
    assert ("<tr><td>m1</td><td>3</td><td>3</td><td>2 / 7 / 10</td><td>1 / 1 / 2</td><td>1000</td>"
            "<td>mnist5k, partition pathological (m 1, label_choice random); sizes as the label skew deals "
            "them</td></tr>"
            ) in caption
    assert "Data splits: exp" in caption and "seed 3" in caption
    assert "the other seeds' splits are drawn the same way" in caption
    assert (out.parent / "exp.png").read_bytes()[:4] == b"\x89PNG"


def test_a_panel_per_setting_with_a_bubble_per_nonzero_count(tmp_path):
    panels = load_panels([_manifest(tmp_path, "NIID", SYNTHETIC), _manifest(tmp_path, "m1", MNIST)])
    fig = draw_split_panels(panels, "exp")
    assert [ax.get_title() for ax in fig.axes] == ["NIID, seed 3: 4 devices", "m1, seed 3: 3 devices"]
    # non-zero counts: 2 + 1 + 3 + 1 = 7 bubbles, and 1 + 1 + 2 = 4
    assert [len(ax.collections[0].get_offsets()) for ax in fig.axes] == [7, 4]


def test_split_figure_is_byte_identical_from_run_to_run(tmp_path):
    paths = [_manifest(tmp_path, "NIID", SYNTHETIC)]
    build_split_figure(paths, tmp_path / "a" / "exp")
    build_split_figure(paths, tmp_path / "b" / "exp")
    assert (tmp_path / "a/exp.png").read_bytes() == (tmp_path / "b/exp.png").read_bytes()


@pytest.mark.parametrize("bad, says", [
    ("missing", "does not exist"),
    ("quadratic", "dataset 'quadratic', which has no class labels"),
    ("no_histogram", "has no label_histogram"),
])
def test_a_bad_manifest_is_named_before_anything_is_written(tmp_path, capsys, bad, says):
    good = _manifest(tmp_path, "NIID", SYNTHETIC)
    if bad == "missing":
        path = tmp_path / "data_splits/exp/IID/seed3/manifest.json"
    elif bad == "quadratic":
        path = _manifest(tmp_path, "q", QUADRATIC)
    else:
        path = _manifest(tmp_path, "old", {k: v for k, v in MNIST.items() if k != "label_histogram"})
    out = tmp_path / "reports" / "exp"
    assert main(["split-figure", "--out", str(out), str(good), str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hetfl split-figure: error: ") and f"manifest {path} " in err and says in err
    assert not out.parent.exists()  # neither the chart nor its caption


def test_workflow_charts_the_experiments_own_splits_of_the_first_seed(tmp_path):
    """A dry run: one split_figure job per labelled experiment, a panel per setting from its first seed;
    the iid reading's own splits (NIID__iid-true) are alternatives, not drawn; the quadratic bed gets none."""
    base = {"table": "none", "schemes": ["A"], "num_traces": [1], "rounds": 2, "seeds": [4, 1]}
    config = {"experiments": {
        "syn": {**base, "dataset": "synthetic", "num_devices": 4,
                "settings": {"NIID": {"alpha": 1.0, "beta": 1.0}, "a0": {"alpha": 0.0, "beta": 0.0}},
                "readings": {"iid": [True]}},
        "quad": {**base, "dataset": "quadratic", "model": "quadratic",
                 "settings": {"q": {"a": [1.0, 2.0], "b": [1.0, 5.0], "local_steps": [2, 10]}},
                 "seeds": [0]},
    }}
    cfg = tmp_path / "c.yaml"
    cfg.write_text(yaml.safe_dump(config))
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile"), "--directory",
                           str(tmp_path / "wd"), "--configfile", str(cfg), "-n", "-p", "--cores", "1"],
                          capture_output=True, text=True, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    jobs = [b for b in proc.stdout.split("rule ")[1:] if b.startswith("split_figure:")]
    assert len(jobs) == 1
    assert ("input: data_splits/syn/NIID/seed4/manifest.json, data_splits/syn/a0/seed4/manifest.json\n"
            in jobs[0])
    assert "hetfl split-figure --out reports/figures/splits/syn data_splits/syn/NIID/seed4/manifest.json" \
        in proc.stdout


def test_save_png_keeps_a_title_wider_than_the_figure(tmp_path):
    """The split charts' titles were cut at the figure's edge (an audit): the PNG is its tight box."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    from hetfl.reports.split_figures import save_png

    fig = Figure(figsize=(2, 2))
    fig.suptitle("a title much wider than its two-inch figure " * 3)
    out = save_png(fig, tmp_path / "t.png")
    width = int.from_bytes(out.read_bytes()[16:20], "big")  # the PNG header's IHDR width
    assert width > 2 * 100


def test_a_natural_split_states_what_equal_counts_kept():
    """FedFOR Tables 3-5's natural splits are trimmed (FedBN's set-up): the caption named only min_samples,
    so a chart of the first 5 % of every domain read as the whole domains."""
    from hetfl.reports.split_figures import _spec_text

    manifest = {"dataset": "domainnet", "sizes": {"distribution": "equal"},
                "partition": {"label_skew": "natural", "equal_counts": True, "equal_counts_fraction": 0.05,
                              "equal_counts_pick": "first"}}
    text = _spec_text(manifest)
    assert ("partition natural (equal_counts true, equal_counts_fraction 0.05, equal_counts_pick first); "
            "sizes equal (trimmed to one count)") in text


@pytest.mark.parametrize(("sizes", "shown"), [
    ({"size": 20, "min_size": 10, "max_size": 1000}, "equal (size 20)"),
    ({"size": 1, "min_size": 2, "max_size": 1000}, "equal (size 1, min_size 2)"),
    ({"size": 50, "min_size": 10, "max_size": 30}, "equal (size 50, max_size 30)"),
    ({"size": 50, "min_size": 10, "max_size": None}, "equal (size 50)"),
])
def test_equal_sizes_name_the_bound_that_moved_them(sizes, shown):
    """Equal sizes deal clip(size, min_size, max_size): the caption said "size 1" where the floor dealt every
    device 2. The bounds show only where they moved the count, so the default captions are unchanged."""
    from hetfl.reports.split_figures import _spec_text

    text = _spec_text({"dataset": "synthetic", "alpha": 1.0, "beta": 1.0,
                       "sizes": {"distribution": "equal", **sizes}})
    assert text.endswith(f"; sizes {shown}")
