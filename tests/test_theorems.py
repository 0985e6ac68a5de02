"""Theorems 1 and 2 (Appendix C): the constructed weights, checked independently of the model.

The claims are recomputed here with numpy straight from the weight matrices (a forward pass of
our own, not TransformerLens'), over several seeds and lengths; corrupting one weight entry of
each construction must make its check fail; the CLI's exit codes."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from probe.cli import main
from probe.models import build_model, load_checkpoint, save_checkpoint, t5_relative_bucket
from probe.theorems import checks
from probe.theorems.constructions import (
    BOS,
    BOS_ID,
    ONE,
    POS,
    interpolation_mlp,
    position_mlp,
    position_values,
    random_content,
    t5_head_target,
    theorem_model,
)

SEEDS = (0, 1, 2)
LENGTHS = (1, 2, 7, 33, 64)


# --- an independent forward pass, from the weight matrices -----------------------------------


def weights(model) -> dict[str, np.ndarray]:
    return {name: value.detach().double().numpy() for name, value in model.state_dict().items()}


def softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)


def numpy_forward(model, tokens: np.ndarray) -> list[dict[str, np.ndarray]]:
    """Per layer: resid_pre, q, k [head, pos, d_head], logits [head, query, key] (what softmax sees),
    pattern, attn_out, resid_post. The model has no layer norm (the construction bypasses it)."""
    assert model.cfg.normalization_type is None
    w = weights(model)
    resid = w["embed.W_E"][tokens]  # [pos, d_model]
    T = len(tokens)
    causal = np.tril(np.ones((T, T), dtype=bool))
    layers = []
    for layer in range(model.cfg.n_layers):
        p = f"blocks.{layer}"
        q = np.einsum("pd,hde->hpe", resid, w[f"{p}.attn.W_Q"]) + w[f"{p}.attn.b_Q"][:, None]
        k = np.einsum("pd,hde->hpe", resid, w[f"{p}.attn.W_K"]) + w[f"{p}.attn.b_K"][:, None]
        v = np.einsum("pd,hde->hpe", resid, w[f"{p}.attn.W_V"]) + w[f"{p}.attn.b_V"][:, None]
        scale = np.sqrt(model.cfg.d_head) if model.config.attn_scale else 1.0
        logits = np.where(causal, q @ k.transpose(0, 2, 1) / scale, -np.inf)
        pattern = softmax(logits)
        attn_out = np.einsum("hpe,hed->pd", pattern @ v, w[f"{p}.attn.W_O"]) + w[f"{p}.attn.b_O"]
        mid = resid + attn_out
        hidden = np.maximum(mid @ w[f"{p}.mlp.W_in"] + w[f"{p}.mlp.b_in"], 0.0)
        post = mid + hidden @ w[f"{p}.mlp.W_out"] + w[f"{p}.mlp.b_out"]
        layers.append(
            dict(resid_pre=resid, q=q, k=k, logits=logits, pattern=pattern, attn_out=attn_out, resid_post=post)
        )
        resid = post
    return layers


def sequence(vocab_size: int, length: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.concatenate([[BOS_ID], rng.integers(1, vocab_size, length - 1)]).astype(np.int64)


def claim_errors(model, tokens: np.ndarray) -> dict[str, float]:
    """Max |error| of each claim, recomputed from the paper's equations on ``numpy_forward``."""
    layers = numpy_forward(model, tokens)
    T = len(tokens)
    t = np.arange(1, T + 1, dtype=np.float64)
    bos = (tokens == BOS_ID).astype(np.float64)
    first = layers[0]
    errors = {
        # Eq. abs_attention_prob: uniform 1/t over keys i <= t
        "t1_pattern": np.abs(first["pattern"][0] - np.tril(np.ones((T, T))) / t[:, None]).max(),
        # Eq. abs_output2: the attention sub-layer's output is (0, 0, 1/t) in dims 1-3
        "t1_output": np.abs(first["attn_out"][:, :3] - np.stack([0 * t, 0 * t, 1 / t], 1)).max(),
        # Eq. rel_hidden_state_1: (1, [bos], t) after layer 1
        "t1_mlp": np.abs(first["resid_post"][:, :3] - np.stack([t**0, bos, t], 1)).max(),
        "t2_kept": np.abs(layers[-1]["resid_post"][:, :3] - np.stack([t**0, bos, t], 1)).max(),
    }
    logit_errors, vector_errors = [0.0], [0.0]
    w = weights(model)
    for index, layer in enumerate(layers[1:], start=1):
        q, k = layer["q"], layer["k"]  # [head, pos, d_head]
        # Eq. rel_query_vec / rel_key_vec: q_t = [1, -t, ...], k_i = [i, 1, ...]
        vector_errors.append(np.abs(q[:, :, 0] - 1).max())
        vector_errors.append(np.abs(q[:, :, 1] + t).max())
        vector_errors.append(np.abs(k[:, :, 0] - t).max())
        vector_errors.append(np.abs(k[:, :, 1] - 1).max())
        # Eq. rel_attention_dot_product: <q_t, k_i> = f_cnt(x_t, x_i) - (t - i), f_cnt the components
        # j >= 3 computed from the two tokens' embeddings alone (index 2, the position, dropped)
        embedding = w["embed.W_E"][tokens]
        embedding[:, POS] = 0.0
        W_Q, W_K = w[f"blocks.{index}.attn.W_Q"], w[f"blocks.{index}.attn.W_K"]
        f_cnt = np.einsum("pd,hde->hpe", embedding, W_Q[:, :, 2:]) @ np.einsum(
            "pd,hde->hpe", embedding, W_K[:, :, 2:]
        ).transpose(0, 2, 1)
        expected = f_cnt - (t[:, None] - t[None, :])
        causal = np.tril(np.ones((T, T), dtype=bool))
        logit_errors.append(np.abs(np.where(causal, layer["logits"] - expected, 0.0)).max())
    errors["t2_vectors"] = max(vector_errors)
    errors["t2_logits"] = max(logit_errors)
    return errors


