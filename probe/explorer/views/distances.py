"""Distances: normalized attended-distance histograms of each PE, overlaid (`probe distances`, Section 5.1)."""

from __future__ import annotations

import streamlit as st

from probe.analysis import AttendedReport
from probe.errors import ProbeError
from probe.explorer import shared
from probe.plots import attended_distance_figure

PAPER_FOLDER = "addition+scratchpad=full"

st.header("Attended distances")
st.caption("For every output query, the normalized distance d̄ from the query to the key it attends to, pooled over "
           "layers, heads and examples: near keys give d̄ ≈ 0, the start of the sequence d̄ ≈ 1. Sarle's bimodality "
           "coefficient above 5/9 ≈ 0.556 reads as two modes (near and far).")


@st.cache_data(show_spinner=False, max_entries=128)
def distances(path: str, version: float, n_per_bucket: int, normalization: str, lengths: str, bins: int):
    """One run's attended-distance distributions (cached per run, so adding a run computes only that one)."""
    from probe.analysis import attended_distance_report
    from probe.train import resolve_device

    report = attended_distance_report([path], n_per_bucket=n_per_bucket, normalization=normalization, lengths=lengths,
                                      bins=bins, device=resolve_device("auto"))
    return report.results[0]


found = shared.require_runs(trained=True)
if found is not None:
    runs, _ = found
    folder = shared.pick_task_folder(runs, preferred=PAPER_FOLDER, key="distances-task")
    if folder != PAPER_FOLDER:
        st.caption(f"The paper's figure is on addition with the full scratchpad (`{PAPER_FOLDER}`): "
                   "`probe train --task addition --scratchpad full` makes those runs.")
    members = [r for r in runs if shared.task_folder(r) == folder]
    by_path = {str(r.path): r for r in members}
    default = [p for p, r in by_path.items() if r.seed == min(m.seed for m in members if m.pe == r.pe)]
    with st.form("distances-settings", border=False):
        chosen = st.multiselect("Runs", list(by_path), default=default, key="distances-runs",
                                format_func=lambda p: shared.run_title(by_path[p]))
        c1, c2, c3, c4 = st.columns(4)
        n_per_bucket = c1.number_input("Examples per length bucket", min_value=1, max_value=200, value=10,
                                       key="per_bucket", bind="query-params")
        lengths = c2.selectbox("Length buckets", ["unseen", "all", "seen"], key="which_lengths", bind="query-params",
                               help="unseen lengths, as the released notebook (default)")
        normalization = c3.selectbox("Normalization", ["text", "reference-code"], key="normalization",
                                     bind="query-params", help="text: d̄ = (t − n + 1)/t as the paper writes; "
                                     "reference-code: (t − n)/t as its released notebook computes")
        bins = c4.number_input("Bins", min_value=1, max_value=200, value=20, key="bins", bind="query-params")
        st.form_submit_button("Measure", type="primary")

    if not chosen:
        st.info("Pick at least one run.", icon=":material/info:")
        st.stop()
    results = []
    progress = st.progress(0.0)
    for i, path in enumerate(chosen):  # a run that fails is reported and left out; the rest go on
        run = by_path[path]
        progress.progress(i / len(chosen), text=f"Measuring attended distances of {shared.run_title(run)} "
                          f"({i + 1}/{len(chosen)})…")
        try:
            results.append(distances(path, shared.stamp(run), int(n_per_bucket), normalization, lengths, int(bins)))
        except ProbeError as error:
            st.error(f"Left out {path}: {error}", icon=":material/error:")
    progress.empty()
    if not results:
        st.stop()
    chosen = [r.run.path for r in results]
    report = AttendedReport(results, normalization, lengths, int(n_per_bucket), 0, int(bins))
    st.caption(f"Same as: `probe distances {' '.join(chosen)} --n-per-bucket {n_per_bucket} --lengths {lengths} "
               f"--normalization {normalization} --bins {bins}`")
    st.plotly_chart(attended_distance_figure(report.series(), f"Normalized attended distance on {folder}, "
                                             "all layers and heads"), key="distances")
    st.dataframe([{"run": r.run.label, "examples": r.n_examples, "queries × layers × heads": r.n_queries,
                   "bimodality (arg-max)": r.stats["argmax"].bimodality if "argmax" in r.stats else None,
                   "bimodality (weighted)": r.stats["attention"].bimodality if "attention" in r.stats else None,
                   "mean d̄ (arg-max)": r.stats["argmax"].mean if "argmax" in r.stats else None,
                   "left out (too long)": r.skipped} for r in report.results], hide_index=True,
                 column_config={c: st.column_config.NumberColumn(format="%.3f")
                                for c in ("bimodality (arg-max)", "bimodality (weighted)", "mean d̄ (arg-max)")})
