"""How a model represents position, as pure tensor functions (float64 inside, CPU or GPU).

- Linear position probes (Haviv et al. 2022, "Transformer language models without positional
  encodings still learn positional information", Section 4): ridge regression in closed form from a
  residual-stream vector to its absolute position, scored by R², mean absolute error in positions
  and exact-position accuracy (the rounded prediction equals the position), with percentile
  bootstrap intervals over examples.
- Relative-vs-absolute decomposition of attention logits: least squares of a head's causal logits
  onto one-hot bases of the distance i − j, of the key position j, and of both (a two-way additive
  model), from per-cell sufficient statistics, so any number of batches and heads is one solve.
- Attention sinks (Xiao et al. 2023, "Efficient streaming language models with attention sinks",
  Section 3.1): the attention a query gives to the first k tokens, beside uniform attention's k/(i+1).
- Variance of attention outputs against position (Chi et al. 2023, "Latent positional information
  is in the self-attention variance of transformer language models without positional
  embeddings", Section 2: uniform attention over n i.i.d. values has variance σ²/n).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from probe.errors import ProbeError

PROBE_STATISTICS = ("count", "target_sum", "target_squares", "squared_error", "absolute_error", "exact")


# -- ridge probes --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Ridge:
    """A fitted linear read-out ``features @ weight + bias``."""

    weight: Tensor  # [d] float64
    bias: Tensor  # [] float64
    penalty: float  # the λ used: alpha times the mean feature variance (times n)

    def predict(self, features: Tensor) -> Tensor:
        """[n, d] -> [n] float64."""
        return features.double() @ self.weight + self.bias


def fit_ridge(features: Tensor, targets: Tensor, alpha: float = 1e-3) -> Ridge:
    """Ridge regression with an unpenalised intercept, in closed form (Hoerl & Kennard 1970):
    w = (X_cᵀX_c + λI)⁻¹ X_cᵀy_c on centred X, y; b = ȳ − x̄ᵀw.

    features: [n, d]; targets: [n]. λ = ``alpha`` · tr(X_cᵀX_c) / d, so ``alpha`` does not depend on the
    scale of the residual stream; constant features (no information) give w = 0 and the mean as
    prediction.
    """
    if features.ndim != 2 or targets.shape != features.shape[:1] or features.shape[0] < 1:
        raise ProbeError(
            f"ridge needs features [n, d] and targets [n] with n >= 1, got {tuple(features.shape)} and "
            f"{tuple(targets.shape)}"
        )
    if alpha <= 0:
        raise ProbeError(f"the ridge penalty must be positive, got {alpha}")
    x, y = features.double(), targets.double()
    mean_x, mean_y = x.mean(0), y.mean()  # [d], []
    x = x - mean_x
    gram = x.T @ x  # [d, d]
    scale = gram.diagonal().mean().item()
    penalty = alpha * (scale if scale > 0 else 1.0)
    eye = torch.eye(gram.shape[0], dtype=gram.dtype, device=gram.device)
    weight = torch.linalg.solve(gram + penalty * eye, x.T @ (y - mean_y))  # [d]
    return Ridge(weight, mean_y - mean_x @ weight, penalty)


def probe_statistics(predicted: Tensor, target: Tensor, example: Tensor, n_examples: int) -> Tensor:
    """Per-example sums from which every probe score of any set of examples follows.

    predicted, target: [n] (target: integer positions or distances); example: [n] index of each
    row's example. Returns [n_examples, 6]: count, Σy, Σy², Σ(ŷ − y)², Σ|ŷ − y|, Σ[round(ŷ) = y]
    (:data:`PROBE_STATISTICS`), float64.
    """
    predicted, target = predicted.double(), target.double()
    error = predicted - target
    columns = torch.stack(
        [
            torch.ones_like(target),
            target,
            target * target,
            error * error,
            error.abs(),
            (predicted.round() == target).double(),
        ],
        dim=1,
    )  # [n, 6]
    sums = torch.zeros(n_examples, len(PROBE_STATISTICS), dtype=torch.float64, device=predicted.device)
    return sums.index_add_(0, example.to(predicted.device), columns)


def probe_scores(sums: Tensor) -> dict[str, Tensor]:
    """R², mean absolute error and exact accuracy from summed :func:`probe_statistics` ([..., 6]).

    R² = 1 − Σ(ŷ − y)² / Σ(y − ȳ)², with ȳ the mean of the set scored (NaN if y is constant there):
    0 for a probe that predicts the mean, negative for one worse than that.
    """
    count, total, squares, squared_error, absolute_error, exact = sums.unbind(-1)
    spread = squares - total * total / count  # Σ(y − ȳ)²
    return {"r2": 1 - squared_error / spread, "mae": absolute_error / count, "accuracy": exact / count}


def resample_counts(n: int, n_resamples: int, seed: int, device: torch.device | None = None) -> Tensor:
    """[resample, example] how often each of ``n`` examples is drawn in each bootstrap resample (the
    draws of :func:`probe.metrics.bootstrap.bootstrap_ci`: a seeded CPU generator, any device)."""
    draws = torch.randint(n, (n_resamples, n), generator=torch.Generator().manual_seed(seed))  # [resample, draw]
    counts = torch.zeros(n_resamples, n, dtype=torch.float64).scatter_add_(
        1, draws, torch.ones(n_resamples, n, dtype=torch.float64)
    )
    return counts.to(device) if device is not None else counts


def bootstrap_probe_scores(
    per_example: Tensor, n_resamples: int = 1000, confidence: float = 0.95, seed: int = 0
) -> dict[str, tuple[float, float, float]]:
    """Each score of :func:`probe_scores` on all examples, and its percentile bootstrap interval over
    examples (the probe stays fixed; the examples scored are resampled). per_example: [example, 6]."""
    if per_example.shape[0] < 1:
        raise ProbeError("bootstrap needs at least one example")
    if not 0 < confidence < 1:
        raise ProbeError(f"confidence must lie in (0, 1), got {confidence}")
    counts = resample_counts(per_example.shape[0], n_resamples, seed, per_example.device)
    resampled = probe_scores(counts @ per_example)  # each [resample]
    point = probe_scores(per_example.sum(0))
    tail = (1 - confidence) / 2
    q = torch.tensor([tail, 1 - tail], dtype=torch.float64, device=per_example.device)
    out = {}
    for name, values in resampled.items():
        low, high = torch.nanquantile(values, q).tolist() if values.isfinite().any() else (float("nan"),) * 2
        out[name] = (point[name].item(), low, high)
    return out


# -- relative vs absolute logits ---------------------------------------------------------------------
def causal_cells(width: int, device: torch.device | None = None) -> tuple[Tensor, Tensor]:
    """(query i, key j) of every causal cell j <= i of a width x width map, row by row: the order in which
    :class:`LogitSums` holds them (the cells of a narrower map are a prefix of a wider one's)."""
    rows, cols = torch.tril_indices(width, width, device=device)
    return rows, cols


def _width(cells: int) -> int:
    return (math.isqrt(8 * cells + 1) - 1) // 2


@dataclass(frozen=True)
class LogitSums:
    """Sufficient statistics of causal logits, per causal cell (query i, key j <= i, in :func:`causal_cells`
    order): what :func:`decompose_logits` reads. The row-centred view (each example's query row minus its
    mean over its keys j <= i, the part of the logits softmax sees) follows from ``row_means``, so it costs
    no second set of cells."""

    sums: Tensor  # [..., head, cell] float64: Σ of the logits in each causal cell
    squares: Tensor  # [..., head] float64: Σ of the squared logits over all cells
    row_means: Tensor  # [..., head, query] float64: Σ over examples of each query row's mean (0 on padding)
    row_squares: Tensor  # [..., head] float64: Σ of the squared row-centred logits
    counts: Tensor  # [cell] float64: how many logits each cell holds

    @property
    def width(self) -> int:
        return _width(self.counts.shape[-1])

    @property
    def row_sums(self) -> Tensor:
        """[..., head, cell] per-cell sums of the row-centred logits: Σ(x − mean of its row)."""
        rows, _ = causal_cells(self.width, self.sums.device)
        return self.sums - self.row_means[..., rows]

    def __add__(self, other: LogitSums) -> LogitSums:
        width = max(self.width, other.width)
        cells = width * (width + 1) // 2
        return LogitSums(
            _pad(self.sums, cells) + _pad(other.sums, cells),
            self.squares + other.squares,
            _pad(self.row_means, width) + _pad(other.row_means, width),
            self.row_squares + other.row_squares,
            _pad(self.counts, cells) + _pad(other.counts, cells),
        )

    def add_(self, other: LogitSums) -> LogitSums:
        """``self + other``, summed into ``self``'s tensors where ``other`` is no wider (the next batch of
        inputs of one length: no new tensors per batch); else a new, wider sum."""
        width = other.width
        if width > self.width:
            return self + other
        cells = other.counts.shape[-1]
        self.sums[..., :cells] += other.sums
        self.squares.add_(other.squares)
        self.row_means[..., :width] += other.row_means
        self.row_squares.add_(other.row_squares)
        self.counts[:cells] += other.counts
        return self


def _pad(x: Tensor, size: int) -> Tensor:
    """Zero-pad the last dim of ``x`` to ``size``."""
    extra = size - x.shape[-1]
    return torch.nn.functional.pad(x, (0, extra)) if extra else x


def logit_sums(scores: Tensor, lengths: Tensor) -> LogitSums:
    """The causal cells (key j <= query i < length) of a batch of logits, summed over the batch.

    scores: [batch, ..., head, query, key] pre-softmax (``hook_attn_scores``; masked cells may hold −inf);
    lengths: [batch] real tokens of each sequence (right padding after them). Five passes over the logits:
    a float64 copy, its masking, the row sums, the sum of squares and the cells' gather.
    """
    T = scores.shape[-1]
    i = torch.arange(T, device=scores.device)
    causal = i[None, :] <= i[:, None]  # [query, key]
    real = i[None, :] < lengths.to(scores.device)[:, None]  # [batch, query]
    mask = causal & real[:, :, None]  # [batch, query, key]
    view = (mask.shape[0], *([1] * (scores.ndim - 3)), T, T)
    x = scores.to(torch.float64, copy=True).masked_fill_(~mask.reshape(view), 0.0)
    row_sum = x.sum(-1)  # [batch, ..., query]
    row_mean = row_sum / (i + 1.0)  # 0 on padding rows: x is 0 there
    squares = torch.linalg.vector_norm(x, dim=(-2, -1)).square().sum(0)  # [..., head]
    rows, cols = causal_cells(T, scores.device)
    total = x.sum(0) if x.shape[0] > 1 else x[0]  # [..., head, query, key]
    return LogitSums(
        total[..., rows, cols],
        squares,
        row_mean.sum(0),
        squares - (row_sum * row_mean).sum(dim=(0, -1)),  # Σ(x − m)² = Σx² − Σ_rows (i + 1) m²
        mask[:, rows, cols].double().sum(0),
    )


@dataclass(frozen=True)
class LogitBases:
    """The least-squares fits :func:`decompose_logits` makes, for one set of cell counts: the pseudo-inverses
    of the bases' Gram matrices, computed once and shared by every layer and head read on the same inputs.

    The additive fit f(i − j) + g(j) has the Gram matrix G = [[A, B], [Bᵀ, D]] (A the distance basis's, D the
    key basis's). Rather than G⁺ (2T × 2T), it is read in two T × T steps: the distance fit, then the key basis
    with the distance basis projected out, whose Gram matrix is the Schur complement S = D − Bᵀ A⁺ B:
    rᵀ G⁺ r = aᵀ A⁺ a + uᵀ S⁺ u, u = d − Bᵀ A⁺ a, for r = (a, d) = Xᵀx. Exact for any Gram matrix (the range of
    B lies in A's), and about three times cheaper at T = 2,048 than the pseudo-inverse of G."""

    width: int
    within_rows: bool
    distance: Tensor  # [cell] i − j
    key: Tensor  # [cell] j
    inverses: dict[str, Tensor]  # relative (A⁺), absolute (D⁺) -> [T, T]
    through: Tensor  # [T, T] A⁺ B: the key basis's part that the distance basis explains
    schur: Tensor  # [T, T] S⁺

    def explained_both(self, by_distance: Tensor, by_key: Tensor) -> Tensor:
        """rᵀ G⁺ r of the additive fit, [...], from the bases' sums ``by_distance``, ``by_key`` [..., T]."""
        rest = by_key - by_distance @ self.through  # u = d − Bᵀ A⁺ a, as rows
        return _explained(self.inverses["relative"], by_distance) + _explained(self.schur, rest)


def logit_bases(counts: Tensor, within_rows: bool = False) -> LogitBases:
    """:class:`LogitBases` for the cells ``counts`` [cell] holds (raw logits, or centred within rows)."""
    T = _width(counts.shape[-1])
    device = counts.device
    i = torch.arange(T, device=device)
    rows, cols = causal_cells(T, device)
    distance = rows - cols
    cross = torch.zeros(T, T, dtype=torch.float64, device=device)  # [distance, key]: cells with both
    cross.index_put_((distance, cols), counts, accumulate=True)
    n_distance, n_key = cross.sum(1), cross.sum(0)  # [distance], [key]
    if within_rows:  # Σ over rows of the row-mean outer products: Σ_{i >= max(a, b)} rows_i / (i + 1)
        rows_of = counts[rows == cols] / (i + 1.0)  # [query]: rows of query i, each over i + 1 keys
        tail = rows_of.flip(0).cumsum(0).flip(0)  # [T]: Σ_{i >= a}
        shared = tail[torch.maximum(i[:, None], i[None, :])]  # [T, T]
    else:  # raw logits: the one-hot bases hold the constant themselves
        shared = torch.zeros(T, T, dtype=torch.float64, device=device)
    gram_d, gram_k = torch.diag(n_distance) - shared, torch.diag(n_key) - shared  # A, D
    inverses = {
        name: torch.linalg.pinv(gram, rtol=1e-10, hermitian=True)
        for name, gram in (("relative", gram_d), ("absolute", gram_k))
    }
    through = inverses["relative"] @ (cross - shared)  # A⁺ B [T, T]
    schur = gram_k - (cross - shared).T @ through  # S = D − Bᵀ A⁺ B
    schur = torch.linalg.pinv((schur + schur.T) / 2, rtol=1e-10, hermitian=True)
    return LogitBases(T, within_rows, distance, cols, inverses, through, schur)


def _explained(inverse: Tensor, rhs: Tensor) -> Tensor:
    """rhsᵀ G⁺ rhs: the sum of squares a least-squares fit with Gram matrix G (``inverse`` = G⁺, [p, p]) and
    Xᵀx = ``rhs`` [..., p] explains (Σx² minus it is the SSE); the bases here are rank-deficient."""
    return (rhs * (rhs @ inverse)).sum(-1)  # G⁺ is symmetric


def decompose_logits(stats: LogitSums, within_rows: bool = False, bases: LogitBases | None = None) -> dict[str, Tensor]:
    """Shares of the variance of a head's causal logits explained by functions of position, each [..., head].

    - ``relative``: R² of the best f(i − j) (one-hot basis of the distance);
    - ``absolute``: R² of the best g(j) (one-hot basis of the key position);
    - ``both``: R² of the best additive f(i − j) + g(j);
    - ``position``: adjusted R² of any function of (i, j) (cell means, adjusted for the number of cells:
      1 − (SSE/(N − cells)) / (SST/(N − 1)), so a cell with a single logit does not count as explained);
    - ``content``: 1 − ``both``: what neither distance nor key position explains (content, and
      position terms of other shapes, e.g. of the query position).

    R² = 1 − SSE/SST over all causal logits pooled, SST around their grand mean; NaN where the logits
    are constant. With ``within_rows``, the logits and the bases are first centred within each query
    row (per example): softmax ignores a row's offset, so what is left is what shapes attention; but
    within a row i − j = i − j', so there a linear f(i − j) is a linear g(j): ALiBi's bias counts as
    both. Every SSE is Σx² − rhsᵀG⁺rhs from the Gram matrix G of the basis, computed in float64; ``bases``
    (:func:`logit_bases` of the same counts) saves computing G⁺ again for every layer.
    """
    counts = stats.counts
    bases = logit_bases(counts, within_rows) if bases is None else bases
    flat, squares = (stats.row_sums, stats.row_squares) if within_rows else (stats.sums, stats.squares)
    T = bases.width
    n = counts.sum()
    total = flat.sum(-1)  # [..., head]
    sst = squares if within_rows else squares - total * total / n
    sst = torch.where(sst <= ROUNDING * squares, float("nan"), sst)  # constant logits, up to the sums' rounding
    zeros = torch.zeros(*flat.shape[:-1], T, dtype=torch.float64, device=flat.device)
    by_distance = zeros.index_add(-1, bases.distance, flat)
    by_key = zeros.index_add(-1, bases.key, flat)
    fits = {
        "relative": _explained(bases.inverses["relative"], by_distance),
        "absolute": _explained(bases.inverses["absolute"], by_key),
        "both": bases.explained_both(by_distance, by_key),
        "position": torch.where(counts > 0, flat * flat / counts.clamp(min=1), 0.0).sum(-1),
    }
    if not within_rows:  # the fits above include the grand mean; R² counts only what it explains beyond it
        fits = {name: value - total * total / n for name, value in fits.items()}
    shares = {name: value / sst for name, value in fits.items()}
    cells = (counts > 0).sum()
    diagonal = counts[bases.distance == 0]  # [query]: the cell (i, i) of each row
    if within_rows:  # each example's row loses one degree of freedom, and so does each query's set of cells
        sst_dof = n - diagonal.sum()
        sse_dof = sst_dof - (cells - (diagonal > 0).sum())
    else:
        sst_dof, sse_dof = n - 1, n - cells
    shares["position"] = 1 - ((sst - fits["position"]) / sse_dof) / (sst / sst_dof)
    shares["content"] = 1 - shares["both"]
    return shares


def head_kind(shares: dict[str, Tensor], content_above: float = 0.5) -> list:
    """Per head (nested lists over the leading dims): "content" where content > ``content_above`` of the
    variance, else "relative" or "absolute", whichever basis alone explains more; "constant" where the logits
    do not vary (the shares are NaN: no basis explains anything)."""
    kind = torch.where(shares["relative"] >= shares["absolute"], 1, 2)
    kind = torch.where(shares["content"] > content_above, 0, kind)
    kind = torch.where(shares["relative"].isnan() | shares["absolute"].isnan(), 3, kind)
    names = ("content", "relative", "absolute", "constant")

    def named(x: list | int) -> list | str:
        return [named(v) for v in x] if isinstance(x, list) else names[x]

    return named(kind.tolist())


# -- attention sinks -----------------------------------------------------------------------------------
def sink_share(patterns: Tensor, lengths: Tensor, first: int = 1) -> tuple[Tensor, Tensor]:
    """Attention on the first ``first`` keys, averaged over each example's queries i >= ``first``
    (queries before see nothing else), and what uniform causal attention gives there: the mean of
    first / (i + 1) (Xiao et al. 2023, Section 3.1).

    patterns: [batch, ..., query, key] (zero or anything beyond each length); lengths: [batch].
    Returns share [batch, ...] and uniform [batch], float64; NaN for an example with no such query.
    """
    T = patterns.shape[-1]
    if first < 1:
        raise ProbeError(f"the number of first tokens must be at least 1, got {first}")
    i = torch.arange(T, device=patterns.device)
    queries = (i[None, :] >= first) & (i[None, :] < lengths.to(patterns.device)[:, None])  # [batch, query]
    n = queries.sum(1).double()  # [batch]
    mass = patterns[..., :first].double().sum(-1)  # [batch, ..., query]
    view = queries.reshape(queries.shape[0], *([1] * (mass.ndim - 2)), T)
    share = torch.where(view, mass, 0.0).sum(-1) / n.reshape(-1, *([1] * (mass.ndim - 2)))
    uniform = torch.where(queries, first / (i[None, :] + 1.0), 0.0).sum(1) / n
    return share, uniform


def row_entropy(patterns: Tensor, lengths: Tensor) -> tuple[Tensor, Tensor]:
    """Mean entropy (nats) of the attention rows of each example's queries, and that of uniform causal
    attention there (the mean of ln(i + 1)): attention "distraction", rows spreading over more keys as the
    input grows (Wang et al. 2024, "Length Generalization of Causal Transformers without Position Encoding",
    Sec. 3).

    patterns: [batch, ..., query, key] (rows sum to 1 over keys <= query; anything beyond each length);
    lengths: [batch]. Returns entropy [batch, ...] and uniform [batch], float64."""
    T = patterns.shape[-1]
    i = torch.arange(T, device=patterns.device)
    queries = i[None, :] < lengths.to(patterns.device)[:, None]  # [batch, query]
    n = queries.sum(1).double()  # [batch]
    p = patterns.double()
    per_row = -torch.where(p > 0, p * p.log(), 0.0).sum(-1)  # [batch, ..., query]
    view = queries.reshape(queries.shape[0], *([1] * (per_row.ndim - 2)), T)
    entropy = torch.where(view, per_row, 0.0).sum(-1) / n.reshape(-1, *([1] * (per_row.ndim - 2)))
    uniform = torch.where(queries, (i[None, :].double() + 1).log(), 0.0).sum(1) / n
    return entropy, uniform


# -- variance against position -------------------------------------------------------------------------
@dataclass(frozen=True)
class MomentSums:
    """Per position: how many examples reach it, and the sum and sum of squares of each feature there."""

    count: Tensor  # [pos] float64
    sums: Tensor  # [..., pos, d] float64
    squares: Tensor  # [..., pos, d] float64

    def __add__(self, other: MomentSums) -> MomentSums:
        size = max(self.count.shape[0], other.count.shape[0])

        def pad(x: Tensor, features: bool) -> Tensor:  # zeros at the end of the position dim, up to size
            extra = size - x.shape[-2 if features else -1]
            return torch.nn.functional.pad(x, (0, 0, 0, extra) if features else (0, extra))

        return MomentSums(
            pad(self.count, False) + pad(other.count, False),
            pad(self.sums, True) + pad(other.sums, True),
            pad(self.squares, True) + pad(other.squares, True),
        )


def moment_sums(values: Tensor, lengths: Tensor) -> MomentSums:
    """values: [batch, ..., pos, d] (e.g. ``hook_attn_out`` [batch, pos, d_model]); lengths: [batch]."""
    T = values.shape[-2]
    real = torch.arange(T, device=values.device)[None, :] < lengths.to(values.device)[:, None]  # [batch, pos]
    mask = real.reshape(real.shape[0], *([1] * (values.ndim - 3)), T, 1)
    x = torch.where(mask, values.double(), 0.0)
    return MomentSums(real.double().sum(0), x.sum(0), (x * x).sum(0))


ROUNDING = 1e-10  # a variance below this fraction of the mean square is the sums' rounding: reported as 0


def position_variance(stats: MomentSums) -> Tensor:
    """[..., pos] the variance across examples at each position (unbiased, n − 1), averaged over features;
    NaN where fewer than two examples reach the position. Identical values (every example's first
    tokens the same) leave Σx² − (Σx)²/n at rounding level, ~1e-16 of Σx²: below :data:`ROUNDING` of
    the mean square it is 0."""
    n = stats.count[:, None]  # [pos, 1]
    variance = ((stats.squares - stats.sums * stats.sums / n) / (n - 1)).mean(-1)  # [..., pos]
    mean_square = (stats.squares / n).mean(-1)  # [..., pos]
    variance = torch.where(variance <= ROUNDING * mean_square, 0.0, variance)
    return torch.where(stats.count >= 2, variance, float("nan"))


def log_slope(positions: Tensor, values: Tensor) -> Tensor:
    """Least-squares slope of log(values) against log(positions) over the finite, positive entries, per
    leading index: −1 where the values fall as 1/t (uniform attention over i.i.d. values, Chi et al.
    2023). positions: [pos] (1-based); values: [..., pos]."""
    x = positions.double().log().expand_as(values)
    ok = values.isfinite() & (values > 0)
    y = torch.where(ok, values.double().clamp(min=1e-300).log(), 0.0)
    w = ok.double()
    n = w.sum(-1)
    mx, my = (w * x).sum(-1) / n, (w * y).sum(-1) / n
    dx = torch.where(ok, x - mx[..., None], 0.0)
    return (dx * (y - my[..., None])).sum(-1) / (dx * dx).sum(-1)
