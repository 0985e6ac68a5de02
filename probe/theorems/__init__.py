"""Theorems 1 and 2 (Appendix C): explicit NoPE weights that represent absolute and relative positions, and
NoPE layers that reproduce a relative bias (:mod:`~probe.theorems.constructions`), and the numerical checks of
what they claim (:mod:`~probe.theorems.checks`), behind `probe theorem` and the explorer's Theorems page.
"""
