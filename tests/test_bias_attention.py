"""The CPU kernel for attention with a learned bias, against autograd through the textbook formula
softmax(scale q k^T + bias + causal mask) v, in float64, across backward-block boundaries."""

from __future__ import annotations

import pytest
import torch

from probe.models import bias_attention, build_model


def _textbook(q, k, v, bias, scale):
    pos = q.size(2)
    causal = torch.full((pos, pos), float("-inf"), dtype=q.dtype).triu(1)
    logits = scale * q @ k.transpose(-1, -2) + bias + causal  # [batch, head, query, key]
    return torch.softmax(logits, dim=-1) @ v


@pytest.mark.parametrize("pos", [1, 7, bias_attention.BLOCK, bias_attention.BLOCK + 1, 2 * bias_attention.BLOCK + 22])
def test_outputs_and_every_gradient_match_the_textbook_formula(pos):
    generator = torch.Generator().manual_seed(pos)
    batch, heads, d_head, scale = 3, 2, 5, 0.37

    def leaf(*shape):
        return torch.randn(*shape, generator=generator, dtype=torch.float64).requires_grad_()

    q, k, v = (leaf(batch, heads, pos, d_head) for _ in range(3))
    bias = leaf(heads, pos, pos)
    grad_out = torch.randn(batch, heads, pos, d_head, generator=generator, dtype=torch.float64)
    results = []
    for attend in (bias_attention.biased_causal_attention, _textbook):
        out = attend(q, k, v, bias, scale)
        grads = torch.autograd.grad(out, (q, k, v, bias), grad_out)
        results.append((out, grads))
    (ours, our_grads), (expected, expected_grads) = results
    torch.testing.assert_close(ours, expected, rtol=1e-10, atol=1e-12)
    for name, got, want in zip("q k v bias".split(), our_grads, expected_grads):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12, msg=f"gradient of {name}")
    assert torch.all(our_grads[3].triu(1) == 0)  # keys after the query carry no gradient


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_the_layers_layout_gets_the_textbook_gradients_back_in_that_layout(dtype):
    """The layer hands in [batch, pos, head, d_head] tensors seen as [batch, head, pos, d_head]; the
    gradients come back in that memory layout (nothing downstream copies them) and are right."""
    generator = torch.Generator().manual_seed(3)
    batch, pos, heads, d_head, scale = 2, 2 * bias_attention.BLOCK + 5, 3, 4, 0.5
    tolerance = {"rtol": 1e-9, "atol": 1e-12} if dtype == torch.float64 else {"rtol": 1e-4, "atol": 1e-5}
    q, k, v = (
        torch.randn(batch, pos, heads, d_head, generator=generator, dtype=dtype).requires_grad_() for _ in range(3)
    )
    bias = torch.randn(heads, pos, pos, generator=generator, dtype=dtype).requires_grad_()
    grad_out = torch.randn(batch, heads, pos, d_head, generator=generator, dtype=dtype)
    results = []
    for attend in (bias_attention.biased_causal_attention, _textbook):
        views = [t.transpose(1, 2) for t in (q, k, v)]  # [batch, head, pos, d_head]
        out = attend(*views, bias, scale)
        grads = torch.autograd.grad(out, (*views, bias), grad_out)
        results.append((out, grads, views))
    (ours, our_grads, views), (expected, expected_grads, _) = results
    torch.testing.assert_close(ours, expected, **tolerance)
    for name, got, want, view in zip("q k v".split(), our_grads, expected_grads, views):
        torch.testing.assert_close(got, want, **tolerance, msg=f"gradient of {name}")
        assert got.stride() == view.stride(), f"gradient of {name} in another layout than its input"
    torch.testing.assert_close(our_grads[3], expected_grads[3], **tolerance, msg="gradient of the bias")


def test_it_serves_float32_and_float64_on_cpu():
    q = torch.zeros(1, 3, 1, 2)  # [batch, pos, head, d_head], as the layer holds it
    assert bias_attention.usable(q) and bias_attention.usable(q.double())
    assert not bias_attention.usable(q.bfloat16())


@pytest.mark.parametrize("pos", [1, 7, bias_attention.BLOCK + 22])
def test_a_fixed_bias_gets_the_textbook_values_and_gradients_of_q_k_v(pos):
    generator = torch.Generator().manual_seed(pos)
    q, k, v = (torch.randn(2, 3, pos, 4, generator=generator, dtype=torch.float64).requires_grad_() for _ in range(3))
    bias = torch.randn(3, pos, pos, generator=generator, dtype=torch.float64)  # ALiBi's: no gradient
    grad_out = torch.randn(2, 3, pos, 4, generator=generator, dtype=torch.float64)
    results = []
    for attend in (bias_attention.biased_causal_attention, _textbook):
        out = attend(q, k, v, bias, 0.41)
        results.append((out, torch.autograd.grad(out, (q, k, v), grad_out)))
        with torch.no_grad():
            torch.testing.assert_close(attend(q, k, v, bias, 0.41), out, rtol=0, atol=0)
    (ours, our_grads), (expected, expected_grads) = results
    torch.testing.assert_close(ours, expected, rtol=1e-10, atol=1e-12)
    for name, got, want in zip("q k v".split(), our_grads, expected_grads):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12, msg=f"gradient of {name}")


@pytest.mark.parametrize("pe", ["t5", "kerple", "fire"])
def test_a_learned_bias_model_trains_the_same_on_the_kernel_and_on_the_hooked_path(pe):
    """Several backward blocks deep, every parameter's gradient is the explicit path's."""
    model = build_model(pe, vocab_size=13, seed=1, n_layers=2, n_ctx=256).double()
    tokens = torch.randint(0, 13, (2, 2 * bias_attention.BLOCK + 9), generator=torch.Generator().manual_seed(0))
    grads = []
    for fast in (True, False):
        model.zero_grad()
        model.set_fast_attention(fast)
        model(tokens).pow(2).mean().backward()
        grads.append({name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for name in grads[1]:
        torch.testing.assert_close(grads[0][name], grads[1][name], rtol=1e-9, atol=1e-14, msg=name)
