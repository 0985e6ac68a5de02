"""The probe explorer: `probe app` runs this with Streamlit (`streamlit run probe/explorer/explorer.py` works too).

Eight pages, each a thin face over the library calls the CLI makes: Models (`probe eval`),
Attention, Compare (`probe compare`), Distances (`probe distances`), Positions (`probe positions`),
Pretraining (`probe perplexity`),
Theorems (`probe theorem`), Reproduction (`probe reproduce`).
The checkpoint folder comes from ``PROBE_CHECKPOINTS`` (default ``checkpoints/``).
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from probe.explorer import shared

HERE = Path(__file__).resolve().parent

st.set_page_config(page_title="probe explorer", page_icon=":material/insights:", layout="wide")

MODELS = st.Page(HERE / "views" / "models.py", title="Models", icon=":material/table_chart:", url_path="models")
PAGES = [
    MODELS,
    st.Page(HERE / "views" / "attention.py", title="Attention", icon=":material/grid_on:", url_path="attention"),
    st.Page(HERE / "views" / "compare.py", title="Compare", icon=":material/compare_arrows:", url_path="compare"),
    st.Page(HERE / "views" / "distances.py", title="Distances", icon=":material/bar_chart:", url_path="distances"),
    st.Page(HERE / "views" / "positions.py", title="Positions", icon=":material/pin_drop:", url_path="positions"),
    st.Page(HERE / "views" / "pretraining.py", title="Pretraining", icon=":material/code:", url_path="pretraining"),
    st.Page(HERE / "views" / "theorems.py", title="Theorems", icon=":material/function:", url_path="theorems"),
    st.Page(HERE / "views" / "reproduction.py", title="Reproduction", icon=":material/fact_check:", url_path="reproduction"),
]


def home() -> None:
    """The root URL opens Models at /models. Streamlit serves its default page only at the root (a URL
    naming it finds no page), so the default is this hidden page and every page keeps its own URL."""
    st.switch_page(MODELS)


page = st.navigation([st.Page(home, title="Models", default=True, visibility="hidden"), *PAGES])
with st.sidebar:
    st.caption(f"Checkpoints: `{shared.checkpoints_root()}`")
    st.caption("Positional encoding and length generalization (Kazemnejad et al., NeurIPS 2023). "
               "Every view here is also a `probe` command.")
page.run()
