"""Numerical checks of Theorems 1 and 2 (Appendix C) on the constructed NoPE weights, and of
NoPE layers that reproduce a relative bias (ALiBi, a T5 head). The CLI (`probe theorem`) and the
explorer's Theorems page both call these.

Every check runs the model's forward pass (TransformerLens hooks) on random token sequences that
start with ``<bos>`` and compares what the hooks hold with what the paper says they hold. A
claim passes when its max absolute error is within a tolerance of a few units of rounding
(``eps`` of the dtype) times the magnitudes involved; :data:`TOLERANCES` states and justifies
each one.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from contextlib import contextmanager
from dataclasses import asdict, dataclass

import numpy as np
import torch

from probe.errors import ProbeError
from probe.models.transformer import PETransformer
from probe.theorems.constructions import (
    BOS_ID,
    POS,
    Content,
    alibi_match_model,
    alibi_target,
    bias_match_model,
    random_content,
    t5_head_target,
    theorem_model,
)

SPECIALS = ("<bos>", "<pad>", "<eos>", "<sep>")
# The JSD itself is computed in float64 from p log(p / m) with p ~ m, whose rounding alone leaves
# ~eps64 per row.
JSD_FLOOR = 16 * float(np.finfo(np.float64).eps)


def jsd_bound(tolerance: float) -> float:
    """The largest JSD (nats) two softmaxes can be apart when their logits differ by at most
    ``tolerance`` at every key: tol² σ(2 tol)² / 2, about tol² / 8.

    r = log(p / q) spans at most 2 tol and changes sign (both sum to 1), so lies in [−2 tol, 2 tol];
    log(p / m) = log 2 − log(1 + e^−r) has slope σ(−r) <= σ(2 tol) there, so spans at most
    2 tol σ(2 tol), and Hoeffding's lemma (E_p[m / p] = 1) bounds KL(p ‖ m) by a span² / 8; the same
    for KL(q ‖ m). A pass needs the patterns, each from its own model's softmax and mask, to agree
    as closely as their logits say they must.
    """
    sigmoid = 1.0 / (1.0 + math.exp(-2.0 * tolerance))
    return tolerance**2 * sigmoid**2 / 2 + JSD_FLOOR


# (claim, statement, where it is read)
CLAIMS: tuple[tuple[str, str, str], ...] = (
    ("embedding", "H(0) dims 1-3 = (1, [x = <bos>], 0)  (Eq. word_embedding)", "hook_embed"),
    (
        "t1_pattern",
        "Theorem 1 head attends 1/t to every key <= t  (Eq. abs_attention_prob)",
        "blocks.0.attn.hook_pattern",
    ),
    ("t1_output", "its output, dims 1-3 = (0, 0, 1/t)  (Eq. abs_output2)", "blocks.0.hook_attn_out"),
    ("t1_mlp", "after the MLP, dims 1-3 = (1, [x = <bos>], t)  (Eq. rel_hidden_state_1)", "blocks.0.hook_resid_post"),
    (
        "t2_logits",
        "layers >= 2: <q_t, k_i> = f_cnt(x_t, x_i) - (t - i), i <= t, f_cnt from the two tokens' embeddings "
        "alone  (Eq. rel_attention_dot_product)",
        "blocks.<l>.attn.hook_attn_scores, every l >= 1",
    ),
    (
        "t2_kept",
        "dims 1-3 are never overwritten: still (1, [x = <bos>], t) at the end  (Theorem 2)",
        "blocks.<last>.hook_resid_post",
    ),
)

TOLERANCES: dict[str, str] = {
    "embedding": "0: the embedding is a table lookup, copied exactly",
    "t1_pattern": "4 eps: equal logits give exp(0) = 1 each, an exact integer sum t, one rounded division",
    "t1_output": "4 eps: one nonzero value times 1/t, then one nonzero W_O entry (values <= 1)",
    "t1_mlp": "4 eps T^1.5: t <= T is a sum of t - 1 positive ReLU terms (each < 3); rounding errors of a "
    "sum of n terms random-walk to ~sqrt(n) eps times its size, eps T^1.5, and we allow 4x that "
    "(the worst-case bound, about T^2 eps / 2, is 2.8x looser still at T = 512)",
    "t2_logits": "2 x the t1_mlp tolerance (t and i each carry the MLP's error) + 2 d_head eps (2T + C), "
    "C = max sum_j |q_j k_j| over the content components: rounding of the dot product",
    "t2_kept": "the t1_mlp tolerance: later layers add exact zeros to dims 1-3",
}


@contextmanager
def _one_thread():
    """The checks are thousands of small tensor ops, where intra-op threads only add barriers (on a
    busy machine each barrier waits for a time slice: 10-30x slower). The setting is restored."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)


