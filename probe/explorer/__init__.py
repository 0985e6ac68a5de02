"""The Streamlit explorer that `probe app` serves: ``explorer.py`` with its pages in ``views/``.

It ships inside the package, so an installed wheel runs it too. The explorer imports ``probe``;
nothing in ``probe`` imports the explorer (``probe.commands.app`` only locates its script).
"""
