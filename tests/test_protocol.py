"""The authors' training protocol (McGill-NLP/length-generalization at 40f8a44): their sequences, their
dropout sites, random batches, and the best checkpoint on IID validation, each against what their
code does, written out by hand."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import tiny_model

from probe.errors import ProbeError
from probe.models import load_checkpoint
from probe.models.model_config import resolve_config
from probe.models.registry import PE_CLASSES
from probe.models.transformer import PETransformer
from probe.runs.folders import LAST, find_runs
from probe.tasks import Example, Tokenizer, get
from probe.tasks.batches import encode, epoch_batches
from probe.tasks.decoding import evaluate_examples, teacher_forced_exact_match
from probe.training.bookkeeping import train_run
from probe.training.dropout import dropout, hook_sites
from probe.training.loop import target_loss
from probe.training.selection import Selection, best_of, every
from probe.training.sources import TaskSource
from probe.training.train_config import TrainConfig, settings_differ

CPU = torch.device("cpu")


# -- sequences ------------------------------------------------------------------------------------


def test_the_paper_split_trains_the_authors_way_and_other_splits_probes():
    assert TrainConfig(task="scan", task_options={"split": "paper"}).protocol == "authors"
    assert TrainConfig(task="scan").protocol == "probe"
    assert TrainConfig(task="scan", task_options={"split": "paper"}, protocol="probe").protocol == "probe"
    authors = TrainConfig(task="scan", task_options={"split": "paper"}, steps=4000)
    assert authors.eval_every == 200  # their 2,000 of 40,000 steps, scaled
    assert authors.model_config(vocab_size=10).eps == 1e-6 and TrainConfig().model_config(vocab_size=10).eps == 1e-5


@pytest.mark.parametrize(
    "task, options, separator",
    [
        ("scan", {"split": "paper"}, True),  # configs/data/scan.jsonnet: "[SEP] "
        ("reverse", {"split": "paper"}, True),  # s2s_reverse.jsonnet: "[SEP] "
        ("addition", {}, False),  # s2s_addition.jsonnet: ''
    ],
)
def test_an_authors_sequence_is_source_separator_target_eos_without_bos(task, options, separator):
    source = TaskSource(task, options, seed=0, authors=True)
    words = Tokenizer(source.task.vocabulary())  # probe's format, to spell the words
    examples = source.task.examples("train", n=5, seed=0)
    data = source.training_set(0)
    sep = [words.sep_id] if separator else []
    for example in examples[:1]:  # the first training example, found in the encoded set
        expected = words.encode(example.source) + sep + words.encode(example.target) + [words.eos_id]
        rows = [row[:length].tolist() for row, length in zip(data.tokens, data.lengths)]
        assert expected in rows
        start = data.target_start[rows.index(expected)]
        assert start == len(words.encode(example.source)) + len(sep)
    assert not (data.tokens == words.bos_id).any()
    assert (data.tokens == words.sep_id).any() == separator
    probe = TaskSource(task, options, seed=0).training_set(0)
    assert (probe.tokens[:, 0] == words.bos_id).all()


def test_a_run_without_bos_tells_transformer_lens(tmp_path):
    config = TrainConfig(
        task="scan",
        pe="nope",
        task_options={"split": "paper"},
        steps=2,
        batch_size=4,
        eval_examples=8,
        model=tiny_model(1),
    )
    train_run(config, tmp_path / "run", CPU)
    model = load_checkpoint(tmp_path / "run")
    assert model.cfg.default_prepend_bos is False
    assert model.to_str_tokens("Solve: jump") == ["Solve", "##:", "jump"]  # no <bos> in front
    saved = Tokenizer.from_dict(model.metadata["tokenizer"])
    assert saved.encode_prompt("Solve: jump") == [*saved.encode("Solve: jump"), saved.sep_id]


def test_tokenizers_saved_before_formats_read_as_probes():
    words = Tokenizer(["a", "b"])
    legacy = {key: value for key, value in words.to_dict().items() if key not in ("bos", "separator")}
    restored = Tokenizer.from_dict(legacy)
    assert restored.bos and restored.separator and restored.encode_prompt("a") == [0, 4, 3]


def test_runs_saved_before_protocols_are_probes_runs():
    stored = TrainConfig(task="scan", task_options={"split": "paper"}, protocol="probe").to_dict()
    del stored["protocol"], stored["weight_decay_groups"]  # a run saved before either setting existed
    assert settings_differ(stored, TrainConfig(task="scan", task_options={"split": "paper"}).to_dict()) == [
        "protocol 'probe', asked 'authors'",
        "eval_every 0, asked 200",  # probe's protocol publishes the last step
        "weight_decay_groups 'probe', asked 'authors'",
    ]


# -- batches --------------------------------------------------------------------------------------


def test_authors_batches_are_a_plain_shuffle_and_probes_group_by_length():
    task = get("scan", split="paper")
    data = encode(task.examples("train", n=2048, seed=0), Tokenizer.for_task(task))
    generator = torch.Generator().manual_seed(0 * 100_003 + 3)
    assert [b.tolist() for b in epoch_batches(data, 64, 0, 3, grouped=False)] == [
        b.tolist() for b in torch.randperm(len(data), generator=generator).split(64)
    ]

    def spread(batches):  # mean within-batch range of lengths
        return sum(float(data.lengths[b].max() - data.lengths[b].min()) for b in batches) / len(batches)

    assert spread(epoch_batches(data, 64, 0, 3)) < 0.25 * spread(epoch_batches(data, 64, 0, 3, grouped=False))


# -- dropout --------------------------------------------------------------------------------------


def _model(pe: str = "nope", **overrides) -> PETransformer:
    sizes = {**dict(n_layers=2, d_model=64, n_heads=2, d_head=32, d_mlp=128), **overrides}
    return PETransformer(resolve_config(pe, vocab_size=20, **sizes))


def _site_outputs(model: PETransformer, tokens: torch.Tensor, names: list[str]) -> dict[str, torch.Tensor]:
    _, cache = model.run_with_cache(tokens, names_filter=lambda name: name in names)
    return {name: cache[name] for name in names}


@pytest.mark.parametrize("pe", ["nope", "ape"])
def test_dropout_fires_at_each_of_the_authors_sites_in_training_and_nowhere_in_eval(pe):
    """T5Stack: dropout(embeddings [+ APE]); per layer dropout on the attention probabilities, the
    attention output, ReLU's output and the feed-forward output; dropout after the final norm."""
    torch.manual_seed(0)
    model = _model(pe)
    tokens = torch.randint(4, 20, (8, 24))
    names = hook_sites(model, "authors")
    assert names == [
        "blocks.0.hook_resid_pre",
        "blocks.0.hook_attn_out",
        "blocks.0.mlp.hook_post",
        "blocks.0.hook_mlp_out",
        "blocks.1.hook_attn_out",
        "blocks.1.mlp.hook_post",
        "blocks.1.hook_mlp_out",
        "ln_final.hook_normalized",
    ]
    model.eval()
    clean = _site_outputs(model, tokens, names)
    with dropout(model, 0.5, "authors"):
        assert all(block.attn.attn_dropout == 0.5 for block in model.blocks)
        still = _site_outputs(model, tokens, names)
        model.train()
        dropped = _site_outputs(model, tokens, names)
        model.eval()
    assert all(block.attn.attn_dropout == 0.0 for block in model.blocks)
    for name in names:
        assert torch.equal(still[name], clean[name]), name  # eval: nothing dropped
        own = float((clean[name] == 0).float().mean())  # ReLU's own zeros
        zeros = float((dropped[name] == 0).float().mean())
        assert abs(zeros - (1 - 0.5 * (1 - own))) < 0.1, (name, zeros, own)  # half of the rest dropped
    assert "hook_embed" not in names  # probe's site: the token embedding before the APE


