"""Studies: many runs trained, evaluated and analysed together, on top of everything below them.

- :mod:`~probe.studies.plans`: the named sets of PEs and the seed baseline a study trains;
- :mod:`~probe.studies.reproduce`: `probe reproduce`, a study on the paper's splits, trained scenario by scenario,
  :mod:`~probe.studies.reproduce_report` its report beside the paper's numbers, :mod:`~probe.studies.ranks` the
  ranks across scenarios, :mod:`~probe.studies.summaries` its results as per-scenario files;
- :mod:`~probe.studies.sweep`: `probe sweep`, a grid (``grids/*.toml``) run locally or on a Ray cluster.
"""
