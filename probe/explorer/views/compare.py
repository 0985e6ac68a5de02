"""Compare: layerwise min-head distance between two runs' attention (`probe compare`, Section 4.2)."""

from __future__ import annotations

import streamlit as st

from probe.errors import ProbeError
from probe.explorer import shared
from probe.plots import head_matrix_figure, layer_distance_figure

st.header("Compare attention between two models")
st.caption("D^(l)(A, B): for each layer, the minimum over all head pairs of the mean Jensen–Shannon divergence between "
           "their attention rows (Eq. similarity), on the same examples (gold input + output) of every length bucket, "
           "with 95% bootstrap intervals. A against another seed of itself (NoPE') is the baseline.")


@st.cache_data(show_spinner="Collecting attention and comparing every head pair…", show_time=True, max_entries=32)
def comparison(path_a: str, version_a: float, path_b: str, version_b: float, root: str, n_per_bucket: int,
               metric: str, lengths: str, baseline: bool):
    from probe.analysis import compare_report
    from probe.train import resolve_device

    return compare_report(path_a, [path_b], root=root, n_per_bucket=n_per_bucket, metric=metric, lengths=lengths,
                          baseline=baseline, device=resolve_device("auto"))


found = shared.require_runs(trained=True)
if found is not None:
    runs, _ = found
    folder = shared.pick_task_folder(runs, preferred="scan", key="compare-task")
    members = [r for r in runs if shared.task_folder(r) == folder]
    if len(members) < 2:
        st.info(f"Comparing needs two runs of {folder}; there is {len(members)}. `probe train` makes one per PE "
                "(`--task`, `--pe`, `--seed` choose which).", icon=":material/info:")
        st.stop()
    with st.form("compare-settings", border=False):
        left, right = st.columns(2)
        with left:
            run_a = shared.pick_run("Model A", members, default_pe="nope", key="compare-a")
        with right:
            run_b = shared.pick_run("Model B", members, default_pe="t5", key="compare-b", other_than=run_a)
        c1, c2, c3, c4 = st.columns(4)
        n_per_bucket = c1.number_input("Examples per length bucket", min_value=1, max_value=200, value=10, key="n",
                                       bind="query-params", help="the paper uses up to 10")
        metric = c2.selectbox("Metric", ["jsd", "reference-code"], key="metric", bind="query-params",
                              help="jsd: the paper's definition; reference-code: the released code's "
                              "½(KL(M‖P) + KL(M‖Q)) over head pairs i < j only")
        lengths = c3.selectbox("Length buckets", ["all", "seen", "unseen"], key="lengths", bind="query-params")
        baseline = c4.toggle("A' baseline (another seed of A)", value=True, key="compare-baseline")
        st.form_submit_button("Compare", type="primary")

    if run_a.path == run_b.path:
        st.warning("A and B are the same run: every distance is 0.")
    command = (f"probe compare {run_a.path} {run_b.path} --n-per-bucket {n_per_bucket} --metric {metric} "
               f"--lengths {lengths}{'' if baseline else ' --no-baseline'}")
    try:
        report = comparison(str(run_a.path), shared.stamp(run_a), str(run_b.path), shared.stamp(run_b),
                            str(shared.checkpoints_root()), int(n_per_bucket), metric, lengths, baseline)
    except ProbeError as error:
        shared.error_line(error)
        st.stop()
    st.caption(f"Same as: `{command}`")
    result = report.comparisons[0]
    if baseline and report.baseline is None:
        st.info(f"No other seed of {result.a.label} in {folder}, so no A' baseline "
                f"(`probe train --seed 1 --pe {run_a.pe}` with this task's options makes one).", icon=":material/info:")
    if result.skipped:
        st.warning(f"{result.skipped} example(s) longer than the models' context were left out.")

    n_layers = result.n_layers
    rows = []
    for r in report.results:
        stats = r.overall
        rows.append({"A vs": r.label, **{f"layer {l}": float(stats.per_layer.mean[l]) for l in range(n_layers)},
                     "average over layers": float(stats.average.mean),
                     "95% CI": f"[{float(stats.average.low):.4f}, {float(stats.average.high):.4f}]",
                     "examples": stats.n_examples})
    st.dataframe(rows, hide_index=True, column_config={
        c: st.column_config.NumberColumn(format="%.4f") for c in rows[0] if c.startswith(("layer", "average"))})

    buckets = [b.length for b in result.buckets]
    seen = {b.length: b.seen for b in result.buckets}
    bucket = st.select_slider("Length bucket λ", ["all", *buckets], value="all", key="bucket",
                              format_func=lambda b: "all buckets" if b == "all" else f"{b}{'' if seen[b] else ' (unseen)'}")
    length = None if bucket == "all" else int(bucket)
    label = "D^(l), JSD" if metric == "jsd" else "D^(l), reference code"
    where = "all length buckets" if length is None else f"λ = {length}"
    st.plotly_chart(layer_distance_figure(report.curves(length), f"{result.a.label} vs {result.label} ({where})", label),
                    key="layers")

    st.subheader("Head × head distances of one layer")
    layer = st.selectbox("Layer", list(range(n_layers)), key="layer")
    columns = st.columns(len(report.results))
    for column, r in zip(columns, report.results):
        stats = r.overall if length is None else next((s for s in r.buckets if s.length == length), None)
        if stats is None:
            continue
        figure = head_matrix_figure(stats.head_matrix[layer], stats.argmin[layer].tolist(), f"layer {layer}",
                                    labels=(r.a.label, r.label))
        column.plotly_chart(figure, key=f"heads-{r.label}")

    st.subheader("Per length bucket")
    table = []
    for b in result.buckets:
        row = {"λ": b.length, "seen": b.seen, "from": b.split, "examples": b.n_examples}
        for r in report.results:
            stats = next((s for s in r.buckets if s.length == b.length), None)
            if stats is None:
                continue
            row.update({f"{r.label}: layer {l}": float(stats.per_layer.mean[l]) for l in range(n_layers)})
            row[f"{r.label}: average"] = float(stats.average.mean)
        table.append(row)
    st.dataframe(table, hide_index=True, column_config={
        c: st.column_config.NumberColumn(format="%.4f") for c in table[0] if ": " in c})