@pytest.mark.parametrize("pe, hooked", [("nope", False), ("nope", True), ("alibi", False), ("t5", True)])
def test_attention_probabilities_are_dropped_on_every_path(pe, hooked):
    """z = pattern @ v with the pattern from q and k (and the PE's bias) in eval; not so in training."""
    torch.manual_seed(0)
    model = _model(pe)
    tokens = torch.randint(4, 20, (4, 16))
    names = ["blocks.0.attn.hook_q", "blocks.0.attn.hook_k", "blocks.0.attn.hook_v", "blocks.0.attn.hook_z"]
    if hooked:
        names.append("blocks.0.attn.hook_pattern")  # the explicit path
    if model.pe.adds_bias:
        names.append("blocks.0.attn.hook_pos_bias")

    def mismatch() -> float:
        cache = _site_outputs(model, tokens, names)
        q, k, v = (cache[f"blocks.0.attn.hook_{x}"] for x in "qkv")  # [batch, pos, head, d_head]
        scores = torch.einsum("bqhd,bkhd->bhqk", q, k) / model.blocks[0].attn.attn_scale
        if model.pe.adds_bias:
            scores = scores + cache["blocks.0.attn.hook_pos_bias"].to(scores.dtype)
        scores = scores.masked_fill(torch.ones(16, 16, dtype=torch.bool).triu(1), float("-inf"))
        z = torch.einsum("bhqk,bkhd->bqhd", scores.softmax(-1), v)
        return float((z - cache["blocks.0.attn.hook_z"]).abs().max())

    with dropout(model, 0.5, "authors"):
        model.eval()
        assert mismatch() < 1e-5
        model.train()
        for name in hook_sites(model, "authors"):  # only the probabilities' dropout left upstream of z
            model.mod_dict[name]._forward_hooks.clear()
        assert mismatch() > 0.05
    model.eval()


