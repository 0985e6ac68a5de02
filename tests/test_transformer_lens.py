"""TransformerLens 4's own tools on probe's models: activation patching, ``test_prompt``, the
``ActivationCache`` decompositions, string methods. Each is checked against what it must give by
construction, not against probe's code."""

from __future__ import annotations

import pytest
import torch
from transformer_lens import patching
from transformer_lens.utilities import test_prompt as tl_test_prompt

from probe.models import build_model
from probe.tasks import Tokenizer
from probe.tasks import get as get_task


@pytest.fixture(scope="module")
def scan_model():
    tokenizer = Tokenizer.for_task(get_task("scan"))
    model = build_model("t5", vocab_size=len(tokenizer), seed=3, n_layers=2).double().eval()
    tokenizer.attach_to(model)
    return model


def test_patching_the_only_differing_position_restores_the_clean_run(scan_model):
    """Clean and corrupted differ at one position p; at layer 0 the residual differs only there, so
    patching it at (0, p) gives the clean logits and at (0, q != p) the corrupted ones."""
    clean = scan_model.to_tokens("jump twice and walk left <sep>")
    corrupted = clean.clone()
    p = 2
    corrupted[0, p] = scan_model.to_single_token("run")
    clean_logits, clean_cache = scan_model.run_with_cache(clean)
    corrupted_logits = scan_model(corrupted)

    def metric(logits):
        return logits[0, -1].max()

    result = patching.get_act_patch_resid_pre(scan_model, corrupted, clean_cache, metric)  # [layer, pos]
    assert result.shape == (scan_model.cfg.n_layers, clean.size(1))
    clean_metric, corrupted_metric = metric(clean_logits).item(), metric(corrupted_logits).item()
    assert abs(clean_metric - corrupted_metric) > 1e-3
    # TransformerLens stores the results in float32
    assert result[0, p].item() == pytest.approx(clean_metric, rel=1e-6)
    assert all(result[0, q].item() == pytest.approx(corrupted_metric, rel=1e-6) for q in range(clean.size(1)) if q != p)


def test_test_prompt_ranks_the_models_own_top_token_first(scan_model, capsys):
    prompt = "walk twice <sep>"
    top = scan_model(scan_model.to_tokens(prompt))[0, -1].argmax().item()
    answer = scan_model.to_string([top])
    tl_test_prompt(prompt, answer, scan_model, prepend_space_to_answer=False)
    printed = capsys.readouterr().out
    assert "Rank: 0" in printed and answer in printed


def test_head_results_and_accumulated_residual_add_up(scan_model):
    tokens = scan_model.to_tokens(["walk twice <sep>", "jump left and run <sep>"])
    _, cache = scan_model.run_with_cache(tokens)
    for layer in range(scan_model.cfg.n_layers):
        heads = cache.stack_head_results(layer=layer + 1, pos_slice=None)[-scan_model.cfg.n_heads :]  # [head, ...]
        attn_out = heads.sum(0) + scan_model.blocks[layer].attn.b_O
        assert torch.allclose(attn_out, cache[f"blocks.{layer}.hook_attn_out"], atol=1e-10)
    resid = cache.accumulated_resid()  # [layer + 1, batch, pos, d_model]
    assert torch.allclose(resid[0], cache["blocks.0.hook_resid_pre"])
    assert torch.allclose(resid[-1], cache[f"blocks.{scan_model.cfg.n_layers - 1}.hook_resid_post"])


def test_string_methods_round_trip(scan_model):
    text = "jump around right twice <sep>"
    tokens = scan_model.to_tokens(text)
    assert scan_model.to_str_tokens(text) == ["<bos>", *text.split()]
    assert scan_model.to_string(tokens[0, 1:]) == text
    assert scan_model.to_tokens(text, prepend_bos=False).size(1) == tokens.size(1) - 1
    batch = scan_model.to_tokens(["walk <sep>", "walk twice <sep>"])
    assert batch.shape == (2, 4) and batch[0, -1] == scan_model.tokenizer.pad_token_id
    assert isinstance(scan_model.generate(text, max_new_tokens=3, do_sample=False, verbose=False), str)
