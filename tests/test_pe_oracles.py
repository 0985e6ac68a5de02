"""PEs against oracles outside probe: T5's bias as the model computes it (every layer's ``hook_pos_bias``, a
KV-cache decoding step's slice) against transformers' ``T5Attention.compute_bias``; the `base` preset against
the paper's Table tab:hyperparam and the authors' released configuration, written out as literals here."""

from __future__ import annotations

import pytest
import torch
from helpers import tiny_model

from probe.cli import main
from probe.errors import ProbeError
from probe.models import build_model, t5_relative_bucket
from probe.models.kv_cache import KeyValueCache
from probe.models.model_config import resolve_config
from probe.models.registry import PAPER_PES
from probe.models.t5 import T5RelativeBias

VOCAB = 23

# ---------------------------------------------------------------- T5's bias against transformers'


def _hf_attention(table: torch.Tensor, num_buckets: int, max_distance: int):
    """transformers' decoder T5Attention with the relative bias ``table`` [bucket, head] (nn.Embedding's layout)."""
    from transformers.models.t5.modeling_t5 import T5Attention, T5Config

    n_heads = table.shape[1]
    config = T5Config(
        d_model=32,
        d_kv=16,
        num_heads=n_heads,
        relative_attention_num_buckets=num_buckets,
        relative_attention_max_distance=max_distance,
        is_decoder=True,
    )
    attention = T5Attention(config, has_relative_attention_bias=True, layer_idx=0).double()
    assert tuple(attention.relative_attention_bias.weight.shape) == (num_buckets, n_heads)
    with torch.no_grad():
        attention.relative_attention_bias.weight.copy_(table)
    return attention


def _causal(length_q: int, length_k: int) -> torch.Tensor:
    """[query, key] True where the last ``length_q`` queries may see the key (the bias elsewhere is masked)."""
    return torch.ones(length_q, length_k, dtype=torch.bool).tril(length_k - length_q)


def _assert_same_bias(ours: torch.Tensor, reference: torch.Tensor, where: str) -> None:
    """``ours`` [head, query, key] against ``reference`` [1, head, query, key] (compute_bias'), causal part, exactly."""
    assert reference.shape[0] == 1 and ours.shape == reference.shape[1:], where
    seen = _causal(*ours.shape[1:])
    difference = (ours - reference[0])[:, seen].abs().max().item()
    assert difference == 0, f"{where}: T5 bias differs from transformers' by {difference:.3g}"


# (options given to probe, B and D as transformers is told them, length): the defaults are given no options, so
# that probe's own defaults are held to T5's (B = 32 from t5-base's config, D = 128 as the authors' transformers
# 4.16.2 buckets: the sources above PAPER_BASE below); the lengths pass D.
CASES = [({}, 32, 128, 150), ({"num_buckets": 8, "max_distance": 20}, 8, 20, 40)]


@pytest.mark.parametrize("options,buckets,max_distance,length", CASES)
def test_t5_bias_in_every_layer_is_transformers_compute_bias(options, buckets, max_distance, length):
    """Every layer's bias as the model adds it equals transformers' decoder compute_bias from the one shared
    table (T5 computes it in the first layer and hands it on): each layer held to transformers, not to layer 0."""
    model = build_model("t5", vocab_size=VOCAB, seed=3, pe_options=options, **tiny_model(3)).double()
    table = model.pe.relative_attention_bias  # [table, bucket, head]
    assert model.pe.option["shared"] and table.shape == (1, buckets, model.cfg.n_heads)
    reference = _hf_attention(table[0], buckets, max_distance).compute_bias(length, length)  # [1, head, q, k]
    tokens = torch.randint(0, VOCAB, (1, length), generator=torch.Generator().manual_seed(4))
    _, cache = model.run_with_cache(tokens)
    for layer in range(model.cfg.n_layers):
        _assert_same_bias(cache[f"blocks.{layer}.attn.hook_pos_bias"], reference, f"layer {layer}")


def test_t5_bias_of_a_table_per_layer_is_transformers_compute_bias_of_that_table():
    model = build_model("t5", vocab_size=VOCAB, seed=5, pe_options={"shared": False}, **tiny_model(3)).double()
    length = 150
    _, cache = model.run_with_cache(torch.randint(0, VOCAB, (1, length), generator=torch.Generator().manual_seed(6)))
    for layer in range(model.cfg.n_layers):
        reference = _hf_attention(model.pe.relative_attention_bias[layer], 32, 128).compute_bias(length, length)
        _assert_same_bias(cache[f"blocks.{layer}.attn.hook_pos_bias"], reference, f"layer {layer}")


@pytest.mark.parametrize("options,buckets,max_distance,length", CASES)
def test_t5_bias_of_a_cached_decoding_pass_is_transformers_slice(options, buckets, max_distance, length):
    """A pass over the last tokens after a KV cache of the first ones: its [head, new, all] bias is transformers'
    compute_bias for those queries (``past_seen_tokens``), over every key."""
    model = build_model("t5", vocab_size=VOCAB, seed=7, pe_options=options, **tiny_model(2)).double()
    tokens = torch.randint(0, VOCAB, (1, length), generator=torch.Generator().manual_seed(8))
    past, new = length - 5, 5
    reference = _hf_attention(model.pe.relative_attention_bias[0], buckets, max_distance).compute_bias(
        new, length, past_seen_tokens=past
    )
    cache = KeyValueCache(model.cfg, "cpu", 1, length)
    with torch.no_grad():
        model(tokens[:, :past], past_kv_cache=cache)
        _, activations = model.run_with_cache(tokens[:, past:], past_kv_cache=cache)
    for layer in range(model.cfg.n_layers):
        _assert_same_bias(activations[f"blocks.{layer}.attn.hook_pos_bias"], reference, f"layer {layer}")


