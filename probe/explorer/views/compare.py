"""Compare: layerwise min-head distance between two models' attention (`probe compare`, Section 5.2): runs of a
task, or code models (`probe pretrain`, `probe import`, and any model TransformerLens loads, hf:ID or hf:FOLDER)
on held-out windows at 1x and 2x their training context."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import streamlit as st

from probe.analysis.results import compare_curves
from probe.errors import ProbeError
from probe.explorer import shared
from probe.figures import head_matrix_figure, layer_distance_figure
from probe.presets import main_task
from probe.runs.folders import task_folder_name

if TYPE_CHECKING:
    from probe.runs.folders import Run

st.header("Compare attention between two models")
st.caption(
    "D^(l)(A, B): for each layer, the minimum over all head pairs of the mean Jensen–Shannon divergence between "
    "their attention rows (Eq. similarity), on the same examples (gold input + output) of every length bucket, "
    "with 95% bootstrap intervals. JSD is in nats, at most ln 2 ≈ 0.693. A against another seed of itself (NoPE') "
    "is the baseline. Code models read the last c tokens of held-out files instead, c = 1x and 2x the training "
    "context T, one bucket per c."
)


@st.cache_data(show_spinner="Collecting attention and comparing every head pair…", show_time=True, max_entries=32)
def comparison(
    path_a: str,
    version_a: float,
    path_b: str,
    version_b: float,
    baseline_path: str,
    baseline_version: float,
    root: str,
    n_per_bucket: int,
    metric: str,
    lengths: str,
    baseline: bool,
    options: str = "{}",
) -> dict[str, Any]:
    """What `probe compare A B` computes, as it writes it (JSON); ``hf:`` models read the held-out files of the
    corpus ``options`` (JSON) name, at its context. ``baseline_path`` and its stamp (the A' run the report will
    read, :func:`seed_baseline`) are in the key only, so a re-published A' is read anew."""
    from probe.analysis import compare_report
    from probe.device import resolve_device
    from probe.subjects.settings import ReadSettings

    settings = ReadSettings(
        options=json.loads(options),
        n_per_bucket=n_per_bucket,
        lengths=lengths,
        device=resolve_device("auto"),
        progress=shared.stop_when_closed(),
    )
    return compare_report(path_a, [path_b], settings, root=root, metric=metric, baseline=baseline).to_json()


def seed_baseline(name: str, by_path: dict[str, Run]) -> tuple[str, float]:
    """The A' run `probe compare` reads beside run ``name`` (another seed of it) and its stamp; empty for an
    hf: model or a run with no other seed."""
    from probe.subjects.resolve import resolve

    other = resolve(by_path[name]).other_seed() if name in by_path else None
    return ("", 0.0) if other is None else (str(other.path), shared.stamp(other.path))


found, broken = shared.runs()
shared.show_broken(broken)
source = shared.pick_source(found, key="compare-task", preferred=task_folder_name(*main_task(None)))
folder, members, code = source.folder, source.members, source.code
by_path = {str(r.path): r for r in members}
external = (
    shared.hf_models("Hugging Face models to compare, beside the runs (A and B must share a tokenizer)", "compare-hf")
    if code
    else []
)
if len(members) + len(external) < 2:
    more = "; or type an hf: model" if code else ""
    st.info(
        f"Comparing needs two models of {folder}; there is {len(members)}. `probe train` makes one per PE "
        f"(`--task`, `--pe`, `--seed` choose which){more}.",
        icon=":material/info:",
    )
    st.stop()
with st.form("compare-settings", border=False):
    left, right = st.columns(2)
    with left:
        name_a = shared.pick_model("Model A", members, external, default_pe="nope", key="compare-a")
    with right:
        name_b = shared.pick_model("Model B", members, external, default_pe="t5", key="compare-b", other_than=name_a)
    c1, c2, c3, c4 = st.columns(4)
    n_per_bucket = shared.examples_per_bucket(c1, "n", "the paper uses up to 10; code models: windows per context size")
    metric = c2.selectbox(
        "Metric",
        ["jsd", "reference-code"],
        key="metric",
        bind="query-params",
        help="jsd: the paper's definition; reference-code: the released code's "
        "½(KL(M‖P) + KL(M‖Q)) over head pairs i < j only",
    )
    lengths = c3.selectbox(
        "Length buckets",
        ["all", "seen", "unseen"],
        key="lengths",
        bind="query-params",
        help="code models: seen = 1x, unseen = 2x the training context",
    )
    baseline = c4.toggle(
        "A' baseline (another seed of A)", value=True, key="compare-baseline", help="not for hf: models"
    )
    if st.form_submit_button("Compare", type="primary"):
        st.session_state["compare-asked"] = True

hf = name_a in external or name_b in external
options = source.options if hf else {}
if name_a == name_b:
    st.warning("A and B are the same model: every distance is 0.")
