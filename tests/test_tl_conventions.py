"""TransformerLens' conventions where probe's models once broke them: layer slicing, hooks that edit in place,
the loss under padding, ``cfg.use_attn_result``, where ``hook_normalized`` sits, ``generate`` on prompts of
several lengths, and a saved model's tokenizer. Each oracle is TransformerLens' documented behaviour, computed
here by hand or from a clean run, not by the code under test."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from probe.models import build_model, load_checkpoint, save_checkpoint
from probe.runs.folders import load_run
from probe.tasks import Tokenizer
from probe.tasks import get as get_task

VOCAB = 40
LEGACY = Path(__file__).resolve().parent / "fixtures" / "legacy_checkpoints"


def _model(pe: str, **overrides):
    return build_model(pe, vocab_size=VOCAB, preset="tiny", n_ctx=64, seed=1, **overrides).double().eval()


def _tokens(batch: int = 2, pos: int = 9) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch, pos), generator=torch.Generator().manual_seed(0))


@pytest.fixture(scope="module")
def scan_model():
    tokenizer = Tokenizer.for_task(get_task("scan"))
    model = build_model("rotary", vocab_size=len(tokenizer), seed=3, n_layers=2).double().eval()
    tokenizer.attach_to(model)
    return model


def _residuals(model, tokens: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """The logits, and the residual entering each block and then ln_final (n_layers + 1), from a clean run."""
    logits, cache = model.run_with_cache(tokens)
    layers = model.cfg.n_layers
    entering = [cache[f"blocks.{layer}.hook_resid_pre"] for layer in range(layers)]
    return logits, [*entering, cache[f"blocks.{layers - 1}.hook_resid_post"]]


@pytest.mark.parametrize("start", range(-3, 4))
def test_start_at_layer_runs_the_blocks_a_python_slice_gives(start):
    """TransformerLens runs ``blocks[start_at_layer:]``: from the residual entering block s, the full logits;
    ``start_at_layer=n_layers`` runs no block, only ln_final and the unembedding."""
    model, tokens = _model("t5", n_layers=3), _tokens()
    logits, residuals = _residuals(model, tokens)
    first = len(range(3)[:start])  # the index of the first block blocks[start:] runs
    with torch.no_grad():
        torch.testing.assert_close(model(residuals[first], start_at_layer=start), logits)


@pytest.mark.parametrize("stop", range(-3, 4))
def test_stop_at_layer_returns_the_residual_a_python_slice_gives(stop):
    """TransformerLens runs ``blocks[:stop_at_layer]`` and returns the residual after them."""
    model, tokens = _model("t5", n_layers=3), _tokens()
    _, residuals = _residuals(model, tokens)
    with torch.no_grad():
        torch.testing.assert_close(model(tokens, stop_at_layer=stop), residuals[len(range(3)[:stop])])


def _zero_first_row(x: torch.Tensor, hook) -> None:
    x[0] = 0  # in place, as a patching hook may; returns nothing


@pytest.mark.parametrize("pe", ["t5", "alibi", "kerple", "fire"])
def test_an_in_place_edit_of_one_layers_bias_stays_in_that_layer(pe):
    """The PE computes its bias once per pass for every layer; a hook editing layer 0's in place must leave
    layer 1's as a clean run has it, and the next pass whole."""
    model, tokens = _model(pe), _tokens()
    clean_logits, clean = model.run_with_cache(tokens)
    seen = {}

    def record(x: torch.Tensor, hook) -> None:
        seen[hook.name] = x.clone()

    edited = model.run_with_hooks(
        tokens,
        fwd_hooks=[("blocks.0.attn.hook_pos_bias", _zero_first_row), ("blocks.1.attn.hook_pos_bias", record)],
    )
    assert not torch.allclose(edited, clean_logits)  # the edit took effect in layer 0
    torch.testing.assert_close(seen["blocks.1.attn.hook_pos_bias"], clean["blocks.1.attn.hook_pos_bias"])
    torch.testing.assert_close(model(tokens), clean_logits)