def mlp_tolerance(eps: float, max_length: int) -> float:
    """How far rounding may move the t that the first MLP writes (see ``TOLERANCES["t1_mlp"]``)."""
    return 4 * eps * max_length**1.5


@dataclass(frozen=True)
class ClaimResult:
    """One claim checked in one dtype: the max absolute error over every length and position."""

    claim: str
    statement: str
    hook: str
    dtype: str
    max_error: float
    tolerance: float
    worst_length: int  # sequence length (tokens, <bos> included) where the max error occurred
    worst_position: int  # 1-based query position t there

    @property
    def passed(self) -> bool:
        return bool(self.max_error <= self.tolerance)  # NaN fails

    def to_dict(self) -> dict:
        return {**asdict(self), "passed": self.passed}


@dataclass(frozen=True)
class MatchResult:
    """A NoPE layer against the target PE's head on the same tokens (Section 5.2's JSD, natural log)."""

    target: str
    dtype: str
    max_length: int
    n_sequences: int
    max_jsd: float  # over every sequence and query row
    mean_jsd: float
    max_logit_error: float  # |NoPE logits − target logits|, keys <= t
    tolerance: float  # on the logits; the JSD must be <= jsd_bound(tolerance)
    position_dims: int  # residual dims the NoPE model spends on the position code

    @property
    def passed(self) -> bool:
        return bool(self.max_logit_error <= self.tolerance and self.max_jsd <= jsd_bound(self.tolerance))

    def to_dict(self) -> dict:
        return {**asdict(self), "passed": self.passed}


def parse_dtype(name: str | torch.dtype) -> torch.dtype:
    if isinstance(name, torch.dtype):
        return name
    dtypes = {"float32": torch.float32, "float64": torch.float64}
    if name not in dtypes:
        raise ProbeError(f"unknown dtype {name!r}; choose float32 or float64")
    return dtypes[name]


def random_tokens(vocab_size: int, length: int, generator: torch.Generator, batch: int = 1) -> torch.Tensor:
    """[batch, length] token ids: ``<bos>`` then ids drawn uniformly from 1 .. vocab_size - 1."""
    body = torch.randint(1, vocab_size, (batch, length - 1), generator=generator)
    return torch.cat([torch.full((batch, 1), BOS_ID, dtype=torch.long), body], dim=1)


