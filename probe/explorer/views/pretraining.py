"""Pretraining: held-out perplexity against context size of code models (`probe perplexity`; also of models
TransformerLens loads, hf:ID or hf:FOLDER), and their attention on the last tokens of a held-out file
(`probe pretrain` makes the models)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import streamlit as st

from probe.errors import ProbeError
from probe.explorer import shared
from probe.figures import attention_heatmaps, perplexity_figure
from probe.subjects import context_sizes, training_context

if TYPE_CHECKING:
    from torch import Tensor

    from probe.corpus.prepared import PreparedCorpus
    from probe.subjects.subject import Loaded
    from probe.subjects.windows import HeldoutFiles

MEASURE = "measure here"
REPORT = "perplexity.json"

st.header("Pretraining")
st.caption(
    "Code language models, one per PE, trained on windows of T tokens of a corpus split by file (Appendix "
    '"Pretraining at 1.3B Scale"). Each held-out file is read as its last c tokens for c from 0.5T to 2.5T, '
    "and the same last tokens are scored at every c."
)


@st.cache_data(show_spinner="Reading the held-out files at every context size…", show_time=True, max_entries=16)
def measured(paths: tuple[str, ...], versions: tuple[float, ...], max_files: int, options: str = "{}") -> dict:
    """What `probe perplexity RUN... --max-files N` writes to perplexity.json (cached per runs and files);
    ``hf:`` models read the held-out files of the corpus ``options`` (JSON) name at their context."""
    from probe.analysis.perplexity import perplexity_report
    from probe.device import resolve_device
    from probe.subjects.settings import ReadSettings

    settings = ReadSettings(options=json.loads(options), device=resolve_device("auto"))
    report = perplexity_report(list(paths), settings, max_files=max_files)
    return report.to_json()


@st.cache_resource(show_spinner="Loading the held-out files…", max_entries=4)
def corpus_of(path: str, version: float) -> PreparedCorpus:
    """The prepared corpus beside a code run, checked to be the one it was trained on."""
    from probe.corpus.prepared import run_corpus
    from probe.models.checkpoint import read_checkpoint_config

    return run_corpus(path, read_checkpoint_config(path))


@st.cache_data(show_spinner="Running the model…", max_entries=32)
def file_attention(path: str, version: float, index: int, context: int, layer: int) -> tuple[list[str], str, Tensor]:
    """The last ``context`` tokens of held-out file ``index``: their labels, the text, and layer ``layer``'s
    attention maps [head, query, key], the only layer held."""
    from probe.analysis.patterns import capture_layers

    model = shared.cached_model(path, version)
    ids = corpus_of(path, version).heldout_file(index)[-context:]  # [context]
    with shared.exclusive(model):
        maps = capture_layers(model, ids[None].to(model.cfg.device), [layer])[layer][0].cpu()  # [head, query, key]
    tokenizer = corpus_of(path, version).tokenizer  # the run's BPE: run_corpus checks it is the one it trained with
    labels = [t.replace("\n", "↵").replace("\t", "⇥") for t in tokenizer.tokens(ids.tolist())]
    return labels, tokenizer.decode(ids.tolist()), maps


@st.cache_resource(show_spinner="Loading the model and reading the held-out files with its tokenizer…", max_entries=2)
def hf_files(name: str, options: str) -> tuple[Loaded, HeldoutFiles, int]:
    """An hf: model (CPU), the held-out files of the corpus ``options`` (JSON) name in its token ids, and
    the context T it reads them at. The model is every session's: read it only under ``shared.exclusive``."""
    import torch

    from probe.subjects.resolve import reading_of, resolve

    subject = resolve(name)
    loaded = subject.load(torch.device("cpu"))
    reading = reading_of([subject], json.loads(options))
    return loaded, reading.heldout(loaded), reading.context(loaded)


@st.cache_data(show_spinner="Running the model…", max_entries=32)
def hf_file_attention(name: str, options: str, index: int, context: int, layer: int) -> tuple[list[str], str, Tensor]:
    """The last ``context`` tokens of held-out file ``index`` read by an hf: model (its BOS first where its
    tokenizer adds one): their labels, the text, and layer ``layer``'s maps [head, query, key], the only
    layer held."""

    from probe.analysis.patterns import capture_layers

    loaded, files, _ = hf_files(name, options)
    ids = files.heldout_file(index)[-context:].clone()  # [context]
    if loaded.bos_id is not None:
        ids[0] = loaded.bos_id
    with shared.exclusive(loaded.model):
        maps = capture_layers(loaded.model, ids[None], [layer])[layer][0].cpu()  # [head, query, key]
    tokenizer = loaded.model.tokenizer
    labels = [tokenizer.decode([i]).replace("\n", "↵").replace("\t", "⇥") for i in ids.tolist()]
    return labels, tokenizer.decode(ids.tolist()), maps