# -- selection ------------------------------------------------------------------------------------


def test_selection_keeps_the_earliest_of_tied_best_checkpoints():
    history = [(200, 0.50), (400, 0.90), (600, 0.90), (800, 0.70), (1000, 0.90)]
    assert best_of(history) == (400, 0.90)
    assert best_of([(200, 0.0), (400, 0.0)]) == (200, 0.0)
    model = torch.nn.Linear(1, 1, bias=False)
    selection = Selection()
    for step, score in history:
        model.weight.data.fill_(step)
        selection.consider(step, score, model)
    assert selection.best == (400, 0.90) and float(selection.best_state["weight"]) == 400.0
    assert every(40_000) == 2000 and every(4000) == 200 and every(10) == 1


def _bigram_model(tokenizer: Tokenizer, table: dict[int, int]) -> PETransformer:
    """A model whose next token is ``table[current token]``: one-hot embeddings, blocks that add
    nothing, and an unembedding that reads the table."""
    vocab = len(tokenizer)
    model = _model(d_model=32, n_layers=1)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.zero_()
        model.embed.W_E[:vocab, :vocab] = torch.eye(vocab)  # ids past the vocabulary stay zero
        model.ln_final.w.fill_(1.0)
        for current, following in table.items():
            model.unembed.W_U[current, following] = 10.0
    return model.eval()


@pytest.mark.parametrize("bos", [True, False])
def test_teacher_forced_exact_match_is_greedy_decodings(bos):
    tokenizer = Tokenizer(["a", "b", "c", "d"], bos=bos)
    a, b, c, d = (tokenizer.encode(w)[0] for w in "abcd")
    table = {tokenizer.sep_id: a, a: b, b: tokenizer.eos_id, c: d, d: c}
    model = _bigram_model(tokenizer, table)
    examples = [
        Example("c d", "a b", 2),
        Example("d", "a b", 1),
        Example("c", "a", 1),
        Example("c", "a b c", 1),
        Example("d c", "b a", 2),
        Example("c c", "a b", 2),
    ]
    greedy = evaluate_examples(model, tokenizer, examples).correct
    assert greedy == [True, True, False, False, False, True]
    assert teacher_forced_exact_match(model, encode(examples, tokenizer), batch_size=4) == greedy
    assert teacher_forced_exact_match(model, encode(examples, tokenizer), batch_size=1) == greedy


