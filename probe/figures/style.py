"""How a PE is drawn in every figure: its colour (the registry's), and translucent fills."""

from __future__ import annotations

from probe.models.registry import PE_COLORS


def pe_color(pe: str) -> str:
    return PE_COLORS.get(pe, "#7f7f7f")


def rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"
