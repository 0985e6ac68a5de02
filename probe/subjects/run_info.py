"""Which runs an analysis reads, and whether two can be compared: task runs (same task and
vocabulary) and pretrained code runs (same corpus, held-out split, tokenizer and training context,
so both read the same windows); and which layers of two models of different depth are compared.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from probe.corpus import CODE_TASK
from probe.corpus.prepared import run_tokenizer_json
from probe.errors import ProbeError
from probe.models.checkpoint import task_name
from probe.models.registry import FIGURE_ORDER, PE_LABELS, pe_class
from probe.runs.folders import Run, find_runs, task_folder_name, train_command

Lengths = Literal["all", "seen", "unseen"]
Progress = Callable[[str, int, int], None]  # (what, done so far, total)
OnBroken = Callable[[Path, str], None]  # (a run left out, why): said, never dropped silently


def within(progress: Progress | None, label: str, step: int, steps: int) -> Progress | None:
    """``progress`` of one of ``steps`` subjects (``label``, the ``step``-th) reading ``total`` things (inputs,
    layers): counted as if every subject read as many, described as the subject and what it reads now."""
    if progress is None:
        return None

    def report(what: str, done: int, total: int) -> None:
        progress(f"{label} {what}".strip(), step * total + done, steps * total)

    return report


def pe_label(pe: str) -> str:
    return PE_LABELS.get(pe, pe)


# -- task runs ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunInfo:
    """Which run a result is about."""

    path: str
    pe: str
    seed: int
    label: str
    pe_options: Mapping[str, Any] = field(default_factory=dict)  # as given at training (-p)
    inference_options: Mapping[str, Any] = field(default_factory=dict)  # applied at loading (RoPE scaling)
    intervention: Mapping[str, Any] = field(default_factory=dict)  # on its attention at inference (resolved)

    @property
    def pe_name(self) -> str:
        """``rotary``, ``rotary+base=500``: the PE with the options it was trained with and any applied
        at inference (``rotary+factor=4+scaling=yarn``)."""
        from probe.models.registry import pe_folder_name

        return pe_folder_name(self.pe, {**self.pe_options, **self.inference_options})

    @classmethod
    def of(cls, run: Run, label: str | None = None, inference: Mapping[str, Any] | None = None) -> RunInfo:
        """What a report says of ``run`` (the one place a run's info is made): its PE and the options it was
        trained with, with those of ``inference`` applied at loading; ``label`` None: ``Rotary+base=500 (seed 1)``."""
        from probe.models.registry import pe_folder_name

        given = pe_folder_name(run.pe, {**run.pe_options, **(inference or {})})[len(run.pe) :]  # "+base=500"
        seed = "" if run.seed == 0 else f" (seed {run.seed})"
        return cls(
            str(run.path),
            run.pe,
            run.seed,
            label or pe_label(run.pe) + given + seed,
            run.pe_options,
            dict(inference or {}),
        )

    @classmethod
    def external(cls, spelling: str, pe: str = "") -> RunInfo:
        """What a report says of an ``hf:`` model (no run folder): its spelling, and the probe PE its positions
        are drawn as once it is loaded (``""`` before)."""
        return cls(spelling, pe, 0, spelling)

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "pe": self.pe,
            "pe_options": dict(self.pe_options),
            "seed": self.seed,
            "label": self.label,
            "inference_options": dict(self.inference_options),
            **({"intervention": dict(self.intervention)} if self.intervention else {}),
        }


def describe_run(
    config: Mapping[str, Any], where: str = "the checkpoint"
) -> tuple[dict[str, Any], dict[str, Any], int]:
    """(task, tokenizer, n_layers) of a checkpoint's config, or a clear error if it has none."""
    if "task" not in config or "tokenizer" not in config:
        raise ProbeError(f"{where} has no task or tokenizer in its config.json (not a `probe train` run)")
    return config["task"], config["tokenizer"], int(config["model"]["n_layers"])


def check_comparable(a: RunInfo, config_a: Mapping[str, Any], b: RunInfo, config_b: Mapping[str, Any]) -> None:
    """Same task (and options) and vocabulary: else one line saying which differs. Code runs: the
    same corpus, tokenizer and training context (``check_same_corpus``). Depth may differ
    (:func:`paired_layers`)."""
    if is_code_run(config_a) or is_code_run(config_b):
        check_same_corpus(a, config_a, b, config_b)
        return
    task_a, tok_a, _ = describe_run(config_a, a.path)
    task_b, tok_b, _ = describe_run(config_b, b.path)
    if task_a != task_b:
        raise ProbeError(
            f"cannot compare {a.label} ({task_folder_name(task_a['name'], task_a.get('options'))}) "
            f"with {b.label} ({task_folder_name(task_b['name'], task_b.get('options'))}): "
            "the runs were trained on different tasks"
        )
    if tok_a != tok_b:
        raise ProbeError(f"cannot compare {a.label} with {b.label}: their vocabularies differ")


def paired_layers(layers_a: int, layers_b: int) -> list[int]:
    """[layer of A] -> the layer of B that D^(l)(A, B) compares it with: the one at the same relative
    depth, round(l (L_B - 1) / (L_A - 1)) with halves rounded up (layer 0 of B when A has one
    layer). Equal depths pair each layer with itself; first and last layers always pair."""
    if layers_a < 1 or layers_b < 1:
        raise ProbeError(f"models need at least one layer to compare, got {layers_a} and {layers_b}")
    if layers_a == 1:
        return [0]
    span_a, span_b = layers_a - 1, layers_b - 1
    return [(2 * layer * span_b + span_a) // (2 * span_a) for layer in range(layers_a)]


def task_runs(
    root: str | Path,
    task: str,
    options: Mapping[str, Any] | None = None,
    seed: int | None = 0,
    pes: Sequence[str] | None = None,
    on_broken: OnBroken | None = None,
) -> list[Run]:
    """Complete runs of a task folder (optionally one seed, some PEs), in the paper's PE order; ``on_broken``
    hears each run left out as broken (unreadable, or another task's copied into this folder).

    An unknown PE: ProbeError naming it (and the known ones). None found: ProbeError with the exact
    `probe train` command that makes them.
    """
    for pe in pes or ():
        pe_class(pe)
    found, broken = find_runs(root, task, dict(options or {}))
    for path, why in broken if on_broken else ():
        on_broken(path, why)
    runs = [
        r
        for r in found
        if r.config.get("training", {}).get("complete", True)
        and (seed is None or r.seed == seed)
        and (pes is None or r.pe in pes)
    ]
    if not runs:
        folder = task_folder_name(task, dict(options or {}))
        which = "" if pes is None else f" of {', '.join(pes)}"
        raise ProbeError(
            f"no complete runs{which} of {folder}{'' if seed is None else f' seed {seed}'} under {root} "
            "(make them with: "
            f"{train_command(task, dict(options or {}), root, seed=seed if seed else None)})"
        )
    rank = {pe: i for i, pe in enumerate(FIGURE_ORDER)}
    return sorted(runs, key=lambda r: (rank.get(r.pe, len(rank)), r.pe, r.seed))


# -- code runs ---------------------------------------------------------------------------------
def is_code_run(config: Mapping[str, Any]) -> bool:
    """Whether a run's ``config.json`` is a pretrained code model's (``task: {"name": "code"}``)."""
    return task_name(config) == CODE_TASK


def training_context(config: Mapping[str, Any]) -> int:
    """``T``: tokens per training window of a code run."""
    return int(config["task"]["options"]["context"])


def check_same_corpus(a: RunInfo, config_a: Mapping[str, Any], b: RunInfo, config_b: Mapping[str, Any]) -> None:
    """Both code runs, trained on the same corpus (source files, held-out split, tokenizer) at the
    same training context, so both read the same windows: else one line saying what differs."""
    for info, config in ((a, config_a), (b, config_b)):
        if not is_code_run(config):
            raise ProbeError(
                f"cannot compare {a.label} with {b.label}: {info.label} ({info.path}) is not a pretrained "
                "code model and the other is (the runs were trained on different tasks)"
            )
    if config_a.get("corpus", {}).get("fingerprint") != config_b.get("corpus", {}).get("fingerprint"):
        raise ProbeError(
            f"cannot compare {a.label} with {b.label}: they were trained on different corpora "
            "(their fingerprints differ)"
        )
    options_a, options_b = config_a["task"]["options"], config_b["task"]["options"]
    for key, what in (("heldout", "held-out fraction"), ("context", "training context")):
        if options_a.get(key) != options_b.get(key):
            raise ProbeError(
                f"cannot compare {a.label} ({what} {options_a.get(key)}) with {b.label} ({what} "
                f"{options_b.get(key)}): the runs must read the same windows"
            )
    if run_tokenizer_json(a.path) != run_tokenizer_json(b.path):
        raise ProbeError(f"cannot compare {a.label} with {b.label}: their tokenizers differ")