@pytest.mark.parametrize("seed", SEEDS)
def test_claims_hold_recomputed_from_the_weights(seed):
    model = theorem_model(64, seed=seed, dtype=torch.float64)
    for length in LENGTHS:
        errors = claim_errors(model, sequence(model.cfg.d_vocab, length, seed + length))
        for claim, error in errors.items():
            tolerance = 1e-9 if claim in ("t1_mlp", "t2_kept", "t2_vectors", "t2_logits") else 1e-14
            assert error <= tolerance, (claim, length, error)


def test_construction_matches_the_papers_matrices():
    model = theorem_model(32, n_heads=3, n_layers=3, seed=4, dtype=torch.float64)
    w = weights(model)
    V = model.cfg.d_vocab
    # Eq. word_embedding
    assert np.array_equal(w["embed.W_E"][:, :3], np.stack([np.ones(V), np.eye(V)[BOS_ID], np.zeros(V)], 1))
    # Eq. abs_key_value (paper orientation h x d: transpose TransformerLens' d x h)
    W_K, W_V, W_O = (w[f"blocks.0.attn.{n}"][0] for n in ("W_K", "W_V", "W_O"))
    assert np.array_equal(W_K.T, np.tile(np.eye(model.cfg.d_model)[ONE], (model.cfg.d_head, 1)))
    expected_V = np.zeros((model.cfg.d_head, model.cfg.d_model))
    expected_V[0, BOS] = 1
    assert np.array_equal(W_V.T, expected_V)
    expected_O = np.zeros((model.cfg.d_model, model.cfg.d_head))  # Eq. abs_output
    expected_O[POS, 0] = 1
    assert np.array_equal(W_O.T, expected_O)
    for layer in range(model.cfg.n_layers):  # nothing else writes dims 1-3
        heads = range(1, model.cfg.n_heads) if layer == 0 else range(model.cfg.n_heads)
        assert not w[f"blocks.{layer}.attn.W_O"][list(heads), :, :3].any()
        if layer:
            assert not w[f"blocks.{layer}.mlp.W_out"][:, :3].any()
            # Eq. rel_query / rel_key: first two rows; the arbitrary rows do not read t
            W_Q, W_K = w[f"blocks.{layer}.attn.W_Q"], w[f"blocks.{layer}.attn.W_K"]
            e = np.eye(model.cfg.d_model)
            for h in range(model.cfg.n_heads):
                assert np.array_equal(W_Q[h][:, 0], e[ONE]) and np.array_equal(W_Q[h][:, 1], -e[POS])
                assert np.array_equal(W_K[h][:, 0], e[POS]) and np.array_equal(W_K[h][:, 1], e[ONE])
                assert not W_Q[h][POS, 2:].any() and not W_K[h][POS, 2:].any()