def test_teacher_forced_batches_go_shortest_first_so_each_pads_to_about_its_own_length():
    """Lengths 5, 1, 5, 1, 3, 1 in batches of 2: (1, 1), (1, 3), (5, 5), 2 x (1 + 3 + 5) = 18 padded tokens, where
    the set's order pads every batch to 5 (30 tokens)."""
    from probe.tasks.decoding import length_batches

    lengths = torch.tensor([5, 1, 5, 1, 3, 1])
    batches = length_batches(lengths, 2)
    assert [b.tolist() for b in batches] == [[1, 3], [5, 4], [0, 2]]
    assert sum(int(lengths[b].max()) * len(b) for b in batches) == 18


# -- a run under the protocol ---------------------------------------------------------------------


def test_the_best_validation_checkpoint_is_published_and_the_last_kept_beside_it(tmp_path):
    config = TrainConfig(
        task="reverse",
        pe="nope",
        task_options={"split": "paper", "train_length": 4},
        steps=30,
        batch_size=16,
        eval_examples=32,
        eval_every=5,
        lr=3e-3,
        checkpoint_every=10,
        model=tiny_model(1),
    )
    assert config.protocol == "authors"
    result = train_run(config, tmp_path / "run", CPU)
    stored = json.loads((tmp_path / "run" / "config.json").read_text())
    selection = stored["training"]["selection"]
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    history = [(r["step"], r["valid_exact_match"]) for r in logged if "valid_exact_match" in r]
    assert [step for step, _ in history] == [5, 10, 15, 20, 25, 30]
    assert [tuple(h) for h in selection["history"]] == history
    best_step = best_of(history)[0]
    assert stored["training"]["selected_step"] == best_step and stored["metrics"]["last"]["step"] == 30
    assert result.iid_accuracy == stored["metrics"]["iid_accuracy"]
    last = tmp_path / "run" / LAST
    assert (last / "config.json").is_file() == (best_step != 30)
    runs, _ = find_runs(tmp_path)
    assert [run.path for run in runs] == [tmp_path / "run"]  # last/ is not a run of its own


# -- packing --------------------------------------------------------------------------------------


def test_packing_puts_every_example_once_in_rows_no_longer_than_the_longest():
    words = Tokenizer(["a", "b", "c"], bos=False)
    examples = [Example("a b c", "c b a", 3), Example("a", "b", 1), Example("b", "c", 1), Example("a b", "c", 2)]
    data = encode(examples, words)  # lengths 8, 4, 4, 5 (source [sep] target <eos>)
    tokens, mask, segments = data.packed_batch(torch.arange(4), width=8)
    assert tokens.shape == (3, 8)  # first fit, longest first: [8], [5], [4 + 4]
    assert segments.tolist() == [[0] * 8, [0] * 5 + [-1] * 3, [0] * 4 + [1] * 4]
    assert tokens[2].tolist() == data.tokens[1, :4].tolist() + data.tokens[2, :4].tolist()
    # scored: each example's target and <eos>, never the first token of the next example
    assert mask[2].tolist() == [False, True, True, False, False, True, True]  # "a [sep] b <eos>", "b [sep] c <eos>"
    assert int(mask.sum()) == int(data.batch(torch.arange(4))[1].sum())
    tokens, mask, segments = data.packed_batch(torch.arange(4))  # rows of up to 16: [8 + 5], [4 + 4]
    assert segments.tolist() == [[0] * 8 + [1] * 5, [0] * 4 + [1] * 4 + [-1] * 5]
    assert data.packed_batch(torch.arange(4), factor=1)[2].tolist() == [[0] * 8, [0] * 5 + [-1] * 3, [0] * 4 + [1] * 4]