def _positions(length: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.arange(1, length + 1, dtype=dtype)  # 1-based t


def _content_logits(model: PETransformer, tokens: torch.Tensor, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """f_cnt of every head of ``layer`` as a function of the tokens alone: the heads' components 3 .. h
    (the arbitrary rows of Eq. rel_query / rel_key) on the token embeddings, index 2 dropped.

    Nothing of the forward pass is read, so the check of Eq. rel_attention_dot_product fails if a
    query or key reads anything a layer wrote (which may carry t or i), not only if −(t − i) is off.
    tokens: [pos]. Returns f_cnt [head, query, key] and, per head, sum_j max|q_j| max|k_j| [head]
    (a bound on sum_j |q_j k_j|, the magnitude the dot product's rounding scales with).
    """
    attn = model.blocks[layer].attn
    keep = [d for d in range(model.cfg.d_model) if d != POS]
    embedding = model.W_E[tokens][:, keep]  # [pos, d_model - 1]
    q = embedding @ attn.W_Q[:, keep, 2:] + attn.b_Q[:, None, 2:]  # [head, pos, h - 2]
    k = embedding @ attn.W_K[:, keep, 2:] + attn.b_K[:, None, 2:]
    size = (q.abs().amax(dim=1) * k.abs().amax(dim=1)).sum(dim=-1)
    return q @ k.transpose(1, 2), size  # [head, query, key], [head]


class _Worst:
    """Running max absolute error of one claim and where it happened."""

    def __init__(self) -> None:
        self.error, self.length, self.position = 0.0, 0, 0

    def update(self, errors: torch.Tensor, length: int) -> None:
        """errors: [query] max absolute error at each position of one sequence of ``length`` tokens."""
        value, index = errors.max(dim=0)
        if not value.item() <= self.error:  # also records NaN
            self.error, self.length, self.position = value.item(), length, index.item() + 1


@dataclass(frozen=True)
class _Expected:
    """What the claims expect at every query and key up to the longest length, built once and
    sliced per length."""

    t: torch.Tensor  # [pos] 1-based
    causal: torch.Tensor  # [query, key]
    uniform: torch.Tensor  # [query, key]: Eq. abs_attention_prob
    relative: torch.Tensor  # [query, key]: −(t − i)

    @classmethod
    def up_to(cls, T: int, dtype: torch.dtype) -> _Expected:
        t = _positions(T, dtype)
        causal = torch.ones(T, T, dtype=torch.bool).tril()
        return cls(t, causal, causal.to(dtype) / t[:, None], t[None, :] - t[:, None])


def _read_names(n_layers: int) -> set[str]:
    """The hooks whose values the claims are checked on (the cache keeps only these)."""
    return {
        "hook_embed",
        "blocks.0.attn.hook_pattern",
        "blocks.0.hook_attn_out",
        "blocks.0.hook_resid_post",
        f"blocks.{n_layers - 1}.hook_resid_post",
        *(f"blocks.{layer}.attn.hook_attn_scores" for layer in range(1, n_layers)),
    }


def _check_sequence(
    model: PETransformer, tokens: torch.Tensor, names: set[str], expected: _Expected, worst: dict[str, _Worst]
) -> float:
    """Every claim on one sequence (tokens: [1, length]), its errors folded into ``worst``; returns the
    largest content magnitude of its logits (for the Theorem 2 tolerance)."""
    dtype, n_layers, length = model.W_E.dtype, model.cfg.n_layers, tokens.shape[1]
    _, cache = model.run_with_cache(tokens, names_filter=lambda name: name in names)
    t, causal = expected.t[:length], expected.causal[:length, :length]
    one, bos, zero = torch.ones_like(t), (tokens[0] == BOS_ID).to(dtype), torch.zeros_like(t)
    positions = torch.stack([one, bos, t], dim=1)  # [pos, 3]: Eq. rel_hidden_state_1

    def check(claim: str, value: torch.Tensor, wanted: torch.Tensor) -> None:
        worst[claim].update((value - wanted).abs().flatten(1).amax(dim=1), length)

    check("embedding", cache["hook_embed"][0, :, :3], torch.stack([one, bos, zero], dim=1))
    check("t1_pattern", cache["blocks.0.attn.hook_pattern"][0, 0], expected.uniform[:length, :length])
    check("t1_output", cache["blocks.0.hook_attn_out"][0, :, :3], torch.stack([zero, zero, 1.0 / t], dim=1))
    check("t1_mlp", cache["blocks.0.hook_resid_post"][0, :, :3], positions)
    check("t2_kept", cache[f"blocks.{n_layers - 1}.hook_resid_post"][0, :, :3], positions)
    content_size = 0.0
    for layer in range(1, n_layers):
        content, size = _content_logits(model, tokens[0], layer)
        scores = cache[f"blocks.{layer}.attn.hook_attn_scores"][0] * model.blocks[layer].attn.attn_scale
        error = torch.where(causal, scores - content - expected.relative[:length, :length], 0.0).abs()
        worst["t2_logits"].update(error.amax(dim=(0, 2)), length)  # [head, query, key] -> [query]
        content_size = max(content_size, size.max().item())
    return content_size


@_one_thread()
@torch.no_grad()
def verify_theorems(
    max_length: int = 512,
    dtype: torch.dtype | str = torch.float64,
    seed: int = 0,
    *,
    model: PETransformer | None = None,
    lengths: Iterable[int] | None = None,
    progress: Callable[[int], None] | None = None,
) -> list[ClaimResult]:
    """Check every claim of Theorems 1 and 2 on a random sequence of each length 1 .. ``max_length``.

    ``model``: a construction to check (default: :func:`theorem_model` with ``seed`` in ``dtype``);
    its own dtype is used. ``progress(length)`` is called after each length.
    """
    if model is None:
        model = theorem_model(max_length, seed=seed, dtype=parse_dtype(dtype))
    else:
        max_length = min(max_length, model.cfg.n_ctx)
    dtype = model.W_E.dtype
    eps = torch.finfo(dtype).eps
    lengths = list(range(1, max_length + 1)) if lengths is None else list(lengths)
    generator = torch.Generator().manual_seed(seed)
    worst = {claim: _Worst() for claim, _, _ in CLAIMS}
    content_size = 0.0
    names = _read_names(model.cfg.n_layers)
    T = max(lengths)
    expected = _Expected.up_to(T, dtype)
    for length in lengths:
        tokens = random_tokens(model.cfg.d_vocab, length, generator)
        content_size = max(content_size, _check_sequence(model, tokens, names, expected, worst))
        if progress is not None:
            progress(length)

    mlp = mlp_tolerance(eps, T)
    tolerance = {
        "embedding": 0.0,
        "t1_pattern": 4 * eps,
        "t1_output": 4 * eps,
        "t1_mlp": mlp,
        "t2_logits": 2 * mlp + 2 * model.cfg.d_head * eps * (2 * T + content_size),
        "t2_kept": mlp,
    }
    return [
        ClaimResult(
            claim,
            statement,
            hook,
            str(dtype).removeprefix("torch."),
            worst[claim].error,
            tolerance[claim],
            worst[claim].length,
            worst[claim].position,
        )
        for claim, statement, hook in CLAIMS
    ]


# ---------------------------------------------------------------------------------------------
# Beyond the paper: a NoPE layer against ALiBi / a T5 head.


@dataclass
class Match:
    """A target head (a one-layer ALiBi or T5 model) and the NoPE model built to reproduce it.

    ``position_error(eps)``: how far rounding may move the NoPE model's relative term (see
    :func:`match_alibi`, :func:`match_t5`); ``position_dims``: residual dims spent on a position code.
    """

    name: str
    target: PETransformer
    nope: PETransformer
    position_dims: int
    position_error: Callable[[float], float]
    bias_rounding: float  # bound on |f_rel − fl32(f_rel)|: the target adds its bias in float32


def match_alibi(
    slope: float = 0.5,
    max_length: int = 512,
    seed: int = 0,
    dtype: torch.dtype | str = torch.float64,
    content: Content | None = None,
) -> Match:
    """ALiBi with ``slope`` (rounded to float32, as ALiBi's bias reaches the logits) on random content.

    The NoPE relative term is slope · (i − t) with t and i from the first MLP, each within the
    t1_mlp tolerance: it may move by 2 · slope · that.
    """
    if not math.isfinite(slope):
        raise ProbeError(f"--slope must be a finite number, got {slope}")
    dtype = parse_dtype(dtype)
    slope = float(np.float32(slope))
    content = random_content(seed=seed) if content is None else content
    target = alibi_target(content, slope, max_length, seed, dtype)
    nope = alibi_match_model(content, slope, max_length, seed, dtype)
    bias = -slope * np.arange(max_length, dtype=np.float64)
    return Match(
        f"alibi slope={slope:g}",
        target,
        nope,
        0,
        lambda eps: 2 * abs(slope) * mlp_tolerance(eps, max_length),
        _float32_rounding(bias),
    )


def match_t5(
    source: PETransformer,
    layer: int = 0,
    head: int = 0,
    max_length: int = 512,
    seed: int = 0,
    dtype: torch.dtype | str = torch.float64,
    name: str = "t5",
) -> Match:
    """Head ``head`` of layer ``layer`` of a ``t5`` model (e.g. a trained checkpoint).

    The NoPE relative term is code(t) · (bias^T code(i)); code feature j carries a rounding error
    of about 3 eps j past its knot (three hinge terms of size ~j that cancel), so each side sums to
    about eps T^1.5 max|b| (random signs); we allow 4 eps T^1.5 max|b|.
    """
    dtype = parse_dtype(dtype)
    target, content = t5_head_target(source, layer, head, max_length, dtype)
    with torch.no_grad():
        target.pe.begin_forward(torch.arange(max_length))
        bias = target.pe.bias(0, max_length, max_length)[0].double()  # [query, key]
    nope = bias_match_model(content, bias.numpy(), seed, dtype)
    size = bias.tril().abs().max().item()
    return Match(
        f"{name} layer {layer} head {head}",
        target,
        nope,
        max_length,
        lambda eps: 4 * eps * max_length**1.5 * size,
        _float32_rounding(bias.numpy()),
    )


def _float32_rounding(values: np.ndarray) -> float:
    """0 if ``values`` are float32 numbers already (dyadic slopes, stored T5 tables), else one float32
    rounding of the largest: eps32 max|values| (the target adds its bias in float32)."""
    if np.array_equal(values, values.astype(np.float32)):
        return 0.0
    return float(np.finfo(np.float32).eps * np.abs(values).max())


def random_t5_source(vocab_size: int = 16, seed: int = 0) -> PETransformer:
    """A one-layer ``t5`` model with a random N(0, 1) bias table: the default when no checkpoint is given."""
    from probe.models.transformer import build_model

    model = build_model("t5", vocab_size=vocab_size, n_layers=1, seed=seed)
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        table = model.pe.relative_attention_bias
        table.copy_(torch.randn(table.shape, generator=generator))
    return model


def _jsd(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    from probe.metrics.jsd import jsd

    return jsd(p, q)


@_one_thread()
@torch.no_grad()
def verify_match(match: Match, max_length: int | None = None, n_sequences: int = 4, seed: int = 0) -> MatchResult:
    """Run the NoPE model and the target on the same ``n_sequences`` random sequences of
    ``max_length`` tokens (causal: every query position, so every shorter length, is covered) and
    compare layer 2's head with the target's head: logits, and the JSD of the patterns (float64).

    Logit tolerance: the match's position error, plus 2 d_head eps sum_j |q_j k_j| for the rounding
    of each side's dot product (twice the first-order bound), plus the float32 rounding of the
    target's bias (its additive mask is float32 in every dtype; zero for dyadic slopes and tables
    that are float32 already).
    """
    nope, target = match.nope, match.target
    max_length = max_length or nope.cfg.n_ctx
    dtype = nope.W_E.dtype
    tokens = random_tokens(nope.cfg.d_vocab, max_length, torch.Generator().manual_seed(seed), n_sequences)
    ours_names = (
        "blocks.1.attn.hook_attn_scores",
        "blocks.1.attn.hook_pattern",
        "blocks.1.attn.hook_q",
        "blocks.1.attn.hook_k",
    )
    theirs_names = ("blocks.0.attn.hook_attn_scores", "blocks.0.attn.hook_pattern")
    _, ours = nope.run_with_cache(tokens, names_filter=lambda name: name in ours_names)
    _, theirs = target.run_with_cache(tokens, names_filter=lambda name: name in theirs_names)
    causal = torch.ones(max_length, max_length, dtype=torch.bool).tril()
    logits, reference = ours[ours_names[0]][:, 0], theirs[theirs_names[0]][:, 0]  # [batch, query, key]
    logit_error = torch.where(causal, (logits - reference).abs(), 0.0).max().item()
    divergence = _jsd(ours[ours_names[1]][:, 0].double(), theirs[theirs_names[1]][:, 0].double())  # [batch, query]
    q, k = ours[ours_names[2]][:, :, 0].abs(), ours[ours_names[3]][:, :, 0].abs()  # [batch, pos, d_head]
    size = (q @ k.transpose(1, 2)).max().item()
    eps = torch.finfo(dtype).eps
    tolerance = match.position_error(eps) + 2 * nope.cfg.d_head * eps * size + match.bias_rounding
    return MatchResult(
        match.name,
        str(dtype).removeprefix("torch."),
        max_length,
        n_sequences,
        divergence.max().item(),
        divergence.mean().item(),
        logit_error,
        tolerance,
        match.position_dims,
    )


# ---------------------------------------------------------------------------------------------
# Data for the explorer's Theorems page.


def construction_weights(model: PETransformer) -> dict[str, np.ndarray]:
    """The constructed matrices in the paper's orientation (W_Q, W_K, W_V: h x d; W_O: d x h; W_E: d x V),
    cut to what the proofs specify: dims 1-3 of W_E, head 1 of layer 1, head 1 of layer 2."""
    a0, a1, mlp = model.blocks[0].attn, model.blocks[1].attn, model.blocks[0].mlp
    as_numpy = lambda x: x.detach().double().numpy()  # noqa: E731
    return {
        "W_E (dims 1-3)": as_numpy(model.W_E[:, :3].T),
        "layer 1 head 1 W_K": as_numpy(a0.W_K[0].T),
        "layer 1 head 1 W_V": as_numpy(a0.W_V[0].T),
        "layer 1 head 1 W_O": as_numpy(a0.W_O[0].T),
        "layer 1 MLP W_1 (dims 1, 3)": as_numpy(mlp.W_in[[0, POS]]),
        "layer 1 MLP W_2 (to dim 3)": as_numpy(mlp.W_out[:, POS]),
        "layer 2 head 1 W_Q": as_numpy(a1.W_Q[0].T),
        "layer 2 head 1 W_K": as_numpy(a1.W_K[0].T),
    }


@torch.no_grad()
def residual_positions(model: PETransformer, length: int = 64, seed: int = 0) -> dict[str, np.ndarray]:
    """Residual dims 1-3 across positions t = 1 .. length: after the embedding, after the Theorem 1
    head (1/t in dim 3), after the first MLP (t in dim 3). Each [length, 3]; ``t`` is [length]."""
    tokens = random_tokens(model.cfg.d_vocab, length, torch.Generator().manual_seed(seed))
    names = ("blocks.0.hook_resid_pre", "blocks.0.hook_resid_mid", "blocks.0.hook_resid_post")
    _, cache = model.run_with_cache(tokens, names_filter=lambda name: name in names)
    out = {"t": np.arange(1, length + 1)}
    for key, name in zip(("embedding", "attention", "mlp"), names):
        out[key] = cache[name][0, :, :3].double().numpy()
    return out


@torch.no_grad()
def relative_logits(
    model: PETransformer, length: int = 64, seed: int = 0, layer: int = 1, head: int = 0
) -> dict[str, np.ndarray]:
    """Layer ``layer``'s logits for one head, its content term f_cnt, their difference and the
    paper's −(t − i). [length, length] each, NaN above the diagonal (masked keys)."""
    tokens = random_tokens(model.cfg.d_vocab, length, torch.Generator().manual_seed(seed))
    name = f"blocks.{layer}.attn.hook_attn_scores"
    _, cache = model.run_with_cache(tokens, names_filter=name)
    logits = cache[name][0, head].double() * model.blocks[layer].attn.attn_scale
    content = _content_logits(model, tokens[0], layer)[0][head]
    t = np.arange(1, length + 1)
    mask = np.tril(np.ones((length, length), dtype=bool))
    masked = lambda x: np.where(mask, x, np.nan)  # noqa: E731
    return {
        "t": t,
        "logits": masked(logits.numpy()),
        "content": masked(content.double().numpy()),
        "relative": masked(logits.numpy() - content.double().numpy()),
        "expected": masked(-(t[:, None] - t[None, :]).astype(np.float64)),
    }


@torch.no_grad()
def mlp_response(model: PETransformer, points: int = 2001) -> dict[str, np.ndarray]:
    """The first MLP as a function of x = 1/t alone (dim 1 = 1, dim 3 = x): what it leaves in dim 3,
    x + MLP(x), on a fine grid and at the knots x = 1/t, beside the target 1/x."""
    T = model.cfg.n_ctx
    x = np.concatenate([np.linspace(1.0 / T, 1.0, points), 1.0 / np.arange(1, T + 1)])
    resid = torch.zeros(len(x), model.cfg.d_model, dtype=model.W_E.dtype)
    resid[:, 0] = 1.0
    resid[:, POS] = torch.from_numpy(x)
    value = (resid[:, POS] + model.blocks[0].mlp(resid[None])[0, :, POS]).double().numpy()
    return {
        "x": x[:points],
        "value": value[:points],
        "knots": x[points:],
        "at_knots": value[points:],
        "target_at_knots": np.arange(1, T + 1, dtype=np.float64),
    }


def vocabulary(vocab_size: int) -> list[str]:
    """Token names for a construction's vocabulary: the four specials (``<bos>`` = 0), then w4, w5, ..."""
    return [*SPECIALS, *(f"w{i}" for i in range(len(SPECIALS), vocab_size))][:vocab_size]


def tokenizer_dict(vocab: list[str]) -> dict:
    """The word-level tokenizer description other commands read (``probe.tasks.Tokenizer.from_dict``)."""
    return {"kind": "word", "specials": list(SPECIALS), "words": vocab[len(SPECIALS) :]}
