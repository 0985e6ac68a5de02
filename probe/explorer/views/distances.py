"""Distances: normalized attended-distance histograms of each PE, overlaid (`probe distances`, Section 6.1), on a
task's runs or on code models (`probe pretrain`, `probe import`, and any model TransformerLens loads, hf:ID or
hf:FOLDER) reading held-out windows at 1x and 2x their training context."""

from __future__ import annotations

import json

import streamlit as st

from probe.analysis.results import attended_series
from probe.explorer import shared
from probe.figures import attended_distance_figure

PAPER_FOLDER = "addition+scratchpad=full"

st.header("Attended distances")
st.caption(
    "For every output query, the normalized distance d̄ from the query to the key it attends to, pooled over "
    "layers, heads and examples: near keys give d̄ ≈ 0, the start of the sequence d̄ ≈ 1. Sarle's bimodality "
    "coefficient above 5/9 ≈ 0.556 reads as two modes (near and far). Code models: every query of the last c "
    "tokens of held-out files, one histogram per model at c = 1x and 2x the training context."
)


@st.cache_data(show_spinner=False, max_entries=128)
def distances(
    path: str, version: float, n_per_bucket: int, normalization: str, lengths: str, bins: int, options: str = "{}"
) -> list[dict]:
    """One model's attended-distance distributions as `probe distances` writes them, one per context size for a
    code model (cached per model, so adding one computes only that one); ``hf:`` models read the held-out files
    of the corpus ``options`` (JSON) name, at its context."""
    from probe.analysis import attended_distance_report
    from probe.device import resolve_device
    from probe.subjects.settings import ReadSettings

    settings = ReadSettings(
        options=json.loads(options),
        n_per_bucket=n_per_bucket,
        lengths=lengths,
        device=resolve_device("auto"),
        progress=shared.stop_when_closed(),
    )
    report = attended_distance_report([path], settings, normalization=normalization, bins=bins)
    return [result.to_json() for result in report.results]


found, broken = shared.runs()
shared.show_broken(broken)
source = shared.pick_source(found, key="distances-task", preferred=PAPER_FOLDER)
folder, members, code = source.folder, source.members, source.code
if folder != PAPER_FOLDER and not code:
    st.caption(
        f"The paper's figure is on addition with the full scratchpad (`{PAPER_FOLDER}`): "
        "`probe train --task addition --scratchpad full` makes those runs."
    )
by_path = {str(r.path): r for r in members}
with st.form("distances-settings", border=False):
    chosen = shared.pick_runs(by_path, key="distances-runs")
    external = shared.hf_models("Hugging Face models, measured beside the runs", "distances-hf") if code else []
    c1, c2, c3, c4 = st.columns(4)
    n_per_bucket = shared.examples_per_bucket(c1, "per_bucket", "code models: windows per context size")
    lengths = c2.selectbox(
        "Length buckets",
        ["unseen", "all", "seen"],
        index=1 if code else 0,
        key="which_lengths",
        bind="query-params",
        help="unseen lengths, as the released notebook (default); code "
        "models: seen = 1x, unseen = 2x the training context (default all)",
    )
    normalization = c3.selectbox(
        "Normalization",
        ["text", "reference-code"],
        key="normalization",
        bind="query-params",
        help="text: d̄ = (t − n + 1)/t as the paper writes; reference-code: (t − n)/t as its released notebook computes",
    )
    bins = c4.number_input("Bins", min_value=1, max_value=200, value=20, key="bins", bind="query-params")
    if st.form_submit_button("Measure", type="primary"):
        st.session_state["distances-asked"] = True

chosen = shared.models_or_stop(chosen, external, code)
options = json.dumps(source.options if external else {})
flags = shared.corpus_flags(json.loads(options))
settings = f"--n-per-bucket {n_per_bucket} --lengths {lengths} --normalization {normalization} --bins {bins}"
if st.session_state.get("distances-asked"):  # computed only when asked: seconds to minutes a model on a CPU
    measured = shared.measure_each(
        chosen,
        by_path,
        "Measuring attended distances of",
        lambda name, version: distances(name, version, int(n_per_bucket), normalization, lengths, int(bins), options),
    )
    results = [result for per_model in measured for result in per_model]
    measured_paths = " ".join(dict.fromkeys(r["run"]["path"] for r in results))
    if results:
        st.caption(f"Same as: `probe distances {measured_paths}{flags} {settings}`")
else:
    stem = "attended_distance" + ("" if normalization == "text" else "_reference-code")
    saved = shared.saved_report(folder, "distances", by_path, stem)
    results = [r for r in saved.runs if r["run"]["path"] in chosen]
    if results:
        used = " ".join(f"--{k.replace('_', '-')} {saved.data.get(k)}" for k in ("n_per_bucket", "lengths", "bins"))
        st.caption(
            f"Saved by `probe distances` on {saved.written} ({used} --normalization {normalization}); "
            "**Measure** computes the settings above here."
        )
    else:
        st.info(
            "**Measure** collects every head's attention of each model picked: seconds to minutes a model on a CPU "
            f"(`probe distances {' '.join(chosen)}{flags} {settings}` does the same in a terminal, and this page "
            "then shows what it saved).",
            icon=":material/info:",
        )
if not results:
    st.stop()
st.plotly_chart(
    attended_distance_figure(
        attended_series(results), f"Normalized attended distance on {folder}, all layers and heads"
    ),
    key="distances",
)
st.dataframe(
    [
        {
            "run": r["run"]["label"],
            "examples": r["n_examples"],
            "queries × layers × heads": r["n_queries"],
            "bimodality (arg-max)": r["weightings"].get("argmax", {}).get("bimodality"),
            "bimodality (weighted)": r["weightings"].get("attention", {}).get("bimodality"),
            "mean d̄ (arg-max)": r["weightings"].get("argmax", {}).get("mean"),
            "left out (too long)": r["skipped"],
        }
        for r in results
    ],
    hide_index=True,
    column_config={
        c: st.column_config.NumberColumn(format="%.3f")
        for c in ("bimodality (arg-max)", "bimodality (weighted)", "mean d̄ (arg-max)")
    },
)
