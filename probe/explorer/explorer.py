"""The probe explorer: `probe app` runs this with Streamlit (`streamlit run probe/explorer/explorer.py` works too).

Nine pages, each a thin face over the library calls the CLI makes: Models (`probe eval`),
Attention, Compare (`probe compare`), Distances (`probe distances`), Positions (`probe positions`),
Pretraining (`probe perplexity`), Extrapolation (`probe extrapolate`),
Theorems (`probe theorem`), Reproduction (`probe reproduce`).
The checkpoint folder comes from ``PROBE_CHECKPOINTS`` (default ``checkpoints/``).
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st

from probe.explorer import PAGES, shared

HERE = Path(__file__).resolve().parent

st.set_page_config(page_title="probe explorer", page_icon=":material/insights:", layout="wide")

VIEWS = [
    st.Page(HERE / "views" / f"{name}.py", title=title, icon=icon, url_path=name)
    for name, (title, icon) in PAGES.items()
]
MODELS = VIEWS[0]


def home() -> None:
    """The root URL opens Models at /models. Streamlit serves its default page only at the root (a URL
    naming it finds no page), so the default is this hidden page and every page keeps its own URL."""
    st.switch_page(MODELS)


page = st.navigation([st.Page(home, title="Models", default=True, visibility="hidden"), *VIEWS])
with st.sidebar:
    st.caption(f"Checkpoints: `{shared.checkpoints_root()}`")
    st.caption(
        "Positional encoding and length generalization (Kazemnejad et al., NeurIPS 2023). "
        "Every view here is also a `probe` command."
    )
page.run()
