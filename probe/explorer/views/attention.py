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

st.header("Attention")
st.caption(
    "`blocks.{l}.attn.hook_pattern` of a checkpoint on `<bos> input <sep> output <eos>`: the gold output of a "
    "test example, or a typed input with a typed output or the model's own greedy continuation."
)


@st.cache_data(show_spinner="Generating the task's test split…", max_entries=8)
def test_split(task: str, options_json: str) -> list:
    """The task's test split (as `probe eval` reads it)."""
    return get_task(task, **json.loads(options_json)).examples("test", seed=0)


@st.cache_data(show_spinner="Running the model…", max_entries=64)
def attention(path: str, version: float, source: str, target: str | None) -> tuple[list[str], Tensor]:
    from probe.analysis.patterns import example_attention

    model = shared.cached_model(path, version)
    return example_attention(model, shared.tokenizer_of(model), source, target)


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

    meta = model.metadata
    modes = ["from the test split", "typed"] if shared.has_task(run) else ["typed"]
    mode = st.radio("Example", modes, horizontal=True, key="attention-mode")
    source, target = None, None
    if mode == "from the test split":
        task_name, options = meta["task"]["name"], meta["task"].get("options", {})
        try:
            examples = test_split(task_name, json.dumps(options, sort_keys=True))
        except ProbeError as error:
            shared.error_line(error)
            st.stop()
        by_length: dict[int, list] = {}
        for example in examples:
            by_length.setdefault(example.length, []).append(example)
        task = get_task(task_name, **options)
        left, right = st.columns([1, 3])
        lengths = sorted(by_length)
        seen = [i for i, n in enumerate(lengths) if task.is_seen(n)]
        length = left.selectbox(
            "Length bucket λ",
            lengths,
            index=seen[-1] if seen else 0,
            format_func=lambda n: f"{n} ({'seen' if task.is_seen(n) else 'unseen'})",
            key="attention-length",
            help="preselected: the longest training length",
        )
        choices = by_length[length][:50]
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
