"""Studies: many runs trained, evaluated and analysed together, on top of everything below them.

- :mod:`~probe.studies.plans`: the named sets of PEs and the seed baseline a study trains;
- :mod:`~probe.studies.reproduce`: `probe reproduce`, a study on the paper's splits reported beside its numbers;
- :mod:`~probe.studies.sweep`: `probe sweep`, a grid (``grids/*.toml``) run locally or on a Ray cluster.
"""