def test_an_in_place_edit_of_cached_turned_keys_stays_in_its_pass():
    """TransformerLens turns the cached keys again on every pass, so a hook's in-place edit of ``hook_rot_k`` changes
    that pass only: edited in the last layer (whose output no cache holds), the next step, unhooked, scores as the
    full forward does."""
    model, tokens = _model("rotary"), _tokens(pos=7)
    cache = model.key_value_cache(2, 7)
    with torch.no_grad():
        full = model(tokens)
        with model.hooks(fwd_hooks=[(f"blocks.{model.cfg.n_layers - 1}.attn.hook_rot_k", _zero_first_row)]):
            model(tokens[:, :6], past_kv_cache=cache)
        torch.testing.assert_close(model(tokens[:, 6:], past_kv_cache=cache)[:, -1], full[:, -1])


@pytest.mark.parametrize("pe", ["ape", "learned"])
def test_hook_pos_embed_rows_are_independent(pe):
    """TransformerLens hands ``hook_pos_embed`` a [batch, pos, d_model] tensor of its own rows: an in-place edit of
    row 0 leaves row 1's residual as a clean run has it."""
    model, tokens = _model(pe), _tokens()
    _, clean = model.run_with_cache(tokens)
    with model.hooks(fwd_hooks=[("hook_pos_embed", _zero_first_row)]):
        _, edited = model.run_with_cache(tokens)
    resid, name = edited["blocks.0.hook_resid_pre"], "blocks.0.hook_resid_pre"
    assert not torch.allclose(resid[0], clean[name][0])
    torch.testing.assert_close(resid[1], clean[name][1])


def test_the_loss_leaves_padding_out():
    """TransformerLens' loss with ``attention_mask`` averages the next-token losses whose token and next token are
    both real: here those of each row alone."""
    model = _model("rotary")
    long, short = _tokens(1, 9), _tokens(1, 6)
    batch = torch.cat([long, F.pad(short, (0, 3))])
    mask = torch.ones(2, 9, dtype=torch.long)
    mask[1, 6:] = 0
    with torch.no_grad():
        sums = [F.cross_entropy(model(row)[0, :-1], row[0, 1:], reduction="sum") for row in (long, short)]
        loss = model(batch, return_type="loss", attention_mask=mask)
    torch.testing.assert_close(loss, (sums[0] + sums[1]) / (8 + 5))


def test_cfg_use_attn_result_is_read_at_forward_time():
    """Setting ``cfg.use_attn_result`` directly, as TransformerLens users do, gives ``hook_result`` per head."""
    model, tokens = _model("t5"), _tokens()
    model.cfg.use_attn_result = True
    _, cache = model.run_with_cache(tokens)
    result = cache["blocks.0.attn.hook_result"]  # [batch, pos, head, d_model]
    torch.testing.assert_close(result.sum(2) + model.blocks[0].attn.b_O, cache["blocks.0.hook_attn_out"])
    model.cfg.use_attn_result = False
    assert "blocks.0.attn.hook_result" not in model.run_with_cache(tokens)[1].cache_dict
    model.set_use_attn_result(True)
    assert model.cfg.use_attn_result and "blocks.0.attn.hook_result" in model.run_with_cache(tokens)[1].cache_dict


@pytest.mark.parametrize("norm", ["LN", "RMS"])
def test_hook_normalized_sits_where_transformer_lens_puts_it(norm):
    """TransformerLens 3's LayerNorm hooks (x - mean) / scale * w + b; its RMSNorm hooks x / scale, before w."""
    model, tokens = _model("rotary", normalization=norm), _tokens()
    ln = model.blocks[0].ln1
    with torch.no_grad():
        ln.w.copy_(torch.linspace(0.5, 2.0, ln.w.numel()))
        if norm == "LN":
            ln.b.copy_(torch.linspace(-1.0, 1.0, ln.b.numel()))
    _, cache = model.run_with_cache(tokens)
    x = cache["blocks.0.hook_resid_pre"]
    if norm == "LN":
        x = x - x.mean(-1, keepdim=True)
    expected = x / (x.pow(2).mean(-1, keepdim=True) + model.cfg.eps).sqrt()
    if norm == "LN":
        expected = expected * ln.w + ln.b
    torch.testing.assert_close(cache["blocks.0.ln1.hook_normalized"], expected)


