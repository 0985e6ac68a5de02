"""Theorems: the constructed NoPE weights of Theorems 1 and 2 running, checked claim by claim (as `probe theorem`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import plotly.graph_objects as go
import streamlit as st
from plotly.subplots import make_subplots

from probe.explorer import shared
from probe.theorems import checks
from probe.theorems.constructions import theorem_model

if TYPE_CHECKING:
    from probe.models.transformer import PETransformer

st.header("Theorems 1 and 2: NoPE can represent absolute and relative positions")
st.caption(
    "Appendix C's weights as a real TransformerLens model (`probe.theorems.constructions.theorem_model`), run on "
    "random token sequences that start with `<bos>`. The paper's dimensions 1, 2, 3 are residual indices 0, 1, "
    "2."
)

left, middle, right = st.columns(3)
max_length = left.select_slider(
    "Longest sequence T_max",
    [16, 32, 64, 128, 256, 512],
    value=64,
    help="the construction is valid up to T_max tokens; every length up to it is verified",
)
dtype = middle.radio("dtype", ["float64", "float32"], horizontal=True)
seed = right.number_input("seed", min_value=0, value=0, step=1, help="draws everything the paper leaves arbitrary")
length = st.slider(
    "Sequence length shown (t = 1 .. length)", min_value=2, max_value=max_length, value=min(24, max_length)
)


@st.cache_resource(show_spinner="Building the construction…", max_entries=8)
def construction(max_length: int, dtype: str, seed: int) -> PETransformer:
    """One model for every session: read it only under ``shared.exclusive``."""
    return theorem_model(max_length, seed=seed, dtype=checks.parse_dtype(dtype))


@st.cache_data(show_spinner="Verifying every claim at every length up to T_max…", show_time=True, max_entries=16)
def verification(max_length: int, dtype: str, seed: int) -> list[dict]:
    model = construction(max_length, dtype, seed)
    with shared.exclusive(model):
        return [claim.to_dict() for claim in checks.verify_theorems(max_length, dtype, seed, model=model)]


@st.cache_data(max_entries=16)
def views(max_length: int, dtype: str, seed: int, length: int) -> tuple[dict, dict, dict, dict]:
    model = construction(max_length, dtype, seed)
    with shared.exclusive(model):
        return (
            checks.construction_weights(model),
            checks.residual_positions(model, length, seed),
            checks.relative_logits(model, length, seed),
            checks.mlp_response(model),
        )


def heatmap(
    matrix: np.ndarray,
    title: str,
    x_title: str,
    y_title: str,
    x_labels: list[str] | None = None,
    y_labels: list[str] | None = None,
) -> go.Figure:
    """A weight matrix with 1-based row and column numbers (the paper's), values on hover."""
    rows, cols = matrix.shape
    figure = go.Figure(
        go.Heatmap(
            z=matrix,
            x=x_labels or list(range(1, cols + 1)),
            y=y_labels or list(range(1, rows + 1)),
            colorscale="RdBu",
            zmid=0,
            colorbar=dict(thickness=12),
            hovertemplate=f"{y_title} %{{y}}<br>{x_title} %{{x}}<br>%{{z:.4g}}<extra></extra>",
        )
    )
    figure.update_layout(
        title=title,
        xaxis_title=x_title,
        yaxis_title=y_title,
        yaxis_autorange="reversed",
        height=240 if rows <= 4 else 330,
        margin=dict(l=60, r=10, t=40, b=40),
        template="plotly_white",
    )
    if y_labels is None:
        figure.update_yaxes(dtick=1 if rows <= 10 else None)
    return figure


def bars(values: np.ndarray, title: str, x_title: str, y_title: str) -> go.Figure:
    """A weight vector, one bar per entry (1-based), values on hover."""
    figure = go.Figure(
        go.Bar(
            x=list(range(1, len(values) + 1)), y=values, hovertemplate=f"{x_title} %{{x}}<br>%{{y:.4g}}<extra></extra>"
        )
    )
    figure.update_layout(
        title=title,
        xaxis_title=x_title,
        yaxis_title=y_title,
        height=240,
        margin=dict(l=60, r=10, t=40, b=40),
        template="plotly_white",
    )
    return figure


model = construction(max_length, dtype, seed)
claims = verification(max_length, dtype, seed)
weights, residual, relative, mlp = views(max_length, dtype, seed, length)

failed = [c for c in claims if not c["passed"]]
if failed:
    st.error(f"{len(failed)} claim(s) fail in {dtype}: " + ", ".join(c["claim"] for c in failed))
else:
    st.success(f"Every claim holds in {dtype} for every length 1 .. {max_length}, within its tolerance.")
st.dataframe(
    [
        {
            "claim": c["claim"],
            "passed": c["passed"],
            "max |error|": f"{c['max_error']:.3g}",
            "tolerance": f"{c['tolerance']:.3g}",
            "worst at (length, t)": f"({c['worst_length']}, {c['worst_position']})",
            "statement": c["statement"],
            "read at": c["hook"],
        }
        for c in claims
    ],
    hide_index=True,
)
with st.expander("Why these tolerances"):
    for claim, why in checks.TOLERANCES.items():
        st.markdown(f"- **{claim}**: {why}")

st.subheader("Constructed weights")
st.caption("W_Q, W_K, W_V: h × d; W_O: d × h; W_E: d × V (the paper's orientation), cut to what the proofs specify.")
vocab = checks.vocabulary(model.cfg.d_vocab)
columns = st.columns(2)
for i, (name, matrix) in enumerate(weights.items()):
    if name.startswith("W_E"):
        figure = heatmap(matrix, name, "token", "", x_labels=vocab, y_labels=["dim 1", "dim 2", "dim 3"])
    elif name.endswith("W_2 (to dim 3)"):
        figure = bars(matrix, name, "hidden unit", "weight")
    elif "MLP" in name:
        figure = heatmap(matrix, name, "hidden unit", "", y_labels=["from dim 1", "from dim 3"])
    elif name.endswith("W_O"):
        figure = heatmap(matrix, name, "head component", "residual dim")
    else:
        figure = heatmap(matrix, name, "residual dim", "head component")
    columns[i % 2].plotly_chart(figure, key=f"weight-{i}")

st.subheader("Residual dimensions 1–3 across positions")
stages = (
    ("embedding", "after the embedding: (1, [x = <bos>], 0)"),
    ("attention", "after the Theorem 1 head: dim 3 = 1/t"),
    ("mlp", "after the first MLP: dim 3 = t"),
)
figure = make_subplots(rows=1, cols=3, subplot_titles=[title for _, title in stages])
colors = ("#1f77b4", "#ff7f0e", "#2ca02c")
for col, (key, _) in enumerate(stages, start=1):
    for dim in range(3):
        figure.add_trace(
            go.Scatter(
                x=residual["t"],
                y=residual[key][:, dim],
                mode="lines+markers",
                name=f"dim {dim + 1}",
                line=dict(color=colors[dim]),
                showlegend=col == 1,
                legendgroup=f"dim{dim}",
                hovertemplate=f"t %{{x}}<br>dim {dim + 1} = %{{y:.6g}}<extra></extra>",
            ),
            row=1,
            col=col,
        )
figure.update_xaxes(title_text="position t")
figure.update_layout(height=340, template="plotly_white", margin=dict(t=60, b=40))
st.plotly_chart(figure, key="residual")

st.subheader("Layer 2: logits against −(t − i)")
st.caption(
    "Head 1 of layer 2 on one random sequence: its logits from `hook_attn_scores` minus the content term "
    "f_cnt (from the two tokens' embeddings alone), next to the paper's −(t − i); masked keys (i > t) are blank."
)
error = np.abs(relative["relative"] - relative["expected"])
figure = make_subplots(
    rows=1,
    cols=3,
    horizontal_spacing=0.12,
    shared_yaxes=True,
    subplot_titles=("logits − f_cnt", "−(t − i)", "|difference|"),
)
for col, (z, axis) in enumerate(
    ((relative["relative"], "coloraxis"), (relative["expected"], "coloraxis"), (error, "coloraxis2")), start=1
):
    figure.add_trace(
        go.Heatmap(
            z=z,
            x=relative["t"],
            y=relative["t"],
            coloraxis=axis,
            hovertemplate="query t %{y}<br>key i %{x}<br>%{z:.6g}<extra></extra>",
        ),
        row=1,
        col=col,
    )
figure.update_yaxes(autorange="reversed")
figure.update_yaxes(title_text="query t", col=1)
figure.update_xaxes(title_text="key i")
figure.update_layout(
    height=380,
    template="plotly_white",
    margin=dict(t=60, b=40),
    coloraxis=dict(colorscale="RdBu", cmid=0, colorbar=dict(x=0.645, len=0.9, thickness=12, title="logit")),
    coloraxis2=dict(
        colorscale="Viridis", colorbar=dict(x=1.0, len=0.9, thickness=12, title="error", exponentformat="e")
    ),
)
st.plotly_chart(figure, key="logits")
st.caption(
    f"Largest |difference| at this length: {np.nanmax(error):.3g} "
    "(the tolerance above covers every length up to T_max)."
)

st.subheader("The first MLP turns 1/t into t")
figure = go.Figure()
figure.add_trace(go.Scatter(x=mlp["x"], y=mlp["value"], mode="lines", name="x + MLP(x): what dim 3 holds"))
figure.add_trace(
    go.Scatter(
        x=mlp["knots"],
        y=mlp["target_at_knots"],
        mode="markers",
        name="t at x = 1/t",
        marker=dict(size=5, color="black"),
    )
)
ticks = [2**-k for k in range(max_length.bit_length()) if 2**k <= max_length]
figure.update_layout(
    xaxis_title="x = dim 3 after the Theorem 1 head (1/t)",
    yaxis_title="dim 3 after the MLP",
    xaxis=dict(type="log", tickvals=ticks, ticktext=[f"1/{round(1 / x)}" if x < 1 else "1" for x in ticks]),
    height=340,
    margin=dict(t=30),
    template="plotly_white",
)
st.plotly_chart(figure, key="mlp")