def bucket_name(bucket: str) -> str:
    return "all files ≥ 2.5x the context" if bucket == "all" else f"files of {bucket} tokens"


def show_perplexity(report: dict) -> None:
    """The figure (chosen buckets) and the table of one bucket: a row per model, a column per context size."""
    protocol, rows = report["protocol"], report["rows"]
    train_context, contexts = protocol["train_context"], protocol["contexts"]
    if not rows:
        st.info(
            "No held-out file is long enough for any context size; give `probe perplexity` more files.",
            icon=":material/info:",
        )
        return
    from probe.analysis.perplexity import windows_read

    st.caption(
        f"{report['n_files']} held-out files; the last {protocol['scored_tokens']} tokens of each scored, "
        f"{windows_read(protocol.get('windows', 'shared'))}; buckets of {protocol['bucket_width']} tokens; "
        f"training context T = {train_context} (dashed)."
    )
    names = list(dict.fromkeys(row["bucket"] for row in rows))
    default = names if len(names) <= 6 else names[:1] + names[-5:]
    chosen = st.multiselect(
        "File-length buckets",
        names,
        default=default,
        format_func=bucket_name,
        key="pretraining-buckets",
        help="a bucket is read at the context sizes all its files have",
    )
    if chosen:
        shown = [row for row in rows if row["bucket"] in chosen]
        figure = perplexity_figure(
            shown, train_context, f"Held-out perplexity against context size (T = {train_context})", buckets=len(chosen)
        )
        st.plotly_chart(figure, key="pretraining-perplexity")
    else:
        st.info("Pick at least one bucket to draw.", icon=":material/info:")
    bucket = st.selectbox("Table of", names, format_func=bucket_name, key="pretraining-table")
    cells = {(row["run"], row["context"]): row["perplexity"] for row in rows if row["bucket"] == bucket}
    columns = {c: f"{c} ({c / train_context:.2g}x)" for c in contexts}
    table = [
        {"model": run["label"], **{columns[c]: cells.get((run["label"], c)) for c in contexts}}
        for run in report["runs"]
    ]
    st.dataframe(
        table,
        hide_index=True,
        column_config={name: st.column_config.NumberColumn(format="%.2f") for name in columns.values()},
    )
    st.caption("Mean perplexity over the bucket's files; empty where the bucket is not read at that context size.")


def saved_reports(root: Path) -> list[Path]:
    """The folders `probe perplexity` wrote a report to: ``<task folder>/perplexity[+options]/``."""
    return sorted(path.parent for path in root.glob(f"*/perplexity*/{REPORT}"))


def read_report(folder: Path) -> dict:
    try:
        report = json.loads((folder / REPORT).read_text())
        if not isinstance(report.get("rows"), list) or "train_context" not in report.get("protocol", {}):
            raise ValueError
        return report
    except (OSError, ValueError, AttributeError, TypeError):
        raise ProbeError(
            f"{folder / REPORT} is not a `probe perplexity` report; rerun `probe perplexity` to rewrite it"
        ) from None


def measure_here(code: list) -> dict | None:
    """A report computed here on the chosen runs of one code folder, or on hf: models reading the held-out
    files of a corpus picked here; None after saying why not."""
    from probe.models.registry import FIGURE_ORDER

    source = shared.pick_source(code, key="pretraining-folder")
    order = {pe: i for i, pe in enumerate(FIGURE_ORDER)}
    members = sorted(source.members, key=lambda r: (order.get(r.pe, len(order)), r.pe_name, r.seed))
    by_path = {str(r.path): r for r in members}
    with st.form("pretraining-settings", border=False):
        chosen = shared.pick_runs(by_path, key="pretraining-runs")
        max_files = st.number_input(
            "Held-out files (at most)",
            min_value=1,
            max_value=100_000,
            value=50,
            key="pretraining-files",
            help="drawn at random; `probe perplexity` reads all",
        )
        external = shared.hf_models(
            "Or Hugging Face models, read instead of the runs (sharing a tokenizer)", "pretraining-hf"
        )
        st.form_submit_button("Measure", type="primary")
    if external:
        options = source.options
        flags = f"--corpus {options['corpus']} --heldout {options['heldout']}" + (
            f" --context {options['context']}" if "context" in options else ""
        )
        try:
            report = measured(tuple(external), (0.0,) * len(external), int(max_files), json.dumps(options))
        except ProbeError as error:
            shared.error_line(error)
            return None
        st.caption(f"Same as: `probe perplexity {' '.join(external)} {flags} --max-files {max_files}`")
        return report
    if not chosen:
        st.info("Pick at least one run, or type an hf: model.", icon=":material/info:")
        return None
    chosen = [p for p in by_path if p in chosen]
    try:
        report = measured(tuple(chosen), tuple(shared.stamp(by_path[p]) for p in chosen), int(max_files))
    except ProbeError as error:
        shared.error_line(error)
        return None
    st.caption(f"Same as: `probe perplexity {' '.join(chosen)} --max-files {max_files}`")
    return report


