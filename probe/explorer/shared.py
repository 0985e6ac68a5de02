"""What every page of the explorer shares: the checkpoint folder, the runs in it, cached models.

Pages call ``probe.*`` for everything they show; this module only caches those calls and
offers the widgets that pick a run.
"""

from __future__ import annotations

import json
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import streamlit as st

from probe.errors import ProbeError
from probe.models.registry import PE_LABELS
from probe.runs.folders import DEFAULT_CHECKPOINTS, Run, find_runs

if TYPE_CHECKING:
    from streamlit.delta_generator import DeltaGenerator

    from probe.analysis.eval_report import EvalReport
    from probe.models.transformer import PETransformer
    from probe.tasks import Tokenizer

CHECKPOINTS_ENV = "PROBE_CHECKPOINTS"
TRAIN_HINT = "`probe train` makes them (every PE on the default task, a few minutes on a laptop CPU)"


def checkpoints_root() -> Path:
    """The folder `probe app --checkpoints` named (``PROBE_CHECKPOINTS``), default ``checkpoints/``."""
    return Path(os.environ.get(CHECKPOINTS_ENV) or DEFAULT_CHECKPOINTS)


def runs() -> tuple[list[Run], list[tuple[Path, str]]]:
    """Every run under the checkpoint folder, and the broken entries with why (rescanned each rerun).

    A config.json that parses but does not say what a run is (its PE, its seed) counts as broken too.
    """
    found, broken = find_runs(checkpoints_root())
    usable = []
    for run in found:
        try:
            if (
                isinstance(run.pe, str)
                and isinstance(run.seed, int)
                and isinstance(run.config.get("training", {}), dict)
            ):
                usable.append(run)
                continue
        except (KeyError, TypeError, ValueError, AttributeError):
            pass
        broken.append(
            (
                run.path,
                f"{run.path / 'config.json'} does not describe a probe run (its pe, seed or training "
                "entry is missing or malformed)",
            )
        )
    return usable, broken


def has_task(run: Run) -> bool:
    """Trained on a task (by `probe train`), as opposed to a construction `probe theorem --export` wrote."""
    task = run.config.get("task")
    return isinstance(task, dict) and "name" in task and "tokenizer" in run.config


def is_code(run: Run) -> bool:
    """A pretrained code model (`probe pretrain`): its tokenizer is the corpus's BPE, not a task's (the
    resolver's answer: :func:`probe.subjects.resolve.is_language_model`)."""
    from probe.subjects.resolve import is_language_model

    return is_language_model(run.config)


def is_trained(run: Run) -> bool:
    """Trained on a task or pretrained on code: what Compare and Distances read."""
    return has_task(run) or is_code(run)


def task_folder(run: Run) -> str:
    """``scan``, ``addition+scratchpad=full`` or ``code+context=256``: the task folder a run belongs to
    (or its construction)."""
    if not has_task(run) and not is_code(run):
        return f"construction: {run.config.get('construction', run.path.name)}"
    return run.path.parent.parent.name


def pe_name(pe: str) -> str:
    return PE_LABELS.get(pe, pe)


def run_title(run: Run) -> str:
    if not has_task(run) and not is_code(run):
        return f"{task_folder(run)} · {run.path}"
    return f"{task_folder(run)} · {pe_name(run.pe)} · seed {run.seed}"


def stamp(run: Run | Path) -> float:
    """Changes when the run (or the run folder) is re-published, so cached models and analyses follow."""
    try:
        return ((run.path if isinstance(run, Run) else run) / "model.safetensors").stat().st_mtime
    except OSError:
        return 0.0


@st.cache_resource(show_spinner="Loading checkpoint…", max_entries=4)
def cached_model(path: str, version: float) -> PETransformer:
    """One model for every session: read it only under :func:`exclusive`."""
    from probe.runs.folders import load_run

    return load_run(path)


_locks: weakref.WeakKeyDictionary[Any, threading.RLock] = weakref.WeakKeyDictionary()
_locks_guard = threading.Lock()


@contextmanager
def exclusive(model: Any) -> Iterator[None]:
    """Hold ``model`` alone for a forward pass. A ``st.cache_resource`` model is shared by every session, each
    in a thread of its own, and the hooks one reading adds to it would fire in another's pass (whose wrong
    result ``st.cache_data`` would then keep). Reentrant, so a locked reading may call another."""
    with _locks_guard:
        lock = _locks.setdefault(model, threading.RLock())
    with lock:
        yield