def test_a_runs_packing_width_is_one_of_its_settings_and_a_run_from_before_it_packed_twice_the_longest(tmp_path):
    """``pack_width`` cuts the batches (rows of the longest example), keeps stacked runs of two widths apart, and
    is refused under 1; a checkpoint older than the setting trained at 2."""
    from probe.training.stacked import _batch_cutter, stack_key
    from probe.training.steps import Engine

    wide, narrow = TrainConfig(task="scan", pack=True), TrainConfig(task="scan", pack=True, pack_width=1)
    assert wide.pack_width == 2 and stack_key(wide) != stack_key(narrow)
    for bad in (0, 1.5):
        with pytest.raises(ProbeError, match="pack_width must be a whole number, at least 1"):
            TrainConfig(task="scan", pack=True, pack_width=bad)
    old = {k: v for k, v in wide.to_dict().items() if k != "pack_width"}
    assert settings_differ(old, wide.to_dict()) == [] and settings_differ(old, narrow.to_dict()) == [
        "pack_width 2, asked 1"
    ]
    words = Tokenizer(["a", "b", "c"], bos=False)
    data = encode([Example("a b c", "c b a", 3), Example("a", "b", 1), Example("a b", "c", 2)], words)  # 8, 4, 5

    def rows(config):
        lead = type("Lead", (), {"engine": Engine(), "config": config})
        return tuple(_batch_cutter(lead, data, grouped=False)(torch.arange(3))[0].shape)

    assert rows(narrow) == (3, 8) and rows(wide) == (2, 13)  # [8], [5], [4] against [8 + 5], [4]


def test_packing_is_refused_where_it_would_change_the_logits():
    for pe in ("fire", "cope"):
        with pytest.raises(ProbeError, match="--pack does not apply"):
            TrainConfig(task="scan", pe=pe, pack=True)
    model = _model("fire")
    with pytest.raises(ProbeError, match="cannot train on packed rows"):
        model(torch.zeros(1, 4, dtype=torch.long), segments=torch.zeros(1, 4, dtype=torch.long))


@pytest.mark.parametrize("pe", sorted(kind for kind, cls in PE_CLASSES.items() if cls.packable()))
def test_a_packed_batch_gives_each_example_the_loss_and_gradient_it_has_alone(pe):
    """Packed rows against the padded batch of the same examples: the same mean target loss and the
    same gradient, for every PE that says it can be packed."""
    task = get("scan", split="paper")
    data = encode(task.examples("train", n=24, seed=0), Tokenizer.for_task(task, authors=True))
    torch.manual_seed(0)
    model = (
        PETransformer(
            resolve_config(
                pe, vocab_size=len(Tokenizer.for_task(task)), n_layers=2, d_model=32, n_heads=2, d_head=16, d_mlp=64
            )
        )
        .double()
        .train()
    )
    index = torch.arange(24)
    packed, padded = data.packed_batch(index), data.batch(index)
    assert packed[0].numel() < 0.8 * padded[0].numel()

    def loss_and_grad(*batch):
        model.zero_grad()
        loss = target_loss(model, *batch)
        loss.backward()
        return loss.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]

    loss, grads = loss_and_grad(*packed)
    expected, expected_grads = loss_and_grad(*padded)
    # target_loss takes the cross-entropy in float32: agreement to its rounding (a leak across examples
    # or a shifted position moves the loss by percents)
    assert torch.allclose(loss, expected, rtol=1e-6)
    assert all(torch.allclose(g, e, rtol=1e-4, atol=1e-7) for g, e in zip(grads, expected_grads))


def test_the_cost_estimate_counts_the_tokens_a_packed_study_pays(tmp_path):
    """`probe reproduce --dry-run` prices a packed run by its packed batches: between the real tokens and
    the padded ones."""
    import dataclasses

    from probe.studies.reproduce import plan
    from probe.studies.sweep.cost import mean_batch_tokens

    [run, *_] = plan("reduced", tmp_path, tasks=["scan"])
    assert run.config.pack and run.config.protocol == "authors"
    data = TaskSource("scan", {"split": "paper"}, 0, authors=True).training_set(0)
    real = float(data.lengths.float().mean()) * run.config.batch_size
    padded = mean_batch_tokens(dataclasses.replace(run, config=dataclasses.replace(run.config, pack=False)))
    assert real <= mean_batch_tokens(run) < 0.7 * padded