root = shared.checkpoints_root()
found, broken = shared.runs()
shared.show_broken(broken)
code = [r for r in found if shared.is_code(r)]
reports = saved_reports(root)
if not code and not reports:
    st.info(
        f"No pretrained code models under `{root}`: `probe pretrain` trains them, then `probe perplexity` "
        "measures their held-out perplexity against context size. Hugging Face models (hf:) can be measured "
        "here on the held-out files of a corpus.",
        icon=":material/info:",
    )

st.subheader("Perplexity against context size")
sources = [str(folder) for folder in reports] + [MEASURE]
source = st.selectbox(
    "Report",
    sources,
    key="pretraining-report",
    format_func=lambda s: s if s == MEASURE else str(Path(s).relative_to(root)),
    help="a report `probe perplexity` wrote, or one measured here on runs of this folder",
)
if source == MEASURE:
    data = measure_here(code)
else:
    try:
        data = read_report(Path(source))
    except ProbeError as error:
        shared.error_line(error)
        data = None
if data is not None:
    show_perplexity(data)

st.subheader("Attention on a held-out file")
typed = shared.hf_models("Or a Hugging Face model, read on the held-out files of this corpus", "pretraining-file-hf")
if not code and not typed:
    st.info(
        f"No code runs under `{root}` to read attention from (`probe pretrain` trains them): type an hf: model.",
        icon=":material/info:",
    )
    st.stop()
name = shared.pick_model("Model", code, typed, default_pe="nope", key="pretraining-run")
run = next((r for r in code if str(r.path) == name), None)
try:
    if run is not None:
        model = shared.load_model(run)
        corpus = corpus_of(str(run.path), shared.stamp(run))
        train_context = training_context(run.config)
        names, lengths = corpus.heldout_names, corpus.heldout_lengths().tolist()
        title, limit = f"{shared.pe_name(run.pe)} (seed {run.seed})", model.cfg.n_ctx
    else:
        options = shared.corpus_options(code[:1]) if code else {}
        loaded, files, train_context = hf_files(name, json.dumps(options))
        model = loaded.model
        names, lengths = files.heldout_names, files.heldout_lengths().tolist()
        title, limit = name, loaded.max_length or 2 * train_context  # Rotary and ALiBi read any length
except ProbeError as error:
    st.error(f"Cannot open {name}: {error}", icon=":material/error:")
    st.stop()

sizes = [(m, c) for m, c in context_sizes(train_context) if c <= limit]  # 1x (seen) and 2x (unseen)
longest = max(c for _, c in sizes)
first = next((i for i, n in enumerate(lengths) if n >= longest), max(range(len(lengths)), key=lengths.__getitem__))
left, middle, right, far = st.columns([4, 2, 1, 1])
index = left.selectbox(
    "Held-out file",
    range(len(names)),
    index=first,
    key="pretraining-file",
    format_func=lambda i: f"{names[i]} ({lengths[i]} tokens)",
)
fitting = [(m, c) for m, c in sizes if c <= lengths[index]]
if not fitting:
    st.info(
        f"{names[index]} has {lengths[index]} tokens, fewer than the training context {train_context}: "
        "pick a longer file.",
        icon=":material/info:",
    )
    st.stop()
context = middle.selectbox(
    "Context c (its last c tokens)",
    [c for _, c in fitting],
    index=len(fitting) - 1,
    key="pretraining-context",
    format_func=lambda c: f"{c} tokens ({c / train_context:g}x, {'seen' if c <= train_context else 'unseen'})",
)
layer = right.selectbox("Layer", range(model.cfg.n_layers), key="pretraining-layer")
head = far.selectbox("Head", range(model.cfg.n_heads), key="pretraining-head")
try:
    if run is not None:
        tokens, text, maps = file_attention(str(run.path), shared.stamp(run), index, context, layer)
    else:
        tokens, text, maps = hf_file_attention(name, json.dumps(options), index, context, layer)
    maps = maps[head : head + 1]  # [1, query, key]
except ProbeError as error:
    shared.error_line(error)
    st.stop()
with st.expander(f"The last {context} tokens of {names[index]}"):
    st.code(text, language="python")
figure = attention_heatmaps(tokens, maps, layer, title=f"{title} on {names[index]}: layer {layer}, head {head}")
figure.layout.annotations[0].text = f"head {head}"
st.plotly_chart(figure, key="pretraining-attention")
