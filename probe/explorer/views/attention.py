"""Attention: one checkpoint's attention maps on one example, per layer and head (`probe.analysis.patterns`)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import streamlit as st

from probe.errors import ProbeError
from probe.explorer import shared
from probe.figures import attention_heatmaps
from probe.tasks import get as get_task
from probe.tasks.tokenizer import SPECIALS

if TYPE_CHECKING:
    from torch import Tensor

    from probe.subjects.examples import Bucket
    from probe.tasks import Tokenizer

PER_BUCKET = 50  # examples offered per length bucket

st.header("Attention")
st.caption(
    "`blocks.{l}.attn.hook_pattern` of a checkpoint on one example in its sequence format: the gold output of an "
    "example of a length bucket, or a typed input with a typed output or the model's own greedy continuation."
)


@st.cache_data(show_spinner="Generating the task's examples…", max_entries=8)
def buckets(task: str, options_json: str) -> list[Bucket]:
    """Up to :data:`PER_BUCKET` examples of every length bucket, drawn as `probe compare` draws them: from the
    test split, the seen lengths from the valid split where the test split has none (the paper's splits)."""
    from probe.subjects.examples import sample_buckets

    return sample_buckets(get_task(task, **json.loads(options_json)), PER_BUCKET)


@st.cache_data(show_spinner="Running the model…", max_entries=64)
def attention(path: str, version: float, source: str, target: str | None) -> tuple[list[str], Tensor]:
    """Tokens and maps [layer, head, query, key] of one example (its greedy continuation where ``target`` is
    None), read with the shared model held alone."""
    from probe.analysis.patterns import example_attention

    model = shared.cached_model(path, version)
    with shared.exclusive(model):
        return example_attention(model, shared.tokenizer_of(model), source, target)


def sequence_format(tokenizer: Tokenizer) -> str:
    """The run's sequence format, e.g. ``<bos> input <sep> output <eos>``, or ``input output <eos>`` under the
    authors' protocol for a task they give no separator."""
    return " ".join(
        [*(["<bos>"] if tokenizer.bos else []), "input", *(["<sep>"] if tokenizer.separator else []), "output <eos>"]
    )


found = shared.require_runs()
if found is not None:
    runs = [r for r in found[0] if not shared.is_code(r)]
    if len(runs) < len(found[0]):
        st.caption(
            "Code models (`probe pretrain`, `probe import`) show their attention on held-out files on the "
            "**Pretraining** page."
        )
    if not runs:
        st.stop()
    run = shared.pick_run("Checkpoint", runs, default_pe="nope", key="attention-run")
    try:
        model = shared.load_model(run)
        if "tokenizer" not in model.metadata:
            raise ProbeError("its config.json has no tokenizer, so no text can be fed to it")
        tokenizer = shared.tokenizer_of(model)
    except ProbeError as error:
        st.error(f"Cannot open {run.path}: {error}", icon=":material/error:")
        st.stop()

    st.caption(f"This run's sequences read `{sequence_format(tokenizer)}`.")
    meta = model.metadata
    modes = ["from the task", "typed"] if shared.has_task(run) else ["typed"]
    mode = st.radio("Example", modes, horizontal=True, key="attention-mode")
    source, target = None, None
    if mode == "from the task":
        try:
            by_length = {
                b.length: b
                for b in buckets(meta["task"]["name"], json.dumps(meta["task"].get("options", {}), sort_keys=True))
            }
        except ProbeError as error:
            shared.error_line(error)
            st.stop()
        left, right = st.columns([1, 3])
        lengths = list(by_length)
        seen = [i for i, n in enumerate(lengths) if by_length[n].seen]
        length = left.selectbox(
            "Length bucket λ",
            lengths,
            index=seen[-1] if seen else 0,
            format_func=lambda n: f"{n} ({'seen' if by_length[n].seen else 'unseen'}, {by_length[n].split} split)",
            key="attention-length",
            help="seen: a training length (drawn from the valid split where the test split has none); "
            + ("preselected: the longest seen bucket" if seen else "this task has no seen bucket to draw"),
        )
        choices = list(by_length[length].examples)
        index = right.selectbox(
            "Example",
            range(len(choices)),
            key="attention-example",
            format_func=lambda i: f"{i + 1}. {choices[i].source[:120]}",
        )
        example = choices[index]
        source = example.source
        gold = st.toggle("Gold output (off: the model's own greedy output)", value=True, key="attention-gold")
        target = example.target if gold else None
    else:
        source = st.text_input("Input", key="attention-input", placeholder="words of the task's vocabulary")
        typed = st.text_input("Output (empty: the model's own greedy continuation)", key="attention-output")
        target = typed.strip() or None
        with st.expander("This task's vocabulary"):
            st.code(" ".join(tokenizer.vocab[len(SPECIALS) :]), language=None, wrap_lines=True)
        if not source.strip():
            st.info("Type an input to see the attention maps.", icon=":material/keyboard:")
            st.stop()

    try:
        tokens, patterns = attention(str(run.path), shared.stamp(run), source, target)
    except ProbeError as error:
        shared.error_line(error)
        st.stop()

    st.markdown(f"**{len(tokens)} tokens:** `{' '.join(tokens)}`")
    n_layers = patterns.shape[0]
    shown = list(range(n_layers)) if n_layers <= 4 else [0, n_layers - 1]
    layers = st.multiselect("Layers", list(range(n_layers)), default=shown, key="attention-layers")
    for layer in layers:
        st.plotly_chart(
            attention_heatmaps(tokens, patterns, layer, title=f"{shared.run_title(run)}: layer {layer}"),
            key=f"attention-layer-{layer}",
        )
