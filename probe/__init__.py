"""probe: how positional encoding shapes attention and length generalization (Kazemnejad et al., 2023).

Public entry points are re-exported lazily, and subpackages (``probe.models``, ``probe.tasks``,
``probe.metrics``, ...) load on first attribute access, so ``import probe`` (and ``probe --help``)
stays fast. ``dir(probe)`` lists exactly those: the entry points and the subpackages.
"""

__version__ = "0.1.0"

_LAZY = {
    "PE_KINDS": "probe.models.registry",
    "PAPER_PES": "probe.models.registry",
    "build_model": "probe.models",
    "save_checkpoint": "probe.models",
    "load_checkpoint": "probe.models",
    "load_run": "probe.runs.folders",
    "ModelConfig": "probe.models",
    "PRESETS": "probe.presets",
    "ProbeError": "probe.errors",
    "Tokenizer": "probe.tasks",
    "TrainConfig": "probe.training.train_config",
    "train_run": "probe.training.bookkeeping",
    "train_stacked": "probe.training.bookkeeping",
    "evaluate_run": "probe.analysis.evaluation",
    "extrapolate": "probe.extrapolation.extrapolate",
    "read_eval": "probe.analysis.eval_report",
    "show_predictions": "probe.analysis.predictions",
    "compare_runs": "probe.analysis",
    "compare_report": "probe.analysis",
    "attended_distance_report": "probe.analysis",
    "positions_report": "probe.analysis.positions",
    "perplexity_report": "probe.analysis.perplexity",
    "ReadSettings": "probe.subjects.settings",
}
__all__ = sorted(_LAZY)


def __dir__() -> list[str]:
    """The public names and the subpackages, for a notebook's tab completion (nothing is imported)."""
    import pkgutil

    modules = {info.name for info in pkgutil.iter_modules(__path__) if not info.name.startswith("_")}
    return sorted({*_LAZY, *modules, "__version__"})


def __getattr__(name: str) -> object:
    import importlib
    import importlib.util

    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if not name.startswith("_") and importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return importlib.import_module(f"{__name__}.{name}")  # import binds it here: next access is direct
    raise AttributeError(f"module 'probe' has no attribute {name!r}")