def load_model(run: Run) -> PETransformer:
    """The run's model (cached); a ProbeError says what is wrong with the checkpoint."""
    return cached_model(str(run.path), stamp(run))


def tokenizer_of(model: PETransformer) -> Tokenizer:
    from probe.tasks import Tokenizer

    return Tokenizer.from_dict(model.metadata["tokenizer"])


def read_eval(run: Run) -> EvalReport | None:
    """The run's :class:`~probe.analysis.eval_report.EvalReport` (written by `probe eval`), or None if it has
    none or it is unreadable."""
    from probe.analysis.eval_report import read_eval as read

    return read(run.path)


def show_broken(broken: list[tuple[Path, str]]) -> None:
    for path, why in broken:
        where = "" if str(path) in why else f" `{path}`"
        st.error(f"Broken checkpoint entry{where}: {why}", icon=":material/error:")


def require_runs(trained: bool = False) -> tuple[list[Run], list[tuple[Path, str]]] | None:
    """The runs (only those trained on a task or pretrained on code, with ``trained``), or None after
    saying that there are none and which command makes them."""
    found, broken = runs()
    show_broken(broken)
    if trained and found and not any(is_trained(r) for r in found):
        st.info(
            f"No run under `{checkpoints_root()}` was trained on a task or pretrained on code (only constructions "
            f"or bare models). {TRAIN_HINT}; `probe pretrain` makes code models.",
            icon=":material/info:",
        )
        return None
    if trained:
        found = [r for r in found if is_trained(r)]
    if not found:
        st.info(
            f"No checkpoints under `{checkpoints_root()}`. {TRAIN_HINT}; then `probe eval` measures "
            "their accuracy. The **Theorems** page needs none.",
            icon=":material/info:",
        )
        return None
    return found, broken


def pick_runs(by_path: dict[str, Run], key: str) -> list[str]:
    """A multiselect over ``by_path`` (run path -> run), each PE's lowest seed chosen to begin with: one run a
    PE, as the paper's figures draw them. The chosen paths; none where there are no runs."""
    if not by_path:
        return []
    lowest: dict[str, int] = {}
    for run in by_path.values():
        lowest[run.pe_name] = min(lowest.get(run.pe_name, run.seed), run.seed)
    default = [path for path, run in by_path.items() if run.seed == lowest[run.pe_name]]
    return st.multiselect("Runs", list(by_path), default=default, key=key, format_func=lambda p: run_title(by_path[p]))


def models_or_stop(chosen: list[str], external: list[str], code: bool) -> list[str]:
    """The runs picked and the hf: models typed, in that order; the page stops, saying what to pick, when
    there are none."""
    models = [*chosen, *external]
    if not models:
        st.info("Pick at least one run" + (", or type an hf: model." if code else "."), icon=":material/info:")
        st.stop()
    return models


def corpus_flags(options: dict[str, Any]) -> str:
    """`` -o corpus=... -o context=...``: the options of a code folder the command line repeats for hf: models."""
    return "".join(f" -o {k}={options[k]}" for k in ("corpus", "heldout", "context") if k in options)


def pick_run(label: str, choices: list[Run], default_pe: str | None = None, key: str | None = None) -> Run:
    """A select box over ``choices``, preselecting a trained run of ``default_pe`` (lowest seed first)."""
    by_path = {str(r.path): r for r in choices}
    return by_path[pick_model(label, choices, default_pe=default_pe, key=key)]


def pick_model(
    label: str,
    choices: list[Run],
    external: list[str] | None = None,
    default_pe: str | None = None,
    key: str | None = None,
    other_than: str | None = None,
) -> str:
    """A select box over the runs ``choices``, then the ``external`` models (``hf:`` spellings); returns a
    run folder or a spelling. Preselects, other than ``other_than``, the first external model, else a
    trained run of ``default_pe`` (lowest seed first)."""
    by_path = {str(r.path): r for r in choices}
    external = [name for name in external or [] if name not in by_path]
    options = [*by_path, *external]

    def rank(option: str) -> tuple:
        if option in external:
            return option == other_than, False, external.index(option)
        run = by_path[option]
        return option == other_than, True, not is_trained(run), run.pe != default_pe, run.seed

    index = min(range(len(options)), key=lambda i: rank(options[i])) if default_pe or external else 0
    return st.selectbox(
        label, options, index=index, key=key, format_func=lambda p: run_title(by_path[p]) if p in by_path else p
    )