def test_interpolation_mlp_is_exact_at_the_knots():
    T = 40
    values = np.random.default_rng(0).normal(size=(T, 3))
    w_one, w_x, w_out = interpolation_mlp(values)
    assert len(w_one) == T  # width: T - 1 hinges + the constant unit
    t = np.arange(1, T + 1)
    x = 1.0 / t
    out = np.maximum(w_one[None] + w_x[None] * x[:, None], 0.0) @ w_out
    np.testing.assert_allclose(out, values, rtol=0, atol=1e-9)
    # between knots it is the straight chord (piecewise-linear interpolation)
    mid = 0.5 * (x[5] + x[6])
    out_mid = np.maximum(w_one + w_x * mid, 0.0) @ w_out
    np.testing.assert_allclose(out_mid, 0.5 * (values[5] + values[6]), atol=1e-9)
    # t - 1/t: the closed form (integers 3, then 2k) is what the interpolation gives
    np.testing.assert_allclose(interpolation_mlp(position_values(T))[2][:, 0], position_mlp(T), rtol=1e-12, atol=1e-12)
    assert np.array_equal(position_mlp(T)[:-1], np.array([3.0, *(2.0 * np.arange(2, T))]))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_verify_theorems_passes(dtype):
    results = checks.verify_theorems(48, dtype, seed=3)
    assert [r.claim for r in results] == [c for c, _, _ in checks.CLAIMS]
    assert all(r.passed for r in results), [r for r in results if not r.passed]


def test_verify_theorems_deeper_model_and_given_lengths():
    model = theorem_model(40, n_layers=3, n_heads=3, seed=5, dtype=torch.float64)
    results = checks.verify_theorems(model=model, lengths=[1, 17, 40], seed=5)
    assert {r.claim for r in results} == {claim for claim, _, _ in checks.CLAIMS}  # every claim checked
    assert all(r.passed for r in results)


def test_theorem2_content_term_is_the_same_for_the_same_tokens_anywhere():
    """On <bos> then one token repeated, logits + (t - i) must be one constant per head (f_cnt of a
    single token pair) in every layer >= 2: the content term carries no absolute position."""
    model = theorem_model(64, n_layers=3, n_heads=3, seed=2, dtype=torch.float64)
    tokens = np.array([BOS_ID] + [5] * 63)
    t = np.arange(1, 65, dtype=np.float64)
    for layer in numpy_forward(model, tokens)[1:]:
        content = layer["logits"][:, 1:, 1:] + (t[1:, None] - t[None, 1:])  # [head, query, key], keys i >= 2
        causal = np.tril(np.ones((63, 63), dtype=bool))
        spread = np.where(causal, content - content[:, :1, :1], 0.0)
        assert np.abs(spread).max() < 1e-9


# Each corruption: (what, function editing the state dict, the claim that must fail)
CORRUPTIONS = [
    ("W_E: a second token flagged <bos>", lambda s: s["embed.W_E"].__setitem__((5, BOS), 1.0), "embedding"),
    ("layer-1 W_K reads content", lambda s: s["blocks.0.attn.W_K"].__setitem__((0, 4, 0), 1.0), "t1_pattern"),
    ("layer-1 W_V doubled", lambda s: s["blocks.0.attn.W_V"].__setitem__((0, BOS, 0), 2.0), "t1_output"),
    ("layer-1 W_O halved", lambda s: s["blocks.0.attn.W_O"].__setitem__((0, 0, POS), 0.5), "t1_output"),
    ("MLP: one hinge's output weight", lambda s: s["blocks.0.mlp.W_out"].__setitem__((9, POS), 30.0), "t1_mlp"),
    ("MLP: one knot moved", lambda s: s["blocks.0.mlp.W_in"].__setitem__((ONE, 3), 0.3), "t1_mlp"),
    ("layer-2 W_Q: -t scaled", lambda s: s["blocks.1.attn.W_Q"].__setitem__((0, POS, 1), -0.5), "t2_logits"),
    ("layer-2 W_K: i scaled", lambda s: s["blocks.1.attn.W_K"].__setitem__((1, POS, 0), 1.5), "t2_logits"),
    ("layer-2 writes dim 3", lambda s: s["blocks.1.attn.W_O"].__setitem__((0, 0, POS), 1.0), "t2_kept"),
    ("layer-2 W_Q reads the workspace", lambda s: s["blocks.1.attn.W_Q"].__setitem__((0, 30, 2), 1.0), "t2_logits"),
    ("a layer-1 head writes the content", lambda s: s["blocks.0.attn.W_O"].__setitem__((1, 0, 4), 1.0), "t2_logits"),
]


