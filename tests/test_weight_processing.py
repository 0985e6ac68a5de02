"""TransformerLens' weight processing on probe models (``process_weights_``, ``fold_layer_norm``): the same
weights TransformerLens' own ``ProcessWeights`` computes from the same state dict (the oracle), the same
function, and logit attributions that add up once the final norm's gain is folded into W_U."""

from __future__ import annotations

import copy

import pytest
import torch
from transformer_lens.weight_processing import ProcessWeights

from probe.errors import ProbeError
from probe.models import build_model, load_checkpoint, save_checkpoint


def _model(pe: str = "nope", normalization: str = "LN", tie: bool = False, dtype=torch.float64):
    """A 2-layer model whose gains, norm biases and linear biases are all away from their defaults."""
    model = build_model(
        pe, vocab_size=20, n_layers=2, d_model=32, n_heads=2, d_head=16, d_mlp=64, n_ctx=32,
        normalization=normalization, tie_embeddings=tie, bias=True, seed=1,
    ).to(dtype)  # fmt: skip
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.rsplit(".", 1)[-1] in ("w", "b") or ".b_" in name:
                param.add_(torch.randn(param.shape, generator=generator, dtype=dtype) * 0.3)
    return model


TOKENS = torch.randint(0, 20, (3, 16), generator=torch.Generator().manual_seed(5))


@pytest.mark.parametrize("normalization", ["LN", "RMS"])
def test_processed_weights_are_transformer_lens_own(normalization):
    """In float32: TransformerLens processes a float64 state dict in float32 as well."""
    model = _model(normalization=normalization, dtype=torch.float32)
    cfg = copy.copy(model.cfg)
    cfg.positional_embedding_type = "none"  # TransformerLens' name for a model without W_pos
    state = {k: v.clone() for k, v in model.state_dict().items()}
    theirs = ProcessWeights.process_weights(state, cfg)
    ours = model.process_weights_().state_dict()
    compared = [k for k in theirs if k in ours]
    assert len(compared) > 30
    for key in compared:
        torch.testing.assert_close(ours[key], theirs[key], rtol=0, atol=2e-6, msg=key)
    assert model.cfg.normalization_type == f"{normalization}Pre"


@pytest.mark.parametrize("pe", ["nope", "ape", "t5", "alibi", "rotary"])
@pytest.mark.parametrize("normalization, tie", [("LN", False), ("RMS", False), ("RMS", True), ("LN", True)])
def test_the_function_is_unchanged(pe, normalization, tie):
    """Logits equal up to one constant per position (the centred unembedding), in float64."""
    model = _model(pe, normalization, tie)
    with torch.no_grad():
        before = model(TOKENS)
        after = model.process_weights_()(TOKENS)
    shift = after - before
    assert (shift - shift.mean(-1, keepdim=True)).abs().max() < 1e-12
    assert not model.config.tie_embeddings and torch.equal(model.blocks[0].ln1.w, torch.ones(32, dtype=torch.float64))


def test_logit_attributions_add_up_once_the_final_gain_is_folded():
    """decompose_resid, scaled by the final norm (apply_ln_to_stack), times W_U: the logits, as TransformerLens'
    logit attribution reads them; unprocessed, the final gain is missing from the sum."""
    model = _model(normalization="RMS")
    target = TOKENS[0, -1]

    @torch.no_grad()
    def attributed(model) -> tuple[float, float]:
        logits, cache = model.run_with_cache(TOKENS)
        stack = cache.decompose_resid(layer=-1, pos_slice=-1)  # [component, batch, d_model]
        scaled = cache.apply_ln_to_stack(stack, layer=-1, pos_slice=-1)
        total = (scaled @ model.W_U[:, target]).sum(0)[0] + model.b_U[target]
        return float(total), float(logits[0, -1, target])

    total, logit = attributed(model)
    assert abs(total - logit) > 1e-3
    total, logit = attributed(model.process_weights_(center_unembed=False))
    assert abs(total - logit) < 1e-9


def test_a_processed_model_saves_and_loads_as_itself(tmp_path):
    model = _model(normalization="RMS", tie=True, dtype=torch.float32).process_weights_()
    save_checkpoint(model, tmp_path / "run", task="none")
    loaded = load_checkpoint(tmp_path / "run")
    assert torch.equal(loaded(TOKENS), model(TOKENS))


def test_what_cannot_be_folded_is_one_line():
    with pytest.raises(ProbeError, match="no layer norm"):
        build_model("nope", vocab_size=8, normalization=None).fold_layer_norm()
    model = _model().fold_layer_norm()
    with pytest.raises(ProbeError, match="folded already"):
        model.fold_layer_norm()