def pick_task_folder(found: list[Run], preferred: str | None = None, key: str | None = None) -> str:
    folders = sorted({task_folder(r) for r in found})
    index = folders.index(preferred) if preferred in folders else 0
    return st.selectbox(
        "Task", folders, index=index, key=key, help="the task folder under the checkpoint folder (task and its options)"
    )


def hf_models(label: str, key: str) -> list[str]:
    """Models typed as ``hf:ID`` or ``hf:FOLDER`` (any model TransformerLens loads), space-separated;
    a word without ``hf:`` is named in an error and left out."""
    from probe.subjects.resolve import split_hf

    typed = st.text_input(
        label,
        key=key,
        placeholder="hf:EleutherAI/pythia-70m hf:./my-model",
        help="any model TransformerLens loads, read with its own tokenizer on this folder's "
        "held-out files at its context: a Hugging Face id in the local cache, or a folder",
    )
    models, others = split_hf(typed.split())
    for word in others:
        st.error(f"`{word}` is not hf:ID or hf:FOLDER; left out", icon=":material/error:")
    return models


HF_ONLY = "held-out code, hf: models only"  # the source offered beside the task folders, and alone without runs


@dataclass(frozen=True)
class Source:
    """What an analysis page reads: the runs of one task folder, or (``HF_ONLY``) the held-out files of a corpus
    for ``hf:`` models typed on the page."""

    folder: str
    members: list[Run]
    code: bool  # code models (hf: models may be typed beside them)
    options: dict[str, Any]  # the corpus options hf: models read (the code runs', or those picked here)


def pick_source(found: list[Run], key: str, preferred: str | None = None) -> Source:
    """A select box over the task folders of the trained runs ``found``, and ``HF_ONLY``: the held-out files of a
    corpus picked here (corpus, held-out share, context T), read by hf: models alone, the one choice where
    there are no trained runs."""
    trained = [r for r in found if is_trained(r)]
    if not trained:
        st.info(
            f"No trained runs under `{checkpoints_root()}`. {TRAIN_HINT}; `probe pretrain` makes code models. "
            "Hugging Face models (hf:) can be measured here on held-out code meanwhile.",
            icon=":material/info:",
        )
    folders = [*sorted({task_folder(r) for r in trained}), HF_ONLY]
    index = folders.index(preferred) if preferred in folders else 0
    folder = st.selectbox(
        "Task",
        folders,
        index=index,
        key=key,
        help="the task folder under the checkpoint folder (task and its options), or held-out code read by "
        "Hugging Face models alone",
    )
    if folder != HF_ONLY:
        members = [r for r in trained if task_folder(r) == folder]
        code = is_code(members[0])
        return Source(folder, members, code, corpus_options(members) if code else {})
    from probe.corpus import CorpusSpec
    from probe.presets import HF_CONTEXT

    default = CorpusSpec.from_options({})
    left, middle, right = st.columns(3)
    corpus = left.text_input(
        "Corpus", value=default.corpus, key=f"{key}-corpus", help="stdlib (Python's own library) or a folder"
    )
    heldout = middle.number_input(
        "Held-out share", min_value=0.01, max_value=0.99, value=default.heldout, key=f"{key}-heldout"
    )
    context = right.number_input(
        "Context T (0: the model's n_ctx, at most 256)",
        min_value=0,
        value=0,
        step=64,
        key=f"{key}-context",
        help=f"windows are read at 1x and 2x T; by default the smaller of the model's n_ctx and {HF_CONTEXT}",
    )
    options = {"corpus": corpus.strip(), "heldout": float(heldout), **({"context": int(context)} if context else {})}
    return Source(folder, [], True, options)


def measure_each(chosen: list[str], by_path: dict[str, Run], what: str, measure: Callable[[str, float], Any]) -> list:
    """``measure(name, stamp)`` of each chosen run or hf: model, under a progress bar; a model that fails is
    named in an error line and left out, and the rest go on."""
    results = []
    progress = st.progress(0.0)
    for i, name in enumerate(chosen):
        title = run_title(by_path[name]) if name in by_path else name
        progress.progress(i / len(chosen), text=f"{what} {title} ({i + 1}/{len(chosen)})…")
        try:
            results.append(measure(name, stamp(by_path[name]) if name in by_path else 0.0))
        except ProbeError as error:
            st.error(f"Left out {name}: {error}", icon=":material/error:")
    progress.empty()
    return results


