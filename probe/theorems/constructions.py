"""Explicit NoPE weights for Theorems 1 and 2 (Appendix C), and NoPE layers that reproduce a relative bias.

Residual layout (0-based indices; the paper's dimensions are 1-based), Eq. word_embedding:

  index 0 (dim 1): 1 in every token's embedding
  index 1 (dim 2): 1 in the embedding of ``<bos>`` (vocabulary id 0), else 0
  index 2 (dim 3): 0 in the embedding; the Theorem 1 head adds 1/t (Eq. abs_output2) and the
                   first MLP replaces it by t (Eq. rel_hidden_state_1)
  index 3 ...    : content: the token embedding, which no layer writes (:func:`workspace_start`)
  the rest       : workspace: what the other heads and the later layers write, which no query or
                   key of Theorem 2 reads (so its f_cnt is a function of the two tokens alone)

Positions t are 1-based with ``<bos>`` at t = 1, as in the paper. Every model here is a
``PETransformer`` with ``pe="nope"``, no layer norm (``normalization=None``: λ is the identity,
the paper's remark that layer norm "can be bypassed" taken literally), undivided attention
logits (``attn_scale=False``, as in Eq. attention_weight) and no bias vectors (the constant
index 0 is the bias, as in Eq. ff_sublayer, whose MLP has none).

The paper's first MLP only cites universal approximation; :func:`interpolation_mlp` is an
explicit ReLU network: hidden unit k (k = 1 .. T_max − 1) is ReLU(1/k − x) on x = 1/t (it fires
for t > k), plus one constant unit ReLU(1) = 1. A sum Σ c_k ReLU(1/k − x) is linear between
consecutive knots 1/(k+1), 1/k, its slope there is −(c_1 + ... + c_k), so choosing
c_k = σ_{k−1} − σ_k from the chord slopes σ_k of the target makes it the piecewise-linear
interpolant through (1/t, u(t)), t = 1 .. T_max: exact at every knot in exact arithmetic. In
floating point the input is fl(1/t), the knot is fl(1/k), so unit t is exactly 0 at t, and for
u(t) = t − 1/t (:func:`position_mlp`: c_1 = 3, c_k = 2k, integers, exact in every dtype) every
active unit adds a positive term of size < 3: no cancellation. Width: T_max units.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from probe.errors import ProbeError
from probe.models.transformer import PETransformer, build_model

BOS_ID = 0
ONE, BOS, POS = 0, 1, 2  # residual indices of the paper's dimensions 1, 2, 3
CONSTRUCTION_OPTIONS = dict(normalization=None, attn_scale=False, bias=False, tie_embeddings=False, act_fn="relu")

Weights = dict[str, np.ndarray]  # state_dict name -> float64 array


def interpolation_mlp(values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ReLU units on (1, x = 1/t) whose output interpolates ``values[t - 1]`` at x = 1/t, t = 1 .. T.

    values: [T, n_out]. Returns ``(w_one, w_x, w_out)``: unit j's input is w_one[j] * 1 + w_x[j] * x,
    its output weights are w_out[j] ([T], [T], [T, n_out]). Units 0 .. T-2 are the hinges
    ReLU(1/k − x), k = 1 .. T-1; unit T-1 is the constant ReLU(1) carrying values[0].
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 1:
        values = values[:, None]
    T = values.shape[0]
    k = np.arange(1, T, dtype=np.float64)  # hinge knots 1/k
    # chord slope (in x) on [1/(k+1), 1/k]: (u_k − u_{k+1}) / (1/k − 1/(k+1)) = (u_k − u_{k+1}) k (k+1)
    slopes = (values[:-1] - values[1:]) * (k * (k + 1))[:, None]  # [T-1, n_out]
    previous = np.vstack([np.zeros((1, values.shape[1])), slopes[:-1]])
    w_out = np.vstack([previous - slopes, values[:1]])  # [T, n_out]
    w_one = np.append(1.0 / k, 1.0)
    w_x = np.append(-np.ones(T - 1), 0.0)
    return w_one, w_x, w_out


def position_values(max_length: int) -> np.ndarray:
    """[T] what the first MLP adds to index 2 at position t: t − 1/t (cancels the head's 1/t)."""
    t = np.arange(1, max_length + 1, dtype=np.float64)
    return t - 1.0 / t


def position_mlp(max_length: int) -> np.ndarray:
    """[T] output weights of :func:`interpolation_mlp` for :func:`position_values`, in closed form.

    The chord slope of u(t) = t − 1/t between x = 1/(k+1) and 1/k is −(k(k+1) + 1), so
    c_1 = 3, c_k = 2k (k >= 2), and the constant unit carries u(1) = 0: integers, exact in every
    dtype (computing them from the values in floating point would round them).
    """
    k = np.arange(1, max_length, dtype=np.float64)
    return np.append(np.where(k == 1, 3.0, 2.0 * k), 0.0)


def _zeros(model: PETransformer) -> Weights:
    return {name: np.zeros(tuple(p.shape)) for name, p in model.state_dict().items() if p.dim() > 0 and p.numel()}


def _load(model: PETransformer, weights: Weights, dtype: torch.dtype) -> PETransformer:
    """Cast ``model`` to ``dtype`` and copy the float64 ``weights`` in (each rounded once)."""
    model.to(dtype)
    state = model.state_dict()
    with torch.no_grad():
        for name, value in weights.items():
            state[name].copy_(torch.from_numpy(value))
    return model.eval()


def workspace_start(d_model: int) -> int:
    """First residual index of the workspace in :func:`theorem_model`: indices 3 .. this − 1 hold
    the token embedding's content, this .. d_model − 1 what later heads and MLPs write."""
    return 3 + (d_model - 3) // 2


def _theorem1_layer(
    w: Weights,
    rng: np.random.Generator,
    d_model: int,
    random_heads_write_from: int | None,
    code: np.ndarray | None = None,
    code_columns: list[int] | None = None,
) -> None:
    """Layer 1 (``blocks.0``): head 0 of Eq. abs_key_value / abs_output, the interpolation MLP.

    Head 0's W_Q is arbitrary (random); its keys read index 0 (all ones, Eq. abs_key), its value
    reads index 1 (the ``<bos>`` flag) and W_O writes it to index 2. Other heads are random, writing
    indices ``random_heads_write_from`` onwards only, or zero (None). The MLP adds t − 1/t to index 2
    and, if given, ``code[t - 1, c]`` to residual index ``code_columns[c]`` at position t.
    """
    W_Q, W_K, W_V, W_O = (w[f"blocks.0.attn.{n}"] for n in ("W_Q", "W_K", "W_V", "W_O"))
    n_heads, _, d_head = W_Q.shape
    W_Q[:] = rng.normal(size=W_Q.shape) / np.sqrt(d_model)
    if random_heads_write_from is not None and n_heads > 1:
        for W in (W_K, W_V):
            W[1:] = rng.normal(size=W[1:].shape) / np.sqrt(d_model)
        W_O[1:] = rng.normal(size=W_O[1:].shape) / np.sqrt(d_head)
        W_O[1:, :, :random_heads_write_from] = 0.0
    W_K[0] = 0.0
    W_K[0, ONE, :] = 1.0  # Eq. abs_key_value: every row of W_K is e_1
    W_V[0] = 0.0
    W_V[0, BOS, 0] = 1.0  # W_V's first row is e_2
    W_O[0] = 0.0
    W_O[0, 0, POS] = 1.0  # Eq. abs_output: W_O's third row is e_1
    W_in, W_out = w["blocks.0.mlp.W_in"], w["blocks.0.mlp.W_out"]
    T = W_in.shape[1]
    w_one, w_x, _ = interpolation_mlp(np.zeros(T))
    W_in[ONE], W_in[POS] = w_one, w_x
    W_out[:, POS] = position_mlp(T)
    if code is not None:
        W_out[:, code_columns] = interpolation_mlp(code)[2]


def _theorem2_layer(
    w: Weights, rng: np.random.Generator, layer: int, d_model: int, d_head: int, max_length: int
) -> None:
    """Layers 2 .. n (``blocks.{layer}``, layer >= 1): every head's W_Q, W_K of Eq. rel_query / rel_key,
    so ⟨q_t, k_i⟩ = f_cnt(x_t, x_i) − (t − i); the rest random, writing the workspace only (Theorem 2:
    indices 0-2 are never overwritten; and no layer changes what f_cnt reads)."""
    scale = 1.0 / np.sqrt(d_model)
    workspace = workspace_start(d_model)
    p = f"blocks.{layer}"
    for name in ("W_Q", "W_K"):
        W = w[f"{p}.attn.{name}"]
        W[:] = rng.normal(size=W.shape) * scale
        W[:, POS, :] = 0.0  # the arbitrary components 3 .. h read the token's content, not t
        W[:, workspace:, :] = 0.0  # nor what a layer wrote (which may carry t)
        W[:, :, :2] = 0.0
    w[f"{p}.attn.W_Q"][:, ONE, 0] = 1.0  # Eq. rel_query: q_t = [1, -t, ...]
    w[f"{p}.attn.W_Q"][:, POS, 1] = -1.0
    w[f"{p}.attn.W_K"][:, POS, 0] = 1.0  # Eq. rel_key (printed "W_V =", the key matrix): k_i = [i, 1, ...]
    w[f"{p}.attn.W_K"][:, ONE, 1] = 1.0
    w[f"{p}.attn.W_V"][:] = rng.normal(size=w[f"{p}.attn.W_V"].shape) * scale
    w[f"{p}.attn.W_O"][:] = rng.normal(size=w[f"{p}.attn.W_O"].shape) / np.sqrt(d_head)
    w[f"{p}.mlp.W_in"][:] = rng.normal(size=w[f"{p}.mlp.W_in"].shape) * scale
    w[f"{p}.mlp.W_out"][:] = rng.normal(size=w[f"{p}.mlp.W_out"].shape) / np.sqrt(max_length)
    for name in ("attn.W_O", "mlp.W_out"):
        w[f"{p}.{name}"][..., :workspace] = 0.0  # Theorem 2: positions (and the content) are not overwritten


def theorem_model(
    max_length: int = 512,
    *,
    vocab_size: int = 16,
    d_model: int = 32,
    n_heads: int = 2,
    d_head: int = 8,
    n_layers: int = 2,
    seed: int = 0,
    dtype: torch.dtype = torch.float32,
) -> PETransformer:
    """The NoPE model of Theorems 1 and 2, valid for sequences of up to ``max_length`` tokens.

    Layer 1: Theorem 1 (head 0 writes 1/t to index 2, the MLP turns it into t); layers 2 ..
    ``n_layers``: every head has W_Q, W_K of Eq. rel_query / rel_key, so ⟨q_t, k_i⟩ = f_cnt(x_t, x_i) −
    (t − i). Everything the paper leaves arbitrary is random (``seed``), except that nothing after the
    embedding writes indices 0-2 or the content block, and the arbitrary rows of every later W_Q, W_K
    read only indices 0-1 and the content block: f_cnt is then a function of the two tokens alone, not
    of t or i (the paper leaves h_4 .. h_d arbitrary, which would let f_cnt carry absolute position
    from earlier layers' outputs). The first MLP has ``max_length`` hidden units: the construction
    recovers t exactly up to ``max_length`` tokens and accepts no longer input.
    """
    if max_length < 2:
        raise ProbeError(f"max_length must be at least 2, got {max_length}")
    if vocab_size < 2 or d_model < 5 or d_head < 2 or n_heads < 1 or n_layers < 2:
        raise ProbeError(
            "the construction needs vocab_size >= 2, d_model >= 5, d_head >= 2, n_heads >= 1 and n_layers >= 2"
        )
    model = build_model(
        "nope",
        vocab_size=vocab_size,
        seed=seed,
        n_layers=n_layers,
        d_model=d_model,
        n_heads=n_heads,
        d_head=d_head,
        d_mlp=max_length,
        n_ctx=max_length,
        **CONSTRUCTION_OPTIONS,
    )
    rng = np.random.default_rng(seed)
    w = _zeros(model)
    W_E = w["embed.W_E"]
    W_E[:, ONE] = 1.0
    W_E[BOS_ID, BOS] = 1.0
    workspace = workspace_start(d_model)
    W_E[:, 3:workspace] = rng.normal(size=(vocab_size, workspace - 3))
    _theorem1_layer(w, rng, d_model, random_heads_write_from=workspace)
    scale = 1.0 / np.sqrt(d_model)
    for layer in range(1, n_layers):
        _theorem2_layer(w, rng, layer, d_model, d_head, max_length)
    w["unembed.W_U"][:] = rng.normal(size=w["unembed.W_U"].shape) * scale
    return _load(model, w, dtype)


# ---------------------------------------------------------------------------------------------
# Beyond the paper: a NoPE layer whose relative term is a given f_rel(t − i).


@dataclass(frozen=True)
class Content:
    """A head's content term on per-token vectors: (q(x_t) · k(x_i)) / scale,
    q(x) = embed[x] @ W_Q + b_Q, k(x) = embed[x] @ W_K + b_K."""

    embed: np.ndarray  # [vocab, d_content]
    W_Q: np.ndarray  # [d_content, d_head]
    W_K: np.ndarray  # [d_content, d_head]
    b_Q: np.ndarray  # [d_head]
    b_K: np.ndarray  # [d_head]
    scale: float = 1.0

    @property
    def vocab_size(self) -> int:
        return self.embed.shape[0]


def random_content(vocab_size: int = 16, d_content: int = 16, d_head: int = 8, seed: int = 0) -> Content:
    rng = np.random.default_rng(seed)
    return Content(
        embed=rng.normal(size=(vocab_size, d_content)),
        W_Q=rng.normal(size=(d_content, d_head)) / np.sqrt(d_content),
        W_K=rng.normal(size=(d_content, d_head)) / np.sqrt(d_content),
        b_Q=np.zeros(d_head),
        b_K=np.zeros(d_head),
    )


def _target(pe: str, content: Content, max_length: int, seed: int, dtype: torch.dtype, **options) -> PETransformer:
    """A one-layer, one-head model of PE ``pe`` whose head computes ``content`` + its PE term."""
    d_content, d_head = content.W_Q.shape
    model = build_model(
        pe,
        vocab_size=content.vocab_size,
        seed=seed,
        n_layers=1,
        n_heads=1,
        d_model=d_content,
        d_head=d_head,
        d_mlp=1,
        n_ctx=max_length,
        normalization=None,
        bias=True,
        tie_embeddings=False,
        attn_scale=False,
        **options,
    )
    model.to(dtype)
    state = model.state_dict()
    with torch.no_grad():
        state["embed.W_E"].copy_(torch.from_numpy(content.embed))
        state["blocks.0.attn.W_Q"][0].copy_(torch.from_numpy(content.W_Q / content.scale))
        state["blocks.0.attn.b_Q"][0].copy_(torch.from_numpy(content.b_Q / content.scale))
        state["blocks.0.attn.W_K"][0].copy_(torch.from_numpy(content.W_K))
        state["blocks.0.attn.b_K"][0].copy_(torch.from_numpy(content.b_K))
    return model.eval()


def alibi_target(
    content: Content, slope: float, max_length: int = 512, seed: int = 0, dtype: torch.dtype = torch.float32
) -> PETransformer:
    """One ALiBi head with slope ``slope`` on ``content``: logits = content − slope (t − i)."""
    model = _target("alibi", content, max_length, seed, dtype)
    model.pe.slopes.fill_(slope)
    return model


def t5_head_target(
    source: PETransformer, layer: int, head: int, max_length: int = 512, dtype: torch.dtype = torch.float32
) -> tuple[PETransformer, Content]:
    """Head ``head`` of layer ``layer`` of a ``t5`` model, fed the (normalized) token embeddings.

    Its logits are (ln1(e_t) W_Q + b_Q) · (ln1(e_i) W_K + b_K) / scale + b_head[bucket(t − i)]; for
    layer 0 that is exactly the source head (tested), for a later layer the same head on token
    content instead of that layer's residual. Returns the one-layer ``t5`` model and the content.
    """
    c = source.config
    if c.pe != "t5":
        raise ProbeError(f"--match t5 needs a t5 model; this one has pe={c.pe!r}")
    if not 0 <= layer < c.n_layers:
        raise ProbeError(f"layer {layer} does not exist; this model has layers 0..{c.n_layers - 1}")
    if not 0 <= head < c.n_heads:
        raise ProbeError(f"head {head} does not exist; this model has heads 0..{c.n_heads - 1}")
    block = source.blocks[layer]
    with torch.no_grad():
        embed = block.ln1(source.W_E[None])[0].double()  # [vocab, d_model]: what layer 0 reads
        attn = block.attn
        content = Content(
            embed=embed.numpy(),
            W_Q=attn.W_Q[head].double().numpy(),
            W_K=attn.W_K[head].double().numpy(),
            b_Q=attn.b_Q[head].double().numpy(),
            b_K=attn.b_K[head].double().numpy(),
            scale=float(attn.attn_scale),
        )
        table = source.pe.relative_attention_bias[0 if c.pe_options["shared"] else layer, :, head]
        target = _target(
            "t5",
            content,
            max_length,
            c.seed,
            dtype,
            pe_options={"num_buckets": c.pe_options["num_buckets"], "max_distance": c.pe_options["max_distance"]},
        )
        target.pe.relative_attention_bias[0, :, 0] = table
    return target, content


def _match_skeleton(
    content: Content, max_length: int, n_code: int, n_position: int, seed: int
) -> tuple[PETransformer, Weights, int]:
    """A two-layer, one-head NoPE model: indices 0-2 as in Theorem 1, ``n_code`` dims for a position
    code at 3 .. 3 + n_code, then the content embedding; its heads have ``n_position`` positional
    components before the content's. Returns the model, zero weights with the embedding filled
    in, and the first content index."""
    d_content, d_head = content.W_Q.shape
    first = 3 + n_code
    model = build_model(
        "nope",
        vocab_size=content.vocab_size,
        seed=seed,
        n_layers=2,
        n_heads=1,
        d_model=first + d_content,
        d_head=n_position + d_head,
        d_mlp=max_length,
        n_ctx=max_length,
        **CONSTRUCTION_OPTIONS,
    )
    w = _zeros(model)
    W_E = w["embed.W_E"]
    W_E[:, ONE] = 1.0
    W_E[BOS_ID, BOS] = 1.0
    W_E[:, first:] = content.embed
    return model, w, first


def _content_head(w: Weights, content: Content, first: int, column: int) -> None:
    """Layer 2's head reads the content term into its components ``column`` onwards; the biases
    come from index 0 (the constant 1), the scale is folded into W_Q."""
    d_head = content.W_Q.shape[1]
    cols = slice(column, column + d_head)
    W_Q, W_K = w["blocks.1.attn.W_Q"][0], w["blocks.1.attn.W_K"][0]
    W_Q[first:, cols] = content.W_Q / content.scale
    W_Q[ONE, cols] = content.b_Q / content.scale
    W_K[first:, cols] = content.W_K
    W_K[ONE, cols] = content.b_K


def alibi_match_model(
    content: Content, slope: float, max_length: int = 512, seed: int = 0, dtype: torch.dtype = torch.float32
) -> PETransformer:
    """NoPE model whose layer-2 head computes ``content`` − slope (t − i): Theorem 2 with the position
    components scaled by the slope (q = [slope, −slope t, ...], k = [i, 1, ...])."""
    model, w, first = _match_skeleton(content, max_length, 0, 2, seed)
    _theorem1_layer(w, np.random.default_rng(seed), model.cfg.d_model, None)
    W_Q, W_K = w["blocks.1.attn.W_Q"][0], w["blocks.1.attn.W_K"][0]
    W_Q[ONE, 0], W_Q[POS, 1] = slope, -slope
    W_K[POS, 0], W_K[ONE, 1] = 1.0, 1.0
    _content_head(w, content, first, 2)
    return _load(model, w, dtype)


def bias_match_model(
    content: Content, bias: np.ndarray, seed: int = 0, dtype: torch.dtype = torch.float32
) -> PETransformer:
    """NoPE model whose layer-2 head computes ``content`` + bias[t, i] for any causal bias matrix.

    bias: [T, T], query t, key i (0-based); only i <= t matters. The first MLP writes a one-hot
    code of t (hat functions of 1/t, from :func:`interpolation_mlp`) to indices 3 .. 3 + T; the
    head's query reads the code as it is, its key reads it through bias^T, so
    ⟨q_pos(t), k_pos(i)⟩ = e_t · (bias^T e_i) = bias[t, i]. (A T5 bucket bias has numerical rank
    close to T on the causal Toeplitz matrix whatever its masked upper half, so a low-rank
    factorization would save nothing; the factorization I · bias is exact.)
    """
    bias = np.asarray(bias, dtype=np.float64)
    T = bias.shape[0]
    if bias.shape != (T, T):
        raise ProbeError(f"bias must be a square [query, key] matrix, got shape {bias.shape}")
    model, w, first = _match_skeleton(content, T, T, T, seed)
    _theorem1_layer(w, np.random.default_rng(seed), model.cfg.d_model, None, np.eye(T), list(range(3, 3 + T)))
    W_Q, W_K = w["blocks.1.attn.W_Q"][0], w["blocks.1.attn.W_K"][0]
    W_Q[3:first, :T] = np.eye(T)
    W_K[3:first, :T] = bias.T
    _content_head(w, content, first, T)
    return _load(model, w, dtype)
