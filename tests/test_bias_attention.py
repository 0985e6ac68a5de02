"""The CPU kernel for attention with a learned bias, against autograd through the textbook formula
softmax(scale q k^T + bias + causal mask) v, in float64, across backward-block boundaries."""

from __future__ import annotations

import pytest
import torch

from probe.models import bias_attention, build_model
from probe.models.registry import PE_CLASSES


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


@pytest.mark.parametrize("pe", [kind for kind, cls in PE_CLASSES.items() if cls.adds_bias])
def test_a_learned_bias_model_trains_the_same_on_the_kernel_and_on_the_hooked_path(pe):
    """Several backward blocks deep, every parameter's gradient is the explicit path's: every registered PE
    that adds a bias (a new one too), so the docs' "a learned bias needs nothing more" is checked."""
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


def _apart(rows: list[list[int]], dtype: torch.dtype) -> torch.Tensor:
    """[batch, pos, pos] 0 where query and key are one example of a packed row (``rows``: each row's example
    lengths, the rest padding, which sees itself), -inf elsewhere."""
    pos = max(sum(row) for row in rows)
    apart = torch.full((len(rows), pos, pos), float("-inf"), dtype=dtype)
    for r, row in enumerate(rows):
        segment = torch.full((pos,), -1)
        segment[: sum(row)] = torch.repeat_interleave(torch.arange(len(row)), torch.tensor(row))
        apart[r].masked_fill_(segment[:, None] == segment[None, :], 0.0)
    return apart


@pytest.mark.parametrize("learned", [True, False])
def test_packed_rows_get_the_textbook_values_and_gradients(learned):
    """Examples packed into rows (each query sees its own example's earlier keys), several backward blocks deep:
    the values and the gradients of q, k, v and a learned bias are the textbook formula's, masked alike, and
    the bias gets no gradient between two examples."""
    rows = [[2 * bias_attention.BLOCK + 9], [30, 41, bias_attention.BLOCK], [5, 70]]
    apart = _apart(rows, torch.float64)
    batch, pos, heads, d_head, scale = len(rows), apart.size(1), 2, 4, 0.43
    generator = torch.Generator().manual_seed(11)
    q, k, v = (
        torch.randn(batch, heads, pos, d_head, generator=generator, dtype=torch.float64).requires_grad_()
        for _ in range(3)
    )
    bias = torch.randn(heads, pos, pos, generator=generator, dtype=torch.float64).requires_grad_(learned)
    grad_out = torch.randn(batch, heads, pos, d_head, generator=generator, dtype=torch.float64)
    inputs = (q, k, v, bias) if learned else (q, k, v)
    ours = bias_attention.biased_causal_attention(q, k, v, bias, scale, apart)
    expected = _textbook(q, k, v, bias + apart[:, None], scale)
    torch.testing.assert_close(ours, expected, rtol=1e-10, atol=1e-12)
    our_grads = torch.autograd.grad(ours, inputs, grad_out)
    expected_grads = torch.autograd.grad(expected, inputs, grad_out)
    for name, got, want in zip("q k v bias".split(), our_grads, expected_grads):
        torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-12, msg=f"gradient of {name}")
    if learned:
        between = torch.isinf(apart).all(0)  # [query, key] pairs apart in every row
        assert between.any() and torch.all(our_grads[3][:, between] == 0)


@pytest.mark.parametrize("pos", [7, bias_attention.BLOCK + 13])
def test_a_query_that_sees_no_key_gives_zero_and_no_gradient(pos):
    """Left padding hides a row's first keys from every query up to them: such a query's output is 0, as the
    reference route's, and it passes no gradient on (not NaN)."""
    generator = torch.Generator().manual_seed(pos)
    q, k, v = (torch.randn(2, 3, pos, 4, generator=generator, dtype=torch.float64).requires_grad_() for _ in range(3))
    bias = torch.randn(3, pos, pos, generator=generator, dtype=torch.float64).requires_grad_()
    apart = torch.zeros(2, pos, pos, dtype=torch.float64)
    apart[1, :, :3] = float("-inf")  # row 1: three padding tokens first
    out = bias_attention.biased_causal_attention(q, k, v, bias, 0.5, apart)
    assert torch.all(out[1, :, :3] == 0)
    pattern = torch.softmax(
        0.5 * q @ k.transpose(-1, -2) + bias + apart[:, None] + torch.full((pos, pos), float("-inf")).triu(1), -1
    ).nan_to_num(nan=0.0)
    torch.testing.assert_close(out, pattern @ v, rtol=1e-10, atol=1e-12)
    grads = torch.autograd.grad(out.pow(2).sum(), (q, k, v, bias))
    assert all(torch.isfinite(g).all() for g in grads)
    torch.testing.assert_close(grads[0][1, :, :3], torch.zeros(3, 3, 4, dtype=torch.float64), rtol=0, atol=0)


@pytest.mark.parametrize(
    ("pe", "rows"), [("t5", "packed"), ("kerple", "packed"), ("alibi", "packed"), ("t5", "padded"), ("fire", "padded")]
)
def test_a_bias_model_on_packed_or_padded_rows_trains_the_same_on_the_kernel_and_on_the_hooked_path(pe, rows):
    """Packed rows (``segments``, padding at a row's end) or right-padded ones (``attention_mask``), several
    backward blocks deep: every parameter's gradient is the reference route's."""
    model = build_model(pe, vocab_size=13, seed=1, n_layers=2, n_ctx=256).double()
    pos = 2 * bias_attention.BLOCK + 9
    tokens = torch.randint(0, 13, (2, pos), generator=torch.Generator().manual_seed(0))
    if rows == "packed":
        segments = torch.zeros(2, pos, dtype=torch.long)
        segments[0, 40:] = 1
        segments[1, 70:] = 1
        segments[1, pos - 6 :] = -1  # padding
        given = {"segments": segments}
    else:
        mask = torch.ones(2, pos, dtype=torch.long)
        mask[1, pos - 30 :] = 0
        given = {"attention_mask": mask}
    grads = []
    for fast in (True, False):
        model.zero_grad()
        model.set_fast_attention(fast)
        model(tokens, **given).pow(2).mean().backward()
        grads.append({name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys()
    for name in grads[1]:
        torch.testing.assert_close(grads[0][name], grads[1][name], rtol=1e-9, atol=1e-14, msg=name)


@pytest.mark.parametrize("given", ["segments", "attention_mask"])
def test_a_learned_bias_on_packed_or_padded_rows_never_reaches_sdpa(monkeypatch, given):
    """The studies train packed rows: with a learned bias, SDPA would take its quadratic math path on a CPU."""
    from probe.models import fused_attention

    def refuse(*args, **kwargs):
        raise AssertionError("scaled_dot_product_attention reached with a learned bias")

    monkeypatch.setattr(fused_attention.F, "scaled_dot_product_attention", refuse)
    model = build_model("t5", vocab_size=13, seed=1, n_layers=1, n_ctx=256)
    tokens = torch.randint(0, 13, (2, bias_attention.BLOCK + 20), generator=torch.Generator().manual_seed(0))
    if given == "segments":
        rows = torch.zeros_like(tokens)
        rows[:, 30:] = 1  # two examples a row
    else:
        rows = torch.ones_like(tokens)
        rows[1, 30:] = 0  # row 1 padded after 30 tokens
    model(tokens, **{given: rows}).sum().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)