def examples_per_bucket(where: DeltaGenerator, key: str, help: str) -> int:
    """The "Examples per length bucket" input every analysis page has (1 to 200, default 10, in the URL)."""
    return where.number_input(
        "Examples per length bucket", min_value=1, max_value=200, value=10, key=key, bind="query-params", help=help
    )


def corpus_options(members: list[Run]) -> dict[str, Any]:
    """The corpus options (corpus, split, tokenizer size, context) of a code folder's runs: what
    ``hf:`` models read beside them."""
    return dict(members[0].config["task"]["options"])


def error_line(error: ProbeError | Exception) -> None:
    st.error(str(error), icon=":material/error:")


class SessionClosed(Exception):
    """Raised inside a long computation once the browser session that asked for it has gone."""


def stop_when_closed() -> Callable[..., None]:
    """A ``progress`` callback for a long library call: it raises :class:`SessionClosed` at the call's next
    step once the session that started it has closed (Streamlit lets a script run on after its browser goes,
    so a page would otherwise keep a CPU busy for nobody)."""
    from streamlit.runtime import Runtime
    from streamlit.runtime.scriptrunner import get_script_run_ctx

    context = get_script_run_ctx()

    def check(*_: Any) -> None:
        if context is None or not Runtime.exists():  # outside a server (a test's AppTest): nothing closes
            return
        if not Runtime.instance().is_active_session(context.session_id):
            raise SessionClosed(f"session {context.session_id} closed")

    return check


@dataclass(frozen=True)
class Saved:
    """A report a command wrote beside the runs, as a page shows it without computing it again."""

    data: dict[str, Any]
    runs: list[dict[str, Any]]  # its runs whose weights have not changed since it was written
    written: str  # when, for the caption


def saved_report(
    folder: str,
    stem: str,
    by_path: dict[str, Run],
    file: str | None = None,
    entries: Callable[[dict[str, Any]], list[dict[str, Any]]] = lambda data: data["runs"],
) -> Saved:
    """``<checkpoints>/<folder>/<stem>/<file or stem>.json`` as the command wrote it (empty where there is none or
    it cannot be read), keeping only its ``entries`` (a run's JSON, or an entry holding it under "run") whose run
    was not re-published since (its stamp is older than the file). A kept run's path is spelled as in ``by_path``:
    the command may have named it relative to where it ran, and `probe app` names the folder absolute."""
    path = checkpoints_root() / folder / stem / f"{file or stem}.json"
    spelled = {Path(p).resolve(): p for p in by_path}
    try:
        data, written = json.loads(path.read_text()), path.stat().st_mtime
        runs = [r for r in entries(data) if _fresh(r.get("run", r), spelled, by_path, written)]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return Saved({}, [], "")
    return Saved(data, runs, time.strftime("%Y-%m-%d %H:%M", time.localtime(written)))


def _fresh(run: dict[str, Any], spelled: dict[Path, str], by_path: dict[str, Run], written: float) -> bool:
    """Whether ``run`` (a report's run JSON) names a run of ``by_path`` (``spelled``: its resolved paths) not
    re-published since ``written``; if so its path is rewritten to ``by_path``'s spelling."""
    found = spelled.get(Path(run["path"]).resolve())
    if found is None or stamp(by_path[found]) > written:
        return False
    run["path"] = found
    return True


def saved_comparison(folder: str, a: str, b: str, by_path: dict[str, Run]) -> Saved:
    """The newest report `probe compare` saved under ``<checkpoints>/<folder>/compare/`` with A = ``a`` and ``b``
    among its Bs, neither re-published since, nor its A' baseline; only that comparison (and the baseline) is
    kept. Empty where none."""

    def mtime(path: Path) -> float:
        return path.stat().st_mtime

    def compared(data: dict[str, Any]) -> list[dict[str, Any]]:
        baseline = [data["baseline"]["b"]] if data["baseline"] is not None else []
        return [data["a"], *(c["b"] for c in data["comparisons"]), *baseline]

    for path in sorted((checkpoints_root() / folder / "compare").glob("*.json"), key=mtime, reverse=True):
        saved = saved_report(folder, "compare", by_path, path.stem, compared)
        fresh = {r["path"] for r in saved.runs}
        kept = [c for c in saved.data.get("comparisons", []) if c["b"]["path"] == b]
        baseline = saved.data.get("baseline")
        if kept and {a, b} <= fresh and (baseline is None or baseline["b"]["path"] in fresh):
            return Saved({**saved.data, "comparisons": kept}, saved.runs, saved.written)
    return Saved({}, [], "")