@pytest.mark.parametrize("use_past_kv_cache", [True, False])
def test_generate_on_prompts_of_several_lengths_gives_each_as_alone(scan_model, use_past_kv_cache):
    """Each row is what generating its prompt alone gives; the ids are right-padded with the pad token."""
    prompts = ["jump twice and walk left <sep>", "walk <sep>", "run left thrice <sep>"]
    options = {"max_new_tokens": 4, "do_sample": False, "stop_at_eos": False, "use_past_kv_cache": use_past_kv_cache}
    alone = [scan_model.generate(p, return_type="tokens", output_logits=True, **options) for p in prompts]
    together = scan_model.generate(prompts, return_type="tokens", output_logits=True, **options)
    pad = scan_model.tokenizer.pad_token_id
    width = max(out.sequences.size(1) for out in alone)
    assert together.sequences.shape == (3, width)
    for row, out in enumerate(alone):
        ids = out.sequences[0]
        assert together.sequences[row].tolist() == ids.tolist() + [pad] * (width - ids.numel())
        for step, logits in enumerate(out.logits):
            torch.testing.assert_close(together.logits[step][row], logits[0])
    texts = scan_model.generate(prompts, **options)
    assert texts == [scan_model.generate(p, **options) for p in prompts]


def _same_tokenizer(model, saved) -> None:
    assert saved.tokenizer is not None
    text = "walk twice <sep>"
    assert torch.equal(saved.to_tokens(text), model.to_tokens(text))
    assert saved.to_str_tokens(text) == model.to_str_tokens(text)


def test_a_saved_model_keeps_its_tokenizer(scan_model, tmp_path):
    """A model with a tokenizer attached, saved, loads back with it, by load_checkpoint and load_run alike."""
    save_checkpoint(scan_model, tmp_path / "run")
    _same_tokenizer(scan_model, load_checkpoint(tmp_path / "run"))
    _same_tokenizer(scan_model, load_run(tmp_path / "run"))


def test_a_loaded_run_saved_again_keeps_its_tokenizer(tmp_path):
    """A run load_run gives a tokenizer (here a legacy one's, rebuilt from its task) keeps it saved elsewhere."""
    model = load_run(LEGACY / "t5")
    save_checkpoint(model, tmp_path / "copy")
    _same_tokenizer(model, load_checkpoint(tmp_path / "copy"))
    _same_tokenizer(model, load_run(tmp_path / "copy"))


@pytest.mark.parametrize("pe", ["ape", "learned"])
def test_w_pos_is_what_hook_pos_embed_adds_at_each_position(pe):
    """TransformerLens' ``W_pos`` [n_ctx, d_model]: row t is what the embedding adds at position t, read here from a
    clean run's cache; a learned table is the parameter itself."""
    model, tokens = _model(pe), _tokens()
    _, cache = model.run_with_cache(tokens)
    added = cache["hook_pos_embed"][0]  # [pos, d_model]
    assert model.W_pos.shape == (model.cfg.n_ctx, model.cfg.d_model)
    torch.testing.assert_close(model.W_pos[: tokens.size(1)], added)
    assert (model.W_pos is getattr(model.pe, "W_pos", None)) == (pe == "learned")


@pytest.mark.parametrize("pe", ["nope", "rotary", "t5"])
def test_a_pe_that_adds_no_embedding_has_no_w_pos(pe):
    assert not hasattr(_model(pe), "W_pos")
