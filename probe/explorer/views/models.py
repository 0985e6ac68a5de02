"""Models: the checkpoints found, exact match against length per PE (as `probe eval`), and the
report of any sweep in the folder (as `probe sweep --report`)."""

from __future__ import annotations

import streamlit as st

from probe.analysis.chance import GUESS_SHOWN, guess_of
from probe.analysis.evaluation import accuracy_figure
from probe.errors import ProbeError
from probe.explorer import shared
from probe.studies.sweep import find_manifests, manifest_report, report_figure_objects

st.header("Models")
st.caption(f"Checkpoints under `{shared.checkpoints_root()}`")


def percent(value: object) -> str:
    return f"{100 * value:.1f}%" if isinstance(value, (int, float)) else "–"


def predictions(members: list, folder: str) -> None:
    """One run's greedy predictions beside the gold, decoded when asked (what `probe eval --show` prints)."""
    from probe.analysis.predictions import show_predictions
    from probe.device import resolve_device
    from probe.subjects.settings import ReadSettings

    trained = [r for r in members if shared.has_task(r)]
    with st.expander("Predictions beside the gold"):
        run = shared.pick_run("Run", trained, key=f"show-run-{folder}")
        per_length = int(st.number_input("Per length", 1, 50, 2, key=f"show-n-{folder}"))
        wrong = st.checkbox("Only those scored wrong", key=f"show-wrong-{folder}")
        if not st.button("Decode", key=f"show-{folder}"):
            return
        settings = ReadSettings(device=resolve_device("auto"))
        try:
            rows = show_predictions(run, settings, per_length=per_length, wrong=wrong)
        except ProbeError as error:
            shared.error_line(error)
            return
        read = any(row.gold_answer is not None for row in rows)
        columns = ["length", "seen", "source", "target", "prediction"] + (["answer", "gold_answer"] if read else [])
        if any(row.gold_steps is not None for row in rows):
            columns += ["gold_steps", "wrong_step", "wrong_component"]
        st.dataframe([{c: getattr(row, c) for c in [*columns, "correct"]} for row in rows], hide_index=True)
        which = "scored wrong" if wrong else "test examples"
        st.caption(
            f"The first {per_length} {which} of each length of the test split, decoded greedily and scored as "
            f"`probe eval` scores them (`probe eval {run.path} --show {per_length}{' --wrong' if wrong else ''}`)."
        )


found = shared.require_runs()
if found is not None:
    runs, _ = found
    reports = {str(r.path): shared.read_eval(r) for r in runs}

    rows = []
    for r in runs:
        training, metrics, report = r.config.get("training", {}), r.config.get("metrics"), reports[str(r.path)]
        iid = report.iid_accuracy if report else metrics.get("iid_accuracy") if isinstance(metrics, dict) else None
        rows.append(
            {
                "task": shared.task_folder(r),
                "PE": shared.pe_name(r.pe),
                "seed": r.seed,
                "preset": training.get("preset", "–"),
                "steps": training.get("steps_done", training.get("steps")),
                "IID accuracy": percent(iid),
                "OOD accuracy": percent(report and report.ood_accuracy),
                "folder": str(r.path),
            }
        )
    st.dataframe(rows, hide_index=True)
    st.caption(
        "IID: held-out examples of the training lengths; OOD: lengths beyond them (from `probe eval`; "
        "before it, IID is the accuracy measured at the end of training)."
    )

    st.subheader("Exact match against length")
    folders = sorted({shared.task_folder(r) for r in runs if shared.has_task(r)})
    if not folders:
        st.info("No run here was trained on a task; `probe train` makes some.", icon=":material/info:")
    for folder, tab in zip(folders, st.tabs(folders) if folders else []):
        with tab:
            members = [r for r in runs if shared.task_folder(r) == folder]
            evaluated = [(r, reports[str(r.path)]) for r in members if reports[str(r.path)]]
            missing = [r for r in members if not reports[str(r.path)]]
            if evaluated:
                figure = accuracy_figure([rep for _, rep in evaluated], folder)
                st.plotly_chart(figure, key=f"accuracy-{folder}")
                guess = guess_of(evaluated[0][1])
                if guess is not None and guess >= GUESS_SHOWN:
                    st.caption(
                        f"A constant guess (the commonest training answer) scores {percent(guess)} on these unseen "
                        "lengths: an OOD at or under it is no better than chance."
                    )
            if missing:
                command = "probe eval " + " ".join(str(r.path) for r in missing)
                st.info(
                    f"{len(missing)} run(s) have no accuracy by length yet; `{command}` measures it, "
                    "or evaluate them here.",
                    icon=":material/info:",
                )
                if st.button(f"Evaluate {len(missing)} run(s) now", key=f"evaluate-{folder}"):
                    from probe.analysis.evaluation import evaluate_run
                    from probe.device import resolve_device
                    from probe.subjects.settings import ReadSettings

                    progress, failed = st.progress(0.0, text="evaluating"), False
                    for i, r in enumerate(missing):
                        progress.progress(i / len(missing), text=f"evaluating {r.label} ({i + 1}/{len(missing)})")
                        try:
                            evaluate_run(r, ReadSettings(device=resolve_device("auto")))
                        except ProbeError as error:
                            st.error(f"Cannot evaluate {r.path}: {error}", icon=":material/error:")
                            failed = True
                    progress.empty()
                    if not failed:
                        st.rerun()
            if any(shared.has_task(r) for r in members):
                predictions(members, folder)

manifests = find_manifests(shared.checkpoints_root())
if manifests:
    st.subheader("Sweep report")
    st.caption(
        "What `probe sweep --report` prints for a sweep whose manifest is in this folder: exact match per "
        "task and PE (mean over seeds) and each PE's mean rank by OOD accuracy (Figures teaser, "
        "mrr-per-category)."
    )
    chosen = st.selectbox("Sweep", manifests, format_func=lambda p: p.stem.removeprefix("sweep-"), key="sweep")
    try:
        summary = manifest_report(chosen)
    except ProbeError as error:
        shared.error_line(error)
    else:
        st.markdown(
            f"**{summary['evaluated']} of {summary['runs']} runs evaluated**; states: "
            + ", ".join(f"{state} {n}" for state, n in summary["states"].items() if n)
            + "."
        )
        st.dataframe(
            [
                {
                    "task": row["task_folder"],
                    "PE": shared.pe_name(row["pe"]),
                    "seeds": len(row["seeds"]),
                    "IID accuracy": percent(row["iid_accuracy"]),
                    "OOD accuracy": percent(row["ood_accuracy"]),
                }
                for row in summary["aggregate"]
            ],
            hide_index=True,
        )
        for key, what in (
            ("mean_reciprocal_rank", "mean reciprocal rank (the paper's figures; higher is better)"),
            ("mean_rank", "mean rank (1 = best)"),
        ):
            if summary.get(key):
                st.caption(what)
                st.dataframe(
                    [
                        {"tasks": group, **{shared.pe_name(pe): round(value, 2) for pe, value in ranks.items()}}
                        for group, ranks in summary[key].items()
                    ],
                    hide_index=True,
                )
        for name, figure in report_figure_objects(summary).items():
            st.plotly_chart(figure, key=f"sweep-{name}")
        if summary["missing"]:
            st.info(
                f"{len(summary['missing'])} run(s) of this sweep have no eval.json yet (`probe sweep` evaluates "
                "them when it runs them).",
                icon=":material/info:",
            )
