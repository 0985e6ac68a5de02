"""The figure of OOD exact match against scale on the paper's SCAN split, from measured results.

Reads every ``bench/results/scan_scale*.json`` (``scan_scale.py``), the whole runs of every
``bench/results/gpu_kit_*_cuda.json`` (``bench/gpu``: the paper's recipe on a GPU, means over the seeds
measured, merged across chances), any ``probe reproduce``
report given with ``--report`` (its SCAN runs) and any ``bench/study_results.py`` file given with
``--results`` (its means over seeds), orders the points by training compute (weights x
tokens seen), adds the paper's released runs (T5-base, 40K steps of 64, mean of 3 seeds) at the
right, and writes ``bench/results/scan_scale_figure.html`` (and ``.png`` where kaleido can) and
``scan_scale_points.json`` (the table it drew). Points from reports and results drawn before stay in
that table (their study folders may be gone) unless one of the same label is given again.

    python bench/scale_figure.py --report checkpoints/reproduce-reduced/report
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from statistics import mean

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS  # noqa: E402

from probe.figures import pe_color, write_figure  # noqa: E402
from probe.models.model_config import resolve_config  # noqa: E402
from probe.models.registry import PE_KINDS, PE_LABELS  # noqa: E402
from probe.reference import paper_summary  # noqa: E402
from probe.training.train_config import TrainConfig  # noqa: E402

POINTS = RESULTS / "scan_scale_points.json"
AUTHORS = ", the authors' protocol"
KIT = "gpu_kit_*_cuda.json"  # the GPU kit's records, read again at every drawing
PAPER_WEIGHTS = 107e6  # the paper's T5-base decoder with T5's vocabulary (its Section 3)


def weights(training: dict) -> int:
    """Trainable weights of a run's model at SCAN's vocabulary (embeddings included, once)."""
    config = resolve_config("nope", vocab_size=18, preset=training["preset"], **training.get("model", {}))
    per_layer = 4 * config.d_model * config.d_head * config.n_heads + 2 * config.d_model * config.d_mlp
    return config.n_layers * per_layer + 2 * config.d_vocab * config.d_model


def label(training: dict, device: str) -> str:
    config = resolve_config("nope", vocab_size=18, preset=training["preset"], **training.get("model", {}))
    return (
        f"{config.n_layers}x{config.d_model}, {training['steps']} x {training['batch_size']}"
        f"{', dropout ' + str(training['dropout']) if training.get('dropout') else ''}"
        f"{AUTHORS if training.get('protocol') == 'authors' else ''} ({device})"
    )


def tick(label: str) -> str:
    """A point's label as the axis shows it: one line per part, so ten points fit side by side."""
    parts = label.replace(" (", ", ").removesuffix(")").split(", ")
    return "<br>".join(part.removeprefix("the ") for part in parts)


def seeds_note(entry: dict) -> str:
    """``, mean of 2 seeds`` for a report whose PEs were trained at more than one seed."""
    seeds = max(len(t["seeds"]) for t in entry["ours"].values())
    return f", mean of {seeds} seeds" if seeds > 1 else ""


def kit_points() -> list[dict]:
    """One point per preset, step count and forward precision of the GPU kit's whole runs: each PE's
    mean over the seeds that some chance trained it at (a run stopped before its test scoring counts
    for nothing)."""
    runs: dict[tuple[str, int, str], dict[str, dict[int, dict]]] = {}
    gpus: dict[tuple[str, int, str], set[str]] = {}
    for path in sorted(RESULTS.glob(KIT)):
        record = json.loads(path.read_text())
        settings = record["settings"]
        precision = settings.get("precision", "auto")  # a record that names none ran auto
        forward = TrainConfig(task="scan", pe="nope", preset=settings["preset"], precision=precision).forward_precision(
            "cuda"
        )
        key = (settings["preset"], settings["steps"], forward)
        for pe, run in record.get("runs", {}).items():
            if run.get("test"):
                runs.setdefault(key, {}).setdefault(pe, {})[settings["seed"]] = run["test"]
                gpus.setdefault(key, set()).add(record["machine"].get("gpu", "GPU").removeprefix("NVIDIA "))
    found = []
    for (preset, steps, forward), by_pe in runs.items():
        recipe = TrainConfig(task="scan", pe="nope", preset=preset, steps=steps, protocol="authors")
        training = {"preset": preset, "steps": steps, "batch_size": recipe.batch_size, "dropout": recipe.dropout}
        seeds = max(len(by_seed) for by_seed in by_pe.values())
        gpu = ", ".join(sorted(gpus[(preset, steps, forward)]))
        where = f"{gpu}, bench/gpu, {forward} forward, {seeds} seed{'s' if seeds > 1 else ''}"
        found.append(
            {
                "label": label(training | {"protocol": "authors"}, where),
                "source": KIT,
                "compute": weights(training) * steps * recipe.batch_size,
                "iid": {pe: mean(t["iid_accuracy"] for t in by_seed.values()) for pe, by_seed in by_pe.items()},
                "ood": {pe: mean(t["ood_accuracy"] for t in by_seed.values()) for pe, by_seed in by_pe.items()},
            }
        )
    return found