flags = shared.corpus_flags(options)
command = (
    f"probe compare {name_a} {name_b}{flags} --n-per-bucket {n_per_bucket} --metric {metric} "
    f"--lengths {lengths}{'' if baseline else ' --no-baseline'}"
)
if st.session_state.get("compare-asked"):  # computed only when asked: seconds to minutes on a CPU
    try:
        report = comparison(
            name_a,
            shared.stamp(by_path[name_a]) if name_a in by_path else 0.0,
            name_b,
            shared.stamp(by_path[name_b]) if name_b in by_path else 0.0,
            *(seed_baseline(name_a, by_path) if baseline else ("", 0.0)),
            str(shared.checkpoints_root()),
            int(n_per_bucket),
            metric,
            lengths,
            baseline,
            json.dumps(options),
        )
    except ProbeError as error:
        shared.error_line(error)
        st.stop()
    st.caption(f"Same as: `{command}`")
else:
    saved = shared.saved_comparison(folder, name_a, name_b, by_path)
    report = saved.data
    if not report:
        st.info(
            "**Compare** collects both models' attention and compares every head pair, and A with another seed of "
            f"itself: seconds to minutes on a CPU (`{command}` does the same in a terminal, and this page then "
            "shows what it saved).",
            icon=":material/info:",
        )
        st.stop()
    st.caption(
        f"Saved by `probe compare` on {saved.written} (--n-per-bucket {report['n_per_bucket']} --metric "
        f"{report['metric']}); **Compare** computes the settings above here."
    )
result = report["comparisons"][0]
results = [*report["comparisons"], *([report["baseline"]] if report["baseline"] is not None else [])]
if baseline and report["baseline"] is None and not hf:
    trainer = "pretrain" if code else "train"
    st.info(
        f"No other seed of {result['a']['label']} in {folder}, so no A' baseline (`probe {trainer} "
        f"--seed 1 --pe {by_path[name_a].pe}` with this folder's options makes one).",
        icon=":material/info:",
    )
if result["skipped"]:
    st.warning(f"{result['skipped']} example(s) longer than the models' context were left out.")

n_layers = result["n_layers"]
for r in results:
    if r["layers_b"] != list(range(n_layers)):
        st.caption(
            f"{r['label']} has another depth: A's layer l meets its layer at the same relative depth ("
            + ", ".join(f"A's L{layer} with B's L{m}" for layer, m in enumerate(r["layers_b"]))
            + ")."
        )
rows = []
for r in results:
    stats = r["overall"]
    rows.append(
        {
            "A vs": r["label"],
            **{f"layer {layer}": stats["per_layer"]["mean"][layer] for layer in range(n_layers)},
            "average over layers": stats["average"]["mean"],
            "95% CI": f"[{stats['average']['low']:.4f}, {stats['average']['high']:.4f}]",
            "examples": stats["n_examples"],
        }
    )
st.dataframe(
    rows,
    hide_index=True,
    column_config={
        c: st.column_config.NumberColumn(format="%.4f") for c in rows[0] if c.startswith(("layer", "average"))
    },
)

buckets = [b["length"] for b in result["buckets"]]
seen = {b["length"]: b["seen"] for b in result["buckets"]}
bucket = st.select_slider(
    "Context size c" if code else "Length bucket λ",
    ["all", *buckets],
    value="all",
    key="bucket",
    format_func=lambda b: "all buckets" if b == "all" else f"{b}{'' if seen[b] else ' (unseen)'}",
)
length = None if bucket == "all" else int(bucket)
label = "D^(l), JSD (nats)" if report["metric"] == "jsd" else "D^(l), reference code"
where = "all length buckets" if length is None else f"λ = {length}"
st.plotly_chart(
    layer_distance_figure(
        compare_curves(report, length), f"{result['a']['label']} vs {result['label']} ({where})", label
    ),
    key="layers",
)

st.subheader("Head × head distances of one layer")
layer = st.selectbox("Layer", list(range(n_layers)), key="layer")
st.caption(
    "D_AT averaged over examples, the least of these circled; D^(l) averages each example's own minimum, so it "
    "can be lower than the circled cell."
)
columns = st.columns(len(results))
for column, r in zip(columns, results):
    stats = r["overall"] if length is None else next((s for s in r["buckets"] if s["length"] == length), None)
    if stats is None:
        continue
    figure = head_matrix_figure(
        stats["head_matrix"][layer],
        stats["argmin"][layer],
        f"layer {layer}",
        labels=(r["a"]["label"], r["label"]),
        layer_distance=stats["per_layer"]["mean"][layer],
    )
    column.plotly_chart(figure, key=f"heads-{r['label']}")

st.subheader("Per length bucket")
table = []
for b in result["buckets"]:
    row = {"λ": b["length"], "seen": b["seen"], "from": b["split"], "examples": b["n_examples"]}
    for r in results:
        stats = next((s for s in r["buckets"] if s["length"] == b["length"]), None)
        if stats is None:
            continue
        row.update({f"{r['label']}: layer {layer}": stats["per_layer"]["mean"][layer] for layer in range(n_layers)})
        row[f"{r['label']}: average"] = stats["average"]["mean"]
    table.append(row)
st.dataframe(
    table,
    hide_index=True,
    column_config={c: st.column_config.NumberColumn(format="%.4f") for c in table[0] if ": " in c},
)
