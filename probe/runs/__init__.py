"""Run folders: where runs live and how they are found (:mod:`~probe.runs.folders`), who may write into
one (:mod:`~probe.runs.locks`), and the authors' released models written as runs (:mod:`~probe.runs.released`).

A run folder is ``<checkpoints>/<task>[+<option>=<value>...]/<pe>[+<option>=<value>...]/seed<k>/``: weights
(safetensors), ``config.json``, and beside them the training log, state and evaluations.
"""

from probe.runs.folders import LAST, Run, find_runs, load_run, resolve_run, run_dir, task_folder_name

__all__ = ["LAST", "Run", "find_runs", "load_run", "resolve_run", "run_dir", "task_folder_name"]
