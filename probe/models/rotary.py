"""Rotary (Su et al. 2021; Appendix B.2, Eq. rotary): q_t and k_i rotated by t and i radians
times per-pair frequencies, so <Rot(q_t, t), Rot(k_i, i)> depends on t - i only.

GPT-NeoX pairing (dimension j turns with j + r/2) on the first r = ``fraction`` x d_head
dimensions of every head (the paper's released code rotates a quarter), frequencies
theta_j = base^(-2j/r). The rotation is ours, not TransformerLens', and passes through
``hook_rot_q`` / ``hook_rot_k``; for a float32 model it is bit-identical to TransformerLens'
``apply_rotary``, which trained the checkpoints made before it. ``nope_every=k`` leaves every
k-th layer unrotated (NoPE there), as long-context models that interleave RoPE and NoPE do.

``scaling`` stretches RoPE past the length it was trained on (``original_length`` L), at
training or, since it has no weights, at inference (``probe eval -p scaling=yarn -p factor=4``):
``linear`` position interpolation (Chen et al. 2023: theta_j / s); ``ntk``, NTK-aware
(bloc97 2023: base x s^(r/(r-2))); ``dynamic`` NTK (the same with s grown to
s T / L - (s - 1) once a pass has T > L positions); ``yarn`` (Peng et al. 2023, Sec. 3.2-3.4:
NTK-by-parts between beta_fast and beta_slow rotations over L, and the attention temperature
sqrt(1/t) = 0.1 ln s + 1 on cos and sin); ``llama3`` (Meta's Llama 3.1: theta_j / s for
wavelengths beyond L / low_freq_factor, unchanged below L / high_freq_factor, interpolated
between). Dynamic NTK re-encodes every position as the pass grows, so decoding with the KV
cache differs from a full forward pass past L (as in ``transformers``; ``depends_on_length``).
"""

from __future__ import annotations

import math

import torch

from probe.models.positional import ModelShape, Option, PositionalEncoding


def _check_fraction(fraction: float, options: dict, config) -> str | None:
    dim = fraction * config.d_head
    if not 0 < fraction <= 1 or dim != int(dim) or int(dim) % 2:
        return f"must give an even number of each head's {config.d_head} dimensions"
    return None


SCALINGS = ("none", "linear", "ntk", "dynamic", "yarn", "llama3")


SCALINGS_WITH_LENGTH = ("dynamic", "yarn", "llama3")  # scalings that need original_length, the length trained on


SCALINGS_OF_THE_BASE = ("ntk", "dynamic")  # scalings that raise the base by s^(r/(r-2)): r must exceed 2


def stretch_complaint(scaling: str, factor: float) -> str | None:
    """Why ``scaling`` by ``factor`` is refused, or None: every scaling but none needs factor > 1 (at 1, linear,
    ntk, yarn and llama3 leave RoPE as it is under a scaling's name; dynamic, which still grows past L, alike:
    one rule, and ``factor`` is never left to its default)."""
    if scaling != "none" and not factor > 1:
        return f"needs factor > 1, how far to stretch; got factor={factor:g}"
    return None


def rotation_complaint(scaling: str, rotated: int) -> str | None:
    """Why ``scaling`` cannot scale a rotation of ``rotated`` dimensions a head, or None: NTK-aware and dynamic
    NTK raise the base by s^(r/(r-2)), which needs r > 2 (the hf: path refuses ntk the same way,
    :func:`probe.models.hf_rotary.hf_rope_parameters`)."""
    if scaling in SCALINGS_OF_THE_BASE and rotated <= 2:
        return f"scales the base of a rotation of more than 2 dimensions; this model rotates {rotated} a head"
    return None


def _check_scaling(scaling: str, options: dict, config) -> str | None:
    if scaling == "none":
        return None
    stretch = stretch_complaint(scaling, options["factor"])
    if stretch:
        return stretch
    if scaling in SCALINGS_WITH_LENGTH and options["original_length"] < 1:
        return "needs original_length, the length trained on (e.g. -p original_length=50)"
    return rotation_complaint(scaling, round(options["fraction"] * config.d_head))


