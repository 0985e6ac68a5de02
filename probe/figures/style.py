"""How a PE is drawn in every figure: its colour (the registry's), and translucent fills."""

from __future__ import annotations

from probe.models.registry import PE_COLORS


def pe_color(pe: str) -> str:
    return PE_COLORS.get(pe, "#7f7f7f")


def rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


TINY_BUCKET = 10
"""A length bucket of fewer examples than this is marked in figures (a hollow marker, its count in red): one
example more or less moves its exact match by 10 points or more."""


def bucket_ticks(counts: dict[float, list[int]]) -> dict[str, list]:
    """An x-axis whose tick labels carry each bucket's example count (``n=``, a range where the curves were
    scored on different counts), tiny buckets (:data:`TINY_BUCKET`) in red: ``figure.update_xaxes(**...)``."""
    values, labels = [], []
    for at in sorted(counts):
        low, high = min(counts[at]), max(counts[at])
        n = f"n={low}" if low == high else f"n={low}–{high}"
        labels.append(f"{at:g}<br>" + (f'<span style="color:#d62728">{n}</span>' if low < TINY_BUCKET else n))
        values.append(at)
    return {"tickmode": "array", "tickvals": values, "ticktext": labels}


def bucket_symbols(counts: list[int]) -> list[str]:
    """A marker per bucket: hollow where the bucket is tiny."""
    return ["circle-open" if n < TINY_BUCKET else "circle" for n in counts]