def points(report_folders: list[Path], result_files: list[Path] = ()) -> list[dict]:
    found = []
    for path in sorted(RESULTS.glob("scan_scale*.json")):
        if path.name == "scan_scale_points.json":
            continue
        data = json.loads(path.read_text())
        device = "H100" if "H100" in str(data["machine"].get("gpu")) else "CPU"
        for point in data["points"]:
            training = point["runs"][0]["training"]
            found.append(
                {
                    "label": label(training, device),
                    "source": path.name,
                    "compute": weights(training) * training["steps"] * training["batch_size"],
                    "iid": {r["pe"]: r["iid"] for r in point["runs"]},
                    "ood": {r["pe"]: r["ood"] for r in point["runs"]},
                }
            )
    found += kit_points()
    for folder in report_folders:
        report = json.loads((folder / "report.json").read_text())
        entry = report["tasks"]["scan+split=paper"]
        config = json.loads(next((folder.parent / "scan+split=paper").glob("*/seed0/config.json")).read_text())
        training = config["training"]
        found.append(
            {
                "label": label(training, f"CPU, probe reproduce{seeds_note(entry)}"),
                "source": str(folder / "report.json"),
                "compute": weights(training) * training["steps"] * training["batch_size"],
                "iid": {pe: t["iid"] for pe, t in entry["ours"].items()},
                "ood": {pe: t["ood"] for pe, t in entry["ours"].items()},
            }
        )
    for path in result_files:
        study = json.loads(path.read_text())
        seeds = max(len(row["seeds"]) for row in study["means"].values())
        training = study["runs"][0]["training"]
        found.append(
            {
                "label": label(training, "CPU" + (f", mean of {seeds} seeds" if seeds > 1 else "")),
                "source": path.name,
                "compute": weights(training) * training["steps"] * training["batch_size"],
                "iid": {pe: row["iid"] for pe, row in study["means"].items()},
                "ood": {pe: row["ood"] for pe, row in study["means"].items()},
            }
        )
    read = {point["label"] for point in found}
    if POINTS.is_file():  # reports and results drawn before (their folders may be gone): kept unless read again
        earlier = json.loads(POINTS.read_text())
        found += [p for p in earlier if p["label"] not in read and p["source"] not in ("probe.reference", KIT)]
    paper = paper_summary("scan-mdlen_tr25_ts48")
    found.append(
        {
            "label": "12x768, 40000 x 64, dropout 0.1 (the paper, 3 seeds)",
            "source": "probe.reference",
            "compute": PAPER_WEIGHTS * 40_000 * 64,
            "iid": {pe: s["iid"] for pe, s in paper.items()},
            "ood": {pe: s["ood"] for pe, s in paper.items()},
        }
    )
    return sorted(found, key=lambda p: p["compute"])


def main() -> None:
    import plotly.graph_objects as go

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--report", action="append", default=[], help="a probe reproduce report folder")
    parser.add_argument(
        "--results", action="append", default=[], help="a bench/study_results.py file: its means over seeds"
    )
    args = parser.parse_args()
    reports, results = [Path(p) for p in args.report], [Path(p) for p in args.results]
    missing = [p for p in [*(r / "report.json" for r in reports), *results] if not p.is_file()]
    if missing:
        sys.exit(f"no such file: {missing[0]}")
    table = points(reports, results)
    figure = go.Figure()
    for pe in [pe for pe in PE_KINDS if any(pe in p["ood"] for p in table)]:
        figure.add_trace(
            go.Scatter(
                x=[tick(p["label"]) for p in table],
                y=[100 * p["ood"].get(pe, float("nan")) for p in table],
                mode="lines+markers",
                name=PE_LABELS[pe],
                line=dict(color=pe_color(pe)),
                customdata=[100 * p["iid"].get(pe, float("nan")) for p in table],
                hovertemplate="OOD %{y:.1f}%<br>IID %{customdata:.1f}%<extra>" + PE_LABELS[pe] + "</extra>",
            )
        )
    figure.update_layout(
        title="SCAN (the paper's split): exact match on unseen lengths 26-48 against scale",
        xaxis_title="model (layers x width), steps x batch, where it ran; ordered by training compute",
        xaxis_tickangle=0,
        xaxis_tickfont_size=10,
        yaxis_title="OOD exact match (%)",
        yaxis_range=[-2, 102],
        legend=dict(orientation="h", yanchor="bottom", y=1.0, x=0),
        template="plotly_white",
        width=1400,
        height=700,
    )
    written = write_figure(figure, RESULTS / "scan_scale_figure")
    POINTS.write_text(json.dumps(table, indent=1) + "\n")
    for p in table:
        print(
            f"{p['label']:<60} "
            + "  ".join(
                f"{pe} {100 * p['ood'][pe]:5.1f}/{100 * p['iid'][pe]:5.1f}" for pe in PE_KINDS if pe in p["ood"]
            )
        )
    print("wrote " + ", ".join(map(str, written)))


if __name__ == "__main__":
    main()
