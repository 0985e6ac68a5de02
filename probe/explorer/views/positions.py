"""Positions: how each model represents position (`probe positions`): linear position probes per layer,
the relative-vs-absolute decomposition of every head's logits, attention sinks and the variance of the
attention output against position, on a task's runs or on code models (held-out windows at 1x and 2x)."""

from __future__ import annotations

import json

import streamlit as st

from probe.explorer import shared
from probe.figures.positions import entropy_figure, head_share_figure, probe_figure, sink_figure, variance_figure

st.header("Positions")
st.caption(
    "Section 5 of the paper says NoPE can represent absolute and relative position. Here it is measured: a "
    "ridge read-out of the absolute position (and of the distance to <sep>) from the embedding and after every "
    "layer, fitted on half the seen lengths and scored on the other half and on unseen lengths (Haviv et al. "
    "2022); how much of each head's logits a function of i − j, of the key position j, or of both explains "
    "(the rest: content); the attention on the first token (Xiao et al. 2023); and the variance of the "
    "attention output against position (Chi et al. 2023)."
)


@st.cache_data(show_spinner=False, max_entries=64)
def measure(path: str, version: float, n_per_bucket: int, options: str = "{}") -> dict:
    """One model's measures as `probe positions` writes them (cached per model)."""
    from probe.analysis.positions import positions_report
    from probe.device import resolve_device
    from probe.subjects.settings import ReadSettings

    settings = ReadSettings(
        options=json.loads(options),
        n_per_bucket=n_per_bucket,
        device=resolve_device("auto"),
        progress=shared.stop_when_closed(),
    )
    (result,) = positions_report([path], settings).results
    return result.to_json()


def best_probe(summary: dict, split: str) -> str | None:
    """The best stream's R² of the absolute-position probe and the stream it is read at, as `probe positions`
    prints it (``0.998 @1``)."""
    best = summary["best_probe"].get(split)
    return f"{best['r2']:.3f} @{best['stream']}" if best else None


def head_kinds(kinds: dict) -> str:
    """``relative / absolute / content``, and ``+n`` heads whose logits do not vary, so the counts add up to the
    heads (as `probe positions` prints them)."""
    counts = "{relative} / {absolute} / {content}".format(**kinds)
    return counts + (f" +{kinds['constant']}" if kinds.get("constant") else "")


found, broken = shared.runs()
shared.show_broken(broken)
source = shared.pick_source(found, key="positions-task")
folder, members, code = source.folder, source.members, source.code
by_path = {str(r.path): r for r in members}
with st.form("positions-settings", border=False):
    chosen = shared.pick_runs(by_path, key="positions-runs")
    external = shared.hf_models("Hugging Face models, measured beside the runs", "positions-hf") if code else []
    n_per_bucket = shared.examples_per_bucket(st, "per_bucket", "code models: windows per context size")
    if st.form_submit_button("Measure", type="primary"):
        st.session_state["positions-asked"] = True

chosen = shared.models_or_stop(chosen, external, code)
options = json.dumps(source.options if external else {})
flags = shared.corpus_flags(json.loads(options))
if st.session_state.get("positions-asked"):  # computed only when asked: seconds to minutes a model on a CPU
    results = shared.measure_each(
        chosen, by_path, "Measuring", lambda name, version: measure(name, version, int(n_per_bucket), options)
    )
    if results:
        st.caption(
            f"Same as: `probe positions {' '.join(r['run']['path'] for r in results)}{flags} "
            f"--n-per-bucket {n_per_bucket}`"
        )
else:
    saved = shared.saved_report(folder, "positions", by_path, entries=lambda data: data["models"])
    results = [r for r in saved.runs if r["run"]["path"] in chosen]
    if results:
        st.caption(
            f"Saved by `probe positions` on {saved.written} (--n-per-bucket "
            f"{saved.data.get('settings', {}).get('n_per_bucket')}); **Measure** computes the settings above here."
        )
    else:
        st.info(
            "**Measure** fits the position probes and decomposes every head's logits of each model picked: a "
            f"minute or more a run on a CPU (`probe positions {' '.join(chosen)}{flags} --n-per-bucket "
            f"{n_per_bucket}` does the same in a terminal, and this page then shows what it saved).",
            icon=":material/info:",
        )
if not results:
    st.stop()
st.dataframe(
    [
        {
            "model": r["run"]["label"],
            "probe R² held-out @stream": best_probe(r["summary"], "heldout"),
            "probe R² unseen @stream": best_probe(r["summary"], "unseen"),
            "relative": r["summary"]["shares"]["relative"],
            "absolute": r["summary"]["shares"]["absolute"],
            "content": r["summary"]["shares"]["content"],
            "heads relative / absolute / content (+constant)": head_kinds(r["summary"]["kinds"]),
        }
        for r in results
    ],
    hide_index=True,
    column_config={c: st.column_config.NumberColumn(format="%.3f") for c in ("relative", "absolute", "content")},
)
st.caption(
    "Probe R²: the absolute position's read-out at its best stream (@s: stream 0 is the embedding, s the residual "
    "stream after layer s − 1); heads: those whose logits are mostly relative / absolute / content, +n whose "
    "logits do not vary."
)
probes, heads, sinks, entropy, variance = st.tabs(
    ["Position probes", "Heads", "Attention sinks", "Entropy", "Variance"]
)
with probes:
    target = st.radio(
        "Read-out of",
        ["position", "landmark_distance"],
        horizontal=True,
        key="positions-target",
        format_func=lambda t: "absolute position" if t == "position" else "distance to <sep>",
    )
    st.plotly_chart(probe_figure(results, target), key="positions-probes")
    st.caption(
        "Stream 0 is the embedding, s the residual stream after layer s − 1 (`blocks.{s-1}.hook_resid_post`). "
        "Exact accuracy on unseen lengths "
        "past the largest fitted position needs a read-out that extrapolates (see the table below)."
    )
    st.dataframe(
        [
            {"model": r["run"]["label"], **{k: v for k, v in row.items() if not k.endswith(("_low", "_high"))}}
            for r in results
            for row in r["probes"]
            if row["target"] == target
        ],
        hide_index=True,
    )
with heads:
    st.plotly_chart(head_share_figure(results), key="positions-heads")
    st.caption(
        "Raw logits. Softmax ignores a query row's offset: the within-row shares (JSON, CSV) leave it out, "
        "but there a linear function of i − j is a linear function of j, so ALiBi counts as both."
    )
with sinks:
    first = st.radio("First tokens", [1, 4], horizontal=True, key="positions-first")
    st.plotly_chart(sink_figure(results, first), key="positions-sinks")
with entropy:
    st.plotly_chart(entropy_figure(results), key="positions-entropy")
    st.caption(
        "Distraction (Wang et al. 2024): attention rows spreading over more keys at unseen lengths. An attention "
        "temperature is meant to undo it: see the Extrapolation page, or `probe positions --intervene`."
    )
with variance:
    st.plotly_chart(variance_figure(results), key="positions-variance")