@pytest.mark.parametrize("what,corrupt,claim", CORRUPTIONS, ids=[c[0] for c in CORRUPTIONS])
def test_one_corrupted_entry_fails_its_check(what, corrupt, claim):
    model = theorem_model(32, seed=1, dtype=torch.float64)
    with torch.no_grad():
        corrupt(model.state_dict())
    results = {r.claim: r for r in checks.verify_theorems(model=model, seed=1, lengths=[1, 2, 9, 20, 32])}
    assert not results[claim].passed, what
    # the independent recomputation sees it too (embedding: through the 1/t output)
    errors = claim_errors(
        model, sequence(model.cfg.d_vocab, 32, 1) if claim != "embedding" else np.array([BOS_ID, 5, 7, 5, 2])
    )
    recomputed = {"embedding": "t1_output"}.get(claim, claim)
    assert errors[recomputed] > 1e-6, (what, errors)


# --- beyond the paper: NoPE layers reproducing ALiBi / a T5 head ----------------------------


def natural_jsd(p: np.ndarray, q: np.ndarray) -> np.ndarray:
    m = 0.5 * (p + q)

    def kl(a: np.ndarray, b: np.ndarray) -> np.ndarray:  # 0 log 0 = 0
        return np.where(a > 0, a * np.log(np.where(a > 0, a, 1) / np.where(b > 0, b, 1)), 0.0).sum(-1)

    return 0.5 * kl(p, m) + 0.5 * kl(q, m)


def match_logits_numpy(match: checks.Match, content, tokens: np.ndarray, f_rel) -> tuple[np.ndarray, np.ndarray]:
    """Layer-2 logits of the NoPE model (our numpy forward) and content + f_rel(t - i) computed
    from the Content and the bias definition directly."""
    ours = numpy_forward(match.nope, tokens)[1]["logits"][0]
    q = content.embed[tokens] @ content.W_Q + content.b_Q
    k = content.embed[tokens] @ content.W_K + content.b_K
    T = len(tokens)
    distance = np.arange(T)[:, None] - np.arange(T)[None, :]
    expected = q @ k.T / content.scale + f_rel(np.clip(distance, 0, None))
    return np.where(np.tril(np.ones((T, T), dtype=bool)), ours - expected, 0.0), expected


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_alibi_match(dtype):
    match = checks.match_alibi(0.25, 64, seed=2, dtype=dtype)
    result = checks.verify_match(match, n_sequences=3, seed=2)
    assert result.passed and result.max_jsd < (1e-8 if dtype == "float32" else 1e-14), result
    if dtype == "float64":
        content = random_content(seed=2)
        diff, _ = match_logits_numpy(match, content, sequence(16, 64, 9), lambda n: -0.25 * n)
        assert np.abs(diff).max() < 1e-9


@pytest.mark.parametrize("tolerance", [1e-6, 1e-2, 0.5, 3.0])
def test_jsd_bound_holds_and_is_nearly_reached(tolerance):
    """scipy's Jensen-Shannon distance (squared, natural log) of softmaxes whose logits differ by at
    most tol stays under the bound; at the small tolerances the checks use, two keys pushed apart by
    +-tol come within a few percent of it."""
    from scipy.spatial.distance import jensenshannon

    rng = np.random.default_rng(0)
    worst = 0.0
    for _ in range(200):
        logits = rng.normal(size=int(rng.integers(2, 40))) * 3
        p = softmax(logits)
        q = softmax(logits + rng.uniform(-tolerance, tolerance, size=logits.shape))
        worst = max(worst, jensenshannon(p, q) ** 2)
    pair = jensenshannon(softmax(np.array([tolerance, -tolerance])), [0.5, 0.5]) ** 2  # logits 0, 0 vs +-tol
    assert worst <= checks.jsd_bound(tolerance) and pair <= checks.jsd_bound(tolerance)
    assert pair >= 0.95 * (checks.jsd_bound(tolerance) - checks.JSD_FLOOR) or tolerance > 0.01


