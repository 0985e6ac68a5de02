"""The Streamlit explorer that `probe app` serves: ``explorer.py`` with its pages in ``views/``.

It ships inside the package, so an installed wheel runs it too. The explorer imports ``probe``;
nothing in ``probe`` imports the explorer's pages (``server`` only locates its script).
"""

PAGES: dict[str, tuple[str, str]] = {  # views/<name>.py, served at /<name>: (title, icon), in the sidebar's order
    "models": ("Models", ":material/table_chart:"),
    "attention": ("Attention", ":material/grid_on:"),
    "compare": ("Compare", ":material/compare_arrows:"),
    "distances": ("Distances", ":material/bar_chart:"),
    "positions": ("Positions", ":material/pin_drop:"),
    "pretraining": ("Pretraining", ":material/code:"),
    "extrapolation": ("Extrapolation", ":material/trending_up:"),
    "theorems": ("Theorems", ":material/function:"),
    "reproduction": ("Reproduction", ":material/fact_check:"),
}
