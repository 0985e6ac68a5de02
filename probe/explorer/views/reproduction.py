"""Reproduction: a `probe reproduce` report, ours beside the paper's released numbers."""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from probe.explorer import shared
from probe.studies.reproduce_report import figures, find_reports, markdown, read_report

st.header("Reproduction")
root = shared.checkpoints_root()
found = find_reports(root) + find_reports(Path("checkpoints"))
found = list(dict.fromkeys(found))
if not found:
    st.info(
        f"No `probe reproduce` report under `{root}` or `checkpoints/`. `probe reproduce --dry-run` says what "
        "the study trains and how long it takes here; `probe reproduce` runs it and writes the report.",
        icon=":material/info:",
    )
else:
    chosen = st.selectbox("report", found, format_func=str)
    report = read_report(chosen)
    if report is None:
        st.error(f"{chosen}/report.json cannot be read; rerun `probe reproduce` to rewrite it.")
    else:
        st.caption(
            f"`{chosen}`: the {report['scale']} study. Solid lines are ours, dotted the paper's released "
            "runs (T5-base decoder, 40K steps of 64, 3 seeds)."
        )
        st.markdown(markdown(report))
        for name, figure in figures(report).items():
            st.plotly_chart(figure, key=f"reproduction-{name}")