def random_t5_checkpoint(path, n_layers=1, seed=0):
    model = build_model("t5", vocab_size=20, n_layers=n_layers, seed=seed)
    with torch.no_grad():
        model.pe.relative_attention_bias.copy_(
            torch.randn(model.pe.relative_attention_bias.shape, generator=torch.Generator().manual_seed(seed))
        )
    save_checkpoint(model, path, task="none")
    return load_checkpoint(path)


def test_t5_match_from_a_checkpoint(tmp_path):
    source = random_t5_checkpoint(tmp_path / "t5")
    T = 96  # beyond the last bucket (distance 113 for B=32, D=128) would need T > 113; see the next test
    match = checks.match_t5(source, layer=0, head=2, max_length=T, seed=1, dtype="float64")
    result = checks.verify_match(match, n_sequences=3, seed=1)
    assert result.passed and result.position_dims == T
    # the one-layer target is the checkpoint's own head 2 of layer 0
    tokens = torch.from_numpy(sequence(20, T, 4))[None]
    _, src = source.run_with_cache(tokens, names_filter="blocks.0.attn.hook_pattern")
    _, tgt = match.target.run_with_cache(tokens, names_filter="blocks.0.attn.hook_pattern")
    torch.testing.assert_close(
        tgt["blocks.0.attn.hook_pattern"][0, 0].float(), src["blocks.0.attn.hook_pattern"][0, 2], atol=1e-6, rtol=0
    )
    # independent: numpy forward of the NoPE model vs content + b[bucket(t - i)], and the JSD
    table = source.pe.relative_attention_bias[0, :, 2].detach().double().numpy()
    f_rel = lambda n: table[t5_relative_bucket(torch.from_numpy(n), 32, 128).numpy()]  # noqa: E731
    content = t5_head_target(source, 0, 2, T, torch.float64)[1]
    seq = sequence(20, T, 5)
    diff, expected = match_logits_numpy(match, content, seq, f_rel)
    assert np.abs(diff).max() < 1e-9
    ours = numpy_forward(match.nope, seq)[1]["pattern"][0]
    causal = np.tril(np.ones((T, T), dtype=bool))
    assert natural_jsd(ours, softmax(np.where(causal, expected, -np.inf))).max() < 1e-14


def test_t5_match_later_layer_and_long_distances(tmp_path):
    source = random_t5_checkpoint(tmp_path / "t5", n_layers=2, seed=3)
    for dtype in ("float32", "float64"):
        match = checks.match_t5(source, layer=1, head=0, max_length=140, seed=3, dtype=dtype)
        result = checks.verify_match(match, n_sequences=2, seed=3)
        assert result.passed, result


def test_corrupted_match_weights_fail():
    alibi = checks.match_alibi(0.5, 48, dtype="float64")
    with torch.no_grad():
        alibi.nope.blocks[1].attn.W_Q[0, POS, 1] *= 1.01  # the slope on -t
    assert not checks.verify_match(alibi, n_sequences=2).passed
    t5 = checks.match_t5(checks.random_t5_source(), max_length=48, dtype="float64")
    with torch.no_grad():
        t5.nope.blocks[1].attn.W_K[0, 3 + 10, 20] += 0.5  # key code 10 -> component 20: bias[20, 10]
    assert not checks.verify_match(t5, n_sequences=2).passed


# --- the CLI ---------------------------------------------------------------------------------


