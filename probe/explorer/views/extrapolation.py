"""Extrapolation: what rescues length generalization (`probe extrapolate`): each run untouched and under each
inference-time intervention on its attention, on the unseen lengths of its task (exact match) or past its
context (perplexity), fixed rules and interventions tuned on a validation slice shown apart."""

from __future__ import annotations

import json

import streamlit as st

from probe.explorer import shared
from probe.extrapolation.plan import FAMILIES
from probe.extrapolation.report import headline_rows
from probe.figures.extrapolation import extrapolation_figure

st.header("Extrapolation")
st.caption(
    "Interventions at inference, no retraining: a temperature on the attention logits (global, log-length, per "
    "head: Su 2021's logn as Qwen applies it; Wang et al. 2024), a window of recent keys with sink tokens "
    "(LM-Infinite, StreamingLLM), relative distances capped at the longest trained on (ReRoPE-style), and YaRN "
    "for RoPE. Fixed rules read only the training length L; tuned ones are chosen on a validation slice of the unseen "
    "lengths that the test numbers leave out. Intervals: 95% bootstrap over examples (files)."
)


@st.cache_data(show_spinner=False, max_entries=64)
def measure(name: str, version: float, families: tuple[str, ...], given: str, n_valid: int, options: str) -> dict:
    """One model's extrapolation as `probe extrapolate` writes it (cached per model and settings)."""
    from probe.device import resolve_device
    from probe.extrapolation.extrapolate import extrapolate
    from probe.extrapolation.plan import Settings
    from probe.models.interventions import parse_intervention

    settings = Settings(
        families=families,
        given=[parse_intervention(given)] if given.strip() else [],
        n_valid=n_valid,
        device=resolve_device("auto"),
        options=json.loads(options),
        progress=shared.stop_when_closed(),
    )
    report = extrapolate([name], settings, root=shared.checkpoints_root())
    return {"measure": report.measure, "run": report.runs[0].to_json()}


found, broken = shared.runs()
shared.show_broken(broken)
source = shared.pick_source(found, key="extrapolation-task")
by_path = {str(r.path): r for r in source.members}
with st.form("extrapolation-settings", border=False):
    chosen = shared.pick_runs(by_path, key="extrapolation-runs")
    external = shared.hf_models("Hugging Face models", "extrapolation-hf") if source.code else []
    families = st.multiselect("Interventions", list(FAMILIES), default=list(FAMILIES), key="extrapolation-families")
    given = st.text_input(
        "Also, as given (a fixed rule)", value="", key="extrapolation-given",
        placeholder="temperature=0.8+window=32+sinks=4",
    )  # fmt: skip
    n_valid = st.number_input(
        "Validation examples per unseen length (at most)", 1, 500, 50, key="valid", bind="query-params"
    )
    if st.form_submit_button("Measure", type="primary"):
        st.session_state["extrapolation-asked"] = True

chosen = shared.models_or_stop(chosen, external, source.code)
flags = "".join(f" --family {f}" for f in families) if set(families) != set(FAMILIES) else ""
flags += f" --intervention {given.strip()}" if given.strip() else ""
command = f"probe extrapolate {' '.join(chosen)}{flags} --n-valid {int(n_valid)}"
if st.session_state.get("extrapolation-asked"):  # computed only when asked: minutes a run on a CPU
    options = json.dumps(source.options if external else {})
    found_runs = shared.measure_each(
        chosen,
        by_path,
        "Evaluating",
        lambda name, version: measure(name, version, tuple(families), given, int(n_valid), options),
    )
    st.caption(f"Same as: `{command}`")
else:
    saved = shared.saved_report(source.folder, "extrapolation", by_path)
    found_runs = [{"measure": saved.data["measure"], "run": run} for run in saved.runs if run["path"] in chosen]
    if found_runs:
        st.caption(f"Saved by `probe extrapolate` on {saved.written}; **Measure** computes the settings above here.")
    else:
        st.info(
            f"**Measure** evaluates each run under every intervention picked: minutes a run on a CPU (`{command}` "
            "does the same in a terminal, and this page then shows what it saved).",
            icon=":material/info:",
        )
if not found_runs:
    st.stop()
for pe in dict.fromkeys(r["run"]["pe"] for r in found_runs):
    members = [r for r in found_runs if r["run"]["pe"] == pe]
    measure_name = members[0]["measure"]
    st.plotly_chart(extrapolation_figure([r["run"] for r in members], measure_name), key=f"extrapolation-{pe}")
    for r in members:
        run = r["run"]
        st.markdown(f"**{run['label']}**: L = {run['trained_length']}; tuned on {run['validation']}")
        st.dataframe(headline_rows(run, measure_name), hide_index=True)
        for family, why in run["skipped"].items():
            st.caption(f"{family}: not applicable ({why})")