def test_t5_help_says_where_the_last_bucket_starts():
    """The help's 113: where the defaults' last bucket (31) starts, well before D = 128 (the log half is floor'd)."""
    buckets = t5_relative_bucket(torch.arange(300))  # the defaults, B = 32, D = 128
    start = int((buckets == 31).nonzero()[0])
    assert start == 113 and buckets[112] == 30 and (buckets[113:] == 31).all()
    assert "113" in T5RelativeBias.options["max_distance"].help
    assert T5RelativeBias.options["max_distance"].default == 128 and T5RelativeBias.options["num_buckets"].default == 32


@pytest.mark.parametrize(
    "options,match",
    [
        ({"max_distance": 16}, "option max_distance=16 of t5 must exceed num_buckets // 2 = 16, .* num_buckets=32$"),
        ({"max_distance": 8}, "option max_distance=8 of t5 must exceed num_buckets // 2 = 16, .* num_buckets=32$"),
        (
            {"num_buckets": 3, "max_distance": 1},
            "option max_distance=1 of t5 must exceed num_buckets // 2 = 1, .* num_buckets=3$",
        ),
    ],
)
def test_t5_max_distance_within_the_exact_buckets_is_one_line(options, match):
    """D <= B // 2 leaves the log-spaced half dividing by log(D / (B // 2)) <= 0: negative buckets, an index error
    in the first pass. It is refused when the model is built, naming both values."""
    with pytest.raises(ProbeError, match=match) as error:
        build_model("t5", vocab_size=VOCAB, pe_options=options, **tiny_model(1))
    assert "\n" not in str(error.value)


def test_t5_max_distance_just_past_the_exact_buckets_runs():
    model = build_model("t5", vocab_size=VOCAB, pe_options={"max_distance": 17}, **tiny_model(1))
    with torch.no_grad():
        assert torch.isfinite(model(torch.randint(0, VOCAB, (1, 40)))).all()


def test_probe_train_refuses_max_distance_within_the_exact_buckets_in_one_line(tmp_path, capsys):
    code = main(["train", "--pe", "t5", "-p", "max_distance=16", "--steps", "1", "--checkpoints", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    assert "max_distance=16" in err and "num_buckets=32" in err, err
    assert not any(tmp_path.iterdir())


# ---------------------------------------------------------------- the `base` preset against the paper

# The paper's Table tab:hyperparam (/work/shared/paper/000_8ad98a2d2ccb6c71.txt, lines 243-246):
#   243: Dropout \textit{(taken from HuggingFace)}            & 0.1
#   244: Model dimension \textit{(taken from HuggingFace)}    & 768
#   245: \# Layers \textit{(taken from HuggingFace)}          & 12
#   246: \# Attention Heads \textit{(taken from HuggingFace)} & 12
# The rest from the authors' released code (McGill-NLP/length-generalization): configs/t5_dec_base.jsonnet builds
# configs/models/t5_base.jsonnet (hf_model_name 't5-base') under src/requirements.txt's transformers==4.16.2, whose
# t5-base config.json has d_kv 64, d_ff 3072, dropout_rate 0.1, relative_attention_num_buckets 32 (B); its
# src/models/custom_t5_decoder_only.py:
# - CustomT5Attention: q, k, v, o Linear(bias=False), logits never divided by sqrt(d_kv) ("Mesh TensorFlow
#   initialization to avoid scaling before softmax"), weights drawn by T5PreTrainedModel._init_weights;
# - it skips T5Attention.__init__ (``super(T5Attention, self).__init__()``) and sets no max distance, so
#   compute_bias buckets with _relative_position_bucket's default max_distance=128 (D);
# - rotary: ``self.rotary_dim = int(0.25 * self.d_head)`` (a quarter of each head, base 10000).
PAPER_BASE = dict(
    n_layers=12,  # Table, line 245
    d_model=768,  # Table, line 244
    n_heads=12,  # Table, line 246
    dropout=0.1,  # Table, line 243
    d_head=64,  # t5-base d_kv
    d_mlp=3072,  # t5-base d_ff
    attn_scale=False,  # T5 attention: no 1/sqrt(d_kv)
    init="t5",  # T5PreTrainedModel._init_weights
    bias=False,  # T5's Linear(bias=False)
    act_fn="relu",  # t5-base: T5DenseReluDense
    normalization="RMS",  # T5LayerNorm
)
PAPER_BASE_PE_OPTIONS = {
    "rotary": {"fraction": 0.25, "base": 10000.0},  # rotary_dim = int(0.25 * d_head); rotary_base=10000
    "t5": {"num_buckets": 32, "max_distance": 128, "shared": True},  # one table, in layer 0, for all layers
}


@pytest.mark.parametrize("pe", PAPER_PES)
def test_base_preset_is_the_papers_model(pe):
    config = resolve_config(pe, vocab_size=100, preset="base")
    built = {name: getattr(config, name) for name in PAPER_BASE}
    assert built == PAPER_BASE, {k: (v, PAPER_BASE[k]) for k, v in built.items() if v != PAPER_BASE[k]}
    for option, value in PAPER_BASE_PE_OPTIONS.get(pe, {}).items():
        assert config.pe_options[option] == value, (pe, option, config.pe_options[option], value)
    if pe == "rotary":
        assert round(config.pe_options["fraction"] * config.d_head) == 16  # the code's rotary_dim at d_kv 64