def test_cli_theorem_table_json_and_export(tmp_path, capsys):
    assert main(["theorem", "--max-length", "24"]) == 0
    out = capsys.readouterr().out
    assert "t1_mlp" in out and "float64" in out and "FAIL" not in out
    assert main(["theorem", "--max-length", "16", "--dtype", "float32", "--json", "--export", str(tmp_path)]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["passed"] and {c["claim"] for c in data["claims"]} == {c for c, _, _ in checks.CLAIMS}
    model = load_checkpoint(data["exported"][0])
    assert model.metadata["construction"] == "theorem1+2" and model.metadata["vocabulary"][0] == "<bos>"
    assert model.metadata["tokenizer"]["kind"] == "word"
    results = checks.verify_theorems(model=model, lengths=[16])
    assert all(r.passed for r in results)


@pytest.mark.parametrize("match", [[], ["--match", "alibi"]], ids=["theorem", "match"])
def test_cli_exports_the_dtype_its_claims_were_checked_in(tmp_path, capsys, match):
    argv = ["theorem", *match, "--max-length", "16", "--dtype", "float64", "--json", "--export", str(tmp_path)]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    model = load_checkpoint(data["exported"][0])
    assert model.W_E.dtype == torch.float64 and model.blocks[0].mlp.W_in.dtype == torch.float64
    built = theorem_model(16, dtype=torch.float64) if not match else checks.match_alibi(0.5, 16, 0, "float64").nope
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), built.state_dict().values()))


def test_cli_match(tmp_path, capsys):
    assert main(["theorem", "--match", "alibi", "--slope", "0.125", "--max-length", "32", "--sequences", "2"]) == 0
    assert "JSD" in capsys.readouterr().out
    assert main(["theorem", "--match", "alibi", "--slope", "0.125", "--max-length", "32", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["results"][0]["target"] == "alibi slope=0.125"
    random_t5_checkpoint(tmp_path / "t5")
    code = main(
        [
            "theorem",
            "--match",
            "t5",
            "--from",
            str(tmp_path / "t5"),
            "--head",
            "1",
            "--max-length",
            "32",
            "--json",
            "--export",
            str(tmp_path / "out"),
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 0 and data["passed"] and all(r["max_jsd"] < 1e-8 for r in data["results"])
    exported = load_checkpoint(data["exported"][0])
    assert exported.metadata["construction"] == "match-t5"
    assert "token embeddings" not in data["note"]
    random_t5_checkpoint(tmp_path / "t5-deep", n_layers=2)
    argv = ["theorem", "--match", "t5", "--from", str(tmp_path / "t5-deep"), "--layer", "1", "--max-length", "16"]
    assert main([*argv, "--json"]) == 0
    assert "fed the token embeddings" in json.loads(capsys.readouterr().out)["note"]


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--match", "t5", "--from", "/nonexistent/ckpt"], "no checkpoint folder"),
        (["--slope", "0.5"], "--slope"),
        (["--max-length", "1"], "--max-length"),
        (["--match", "t5", "--head", "99", "--max-length", "8"], "head 99"),
    ],
)
def test_cli_user_errors_are_one_line_exit_2(argv, needle, capsys):
    assert main(["theorem", *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1


def test_cli_failure_exits_nonzero(monkeypatch, capsys):
    real = checks.theorem_model

    def broken(*args, **kwargs):
        model = real(*args, **kwargs)
        with torch.no_grad():
            model.blocks[0].mlp.W_out[9, POS] = 30.0
        return model

    monkeypatch.setattr(checks, "theorem_model", broken)
    assert main(["theorem", "--max-length", "16", "--dtype", "float64"]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_explorer_data():
    model = theorem_model(32, seed=0, dtype=torch.float64)
    weights_ = checks.construction_weights(model)
    assert weights_["layer 1 head 1 W_O"][POS, 0] == 1 and weights_["W_E (dims 1-3)"].shape == (3, 16)
    trace = checks.residual_positions(model, 12)
    np.testing.assert_allclose(trace["attention"][:, POS], 1 / trace["t"], atol=1e-12)
    np.testing.assert_allclose(trace["mlp"][:, POS], trace["t"], atol=1e-9)
    logits = checks.relative_logits(model, 12)
    assert np.nanmax(np.abs(logits["relative"] - logits["expected"])) < 1e-9
    assert np.isnan(logits["logits"][0, 1])
    response = checks.mlp_response(model, 101)
    np.testing.assert_allclose(response["at_knots"], response["target_at_knots"], atol=1e-9)
    assert np.all(response["value"] >= 1 / response["x"] - 1e-9)  # chords of a convex 1/x lie above it