def yarn_ramp(
    inverse_frequencies: torch.Tensor, base: float, original_length: int, beta_fast: float, beta_slow: float
) -> torch.Tensor:
    """[r / 2] gamma_j in [0, 1]: 1 keeps theta_j (pairs that turn more than beta_fast times over L),
    0 interpolates it (fewer than beta_slow turns). YaRN's code ramps linearly over the pair index
    between the pairs that turn exactly beta_fast and beta_slow times, rounded outwards (Peng et
    al. 2023, Sec. 3.2 writes the ramp in the number of turns; its released code, which
    ``transformers`` follows, in the index)."""
    pairs = inverse_frequencies.numel()
    r = 2 * pairs

    def pair_turning(turns: float) -> float:  # the (fractional) pair index that turns `turns` times over L
        return r * math.log(original_length / (turns * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(pair_turning(beta_fast)), 0)
    high = min(math.ceil(pair_turning(beta_slow)), r - 1)
    high = high + 0.001 if low == high else high
    index = torch.arange(pairs, dtype=inverse_frequencies.dtype)
    return 1 - ((index - low) / (high - low)).clamp(0, 1)


def llama3_frequencies(
    inverse_frequencies: torch.Tensor,
    factor: float,
    original_length: int,
    low_freq_factor: float,
    high_freq_factor: float,
) -> torch.Tensor:
    """[r / 2] Llama 3.1's frequencies: wavelengths 2 pi / theta_j longer than L / low_freq_factor are
    interpolated (theta_j / s), shorter than L / high_freq_factor kept, and blended in between."""
    wavelengths = 2 * math.pi / inverse_frequencies
    smooth = ((original_length / wavelengths - low_freq_factor) / (high_freq_factor - low_freq_factor)).clamp(0, 1)
    blended = (1 - smooth) * inverse_frequencies / factor + smooth * inverse_frequencies
    return torch.where(
        wavelengths > original_length / low_freq_factor,
        inverse_frequencies / factor,
        torch.where(wavelengths < original_length / high_freq_factor, inverse_frequencies, blended),
    )


class Rotary(PositionalEncoding):
    kind = "rotary"
    rotates = True
    options = {
        "fraction": Option(
            float, 1.0, "share of each head's dimensions rotated (the paper's code: 0.25)", check=_check_fraction
        ),
        "base": Option(
            float, 10000.0, "theta_j = base^(-2j/r)", check=lambda v, o, c: None if v > 1 else "must be above 1"
        ),
        "nope_every": Option(
            int,
            0,
            "leave every k-th layer unrotated (0: rotate every layer)",
            check=lambda v, o, c: None if v >= 0 else "must be 0 or more",
        ),
        "scaling": Option(str, "none", "stretch RoPE past original_length", choices=SCALINGS, check=_check_scaling),
        "factor": Option(float, 1.0, "s > 1: how far to stretch (every scaling but none)"),
        "original_length": Option(int, 0, "L: the length trained on (dynamic, yarn, llama3)"),
        "beta_fast": Option(float, 32.0, "yarn: pairs turning more often over L keep their frequency"),
        "beta_slow": Option(float, 1.0, "yarn: pairs turning less often are interpolated"),
        "attention_factor": Option(
            float,
            0.0,
            "yarn: scale of cos and sin (0: 0.1 ln s + 1)",
            check=lambda v, o, c: None if v >= 0 else "must be 0 or more",
        ),
        "low_freq_factor": Option(float, 1.0, "llama3: wavelengths beyond L / this are interpolated"),
        "high_freq_factor": Option(
            float,
            4.0,
            "llama3: wavelengths below L / this are kept",
            check=lambda v, o, c: None if v > o["low_freq_factor"] else "must exceed low_freq_factor",
        ),
    }

    # The paper's code rotates d_head / 4 of each head at its sizes (`-p fraction=1`: the usual RoPE).
    preset_options = {"base": {"fraction": 0.25}, "lm-1b": {"fraction": 0.25}}
    examples = (
        {"fraction": 0.25},
        {"nope_every": 2},
        {"scaling": "yarn", "factor": 4.0, "original_length": 8},
        {"scaling": "dynamic", "factor": 2.0, "original_length": 8},
        {"scaling": "llama3", "factor": 8.0, "original_length": 8},
    )

    def __init__(self, config: ModelShape) -> None:
        super().__init__(config)
        self.rotary_dim = round(self.option["fraction"] * config.d_head)

    def periods(self, dtype: torch.dtype) -> torch.Tensor:
        """[r / 2] 1 / theta_j = base^(2j/r), in TransformerLens' order of operations (so a float32
        model's angles match its tables bit for bit)."""
        half = torch.arange(self.rotary_dim // 2, dtype=dtype)
        return self.option["base"] ** (half / (self.rotary_dim / 2))

    def inverse_frequencies(self, dtype: torch.dtype, length: int) -> torch.Tensor:
        """[r / 2] theta_j after ``scaling``, for a pass over ``length`` positions."""
        o = self.option
        base, factor, r = o["base"], o["factor"], self.rotary_dim
        if o["scaling"] == "ntk" or (o["scaling"] == "dynamic" and length > o["original_length"]):
            stretch = factor if o["scaling"] == "ntk" else factor * length / o["original_length"] - (factor - 1)
            base = base * stretch ** (r / (r - 2))
        theta = 1.0 / base ** (torch.arange(0, r, 2, dtype=dtype) / r)
        if o["scaling"] == "linear":
            return theta / factor
        if o["scaling"] == "yarn":
            keep = yarn_ramp(theta, base, o["original_length"], o["beta_fast"], o["beta_slow"])
            return theta / factor * (1 - keep) + theta * keep
        if o["scaling"] == "llama3":
            return llama3_frequencies(theta, factor, o["original_length"], o["low_freq_factor"], o["high_freq_factor"])
        return theta

    def attention_factor(self) -> float:
        """What cos and sin are multiplied by: YaRN's temperature, 1 otherwise."""
        o = self.option
        if o["scaling"] != "yarn":
            return 1.0
        return o["attention_factor"] or (0.1 * math.log(o["factor"]) + 1.0 if o["factor"] > 1 else 1.0)

    def angles(self, positions: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """[pos, r] the angle of every rotated dimension at ``positions``."""
        if self.option["scaling"] == "none":  # TransformerLens' order of operations: t / base^(2j/r)
            periods = self.periods(dtype).to(positions.device)  # [r / 2]
            periods = torch.cat([periods, periods])  # [r]: dimension j and j + r/2 share one
            return positions.to(dtype)[:, None] / periods[None, :]
        theta = self.inverse_frequencies(dtype, positions.numel()).to(positions.device)  # [r / 2]
        return positions.to(dtype)[:, None] * torch.cat([theta, theta])[None, :]

    def _table(self, dtype: torch.dtype) -> torch.Tensor:
        """[2, key, r] cos and signed sin at this pass's positions: sin negated on the first half of
        the rotated dimensions, so that the pair rotation (x1, x2) -> (-x2, x1), times sin, is
        ``roll(x, r/2) * signed sin`` (one op, where slicing, negating and joining halves took four)."""

        def make() -> torch.Tensor:
            angles = self.angles(self.positions, dtype)
            factor = self.attention_factor()
            cos, sin = angles.cos(), angles.sin()
            if factor != 1.0:
                cos, sin = cos * factor, sin * factor
            half = self.rotary_dim // 2
            return torch.stack([cos, torch.cat([-sin[:, :half], sin[:, half:]], dim=-1)])

        return self.geometry(("rotary", dtype), make)

    @property
    def depends_on_length(self) -> bool:
        return self.option["scaling"] == "dynamic"  # its frequencies follow the pass's length

    def rotates_layer(self, layer: int) -> bool:
        every = self.option["nope_every"]
        return not (every and (layer + 1) % every == 0)

    def rotate(self, layer: int, x: torch.Tensor, start: int) -> torch.Tensor:
        return self._turn(x, start, self._table(self._table_dtype(x)))

    @staticmethod
    def _table_dtype(x: torch.Tensor) -> torch.dtype:
        return torch.float64 if x.dtype == torch.float64 else torch.float32

    def _turn(self, x: torch.Tensor, start: int, table: torch.Tensor) -> torch.Tensor:
        """``x`` [batch, pos, head, d_head] at positions ``start ..`` turned by ``table`` [2, key, r]
        (cos, signed sin) on its first r dimensions, in ``x``'s dtype (a bfloat16 model's queries and keys stay
        bfloat16, turned by float32 angles, as Hugging Face's Llama turns them)."""
        cos, signed_sin = table[:, start : start + x.size(1), None, :]  # [pos, 1, r] each
        half = self.rotary_dim // 2
        if self.rotary_dim == x.size(-1):
            return (x * cos + x.roll(half, dims=-1) * signed_sin).to(x.dtype)
        rotated, passed = x[..., : self.rotary_dim], x[..., self.rotary_dim :]
        turned = (rotated * cos + rotated.roll(half, dims=-1) * signed_sin).to(x.dtype)
        return torch.cat([turned, passed], dim=-1)
