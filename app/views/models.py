"""Models: the checkpoints found, and exact match against length per PE (as `probe eval`)."""

from __future__ import annotations

import streamlit as st

import shared
from probe.errors import ProbeError
from probe.plots import accuracy_by_length

st.header("Models")
st.caption(f"Checkpoints under `{shared.checkpoints_root()}`")

found = shared.require_runs()
if found is not None:
    runs, _ = found
    reports = {str(r.path): shared.read_eval(r) for r in runs}

    def percent(value) -> str:
        return "–" if value is None else f"{100 * value:.1f}%"

    rows = []
    for r in runs:
        training, report = r.config.get("training", {}), reports[str(r.path)]
        iid = report["iid_accuracy"] if report else r.config.get("metrics", {}).get("iid_accuracy")
        rows.append({
            "task": shared.task_folder(r), "PE": shared.pe_name(r.pe), "seed": r.seed,
            "preset": training.get("preset", "–"), "steps": training.get("steps_done", training.get("steps")),
            "IID accuracy": percent(iid), "OOD accuracy": percent(report and report.get("ood_accuracy")),
            "folder": str(r.path),
        })
    st.dataframe(rows, hide_index=True)
    st.caption("IID: held-out examples of the training lengths; OOD: lengths beyond them (from `probe eval`; "
               "before it, IID is the accuracy measured at the end of training).")

    st.subheader("Exact match against length")
    folders = sorted({shared.task_folder(r) for r in runs})
    for folder, tab in zip(folders, st.tabs(folders)):
        with tab:
            members = [r for r in runs if shared.task_folder(r) == folder]
            evaluated = [(r, reports[str(r.path)]) for r in members if reports[str(r.path)]]
            missing = [r for r in members if not reports[str(r.path)]]
            if evaluated:
                curves = [{"label": f"{shared.pe_name(r.pe)} (seed {r.seed})", "pe": r.pe, "dashed": r.seed != 0,
                           "lengths": [b["length"] for b in rep["buckets"]],
                           "accuracy": [b["accuracy"] for b in rep["buckets"]]} for r, rep in evaluated]
                seen = [b["length"] for _, rep in evaluated for b in rep["buckets"] if b["seen"]]
                figure = accuracy_by_length(curves, (min(seen), max(seen)) if seen else None,
                                            f"{folder}: exact match by length")
                st.plotly_chart(figure, key=f"accuracy-{folder}")
            if missing:
                command = "probe eval " + " ".join(str(r.path) for r in missing)
                st.info(f"{len(missing)} run(s) have no accuracy by length yet; `{command}` measures it, "
                        "or evaluate them here.", icon=":material/info:")
                if st.button(f"Evaluate {len(missing)} run(s) now", key=f"evaluate-{folder}"):
                    from probe.evaluation import evaluate_run

                    progress = st.progress(0.0, text="evaluating")
                    for i, r in enumerate(missing):
                        progress.progress(i / len(missing), text=f"evaluating {r.label} ({i + 1}/{len(missing)})")
                        try:
                            evaluate_run(r)
                        except ProbeError as error:
                            shared.error_line(error)
                    progress.empty()
                    st.rerun()
