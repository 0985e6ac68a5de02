"""What a preset means, said once: its model's size, its training recipe on a task, its recipe and
training context on a code corpus. Every help text, error and command reads presets from here.

This module sits at the bottom of the house (it imports nothing of probe's but the error type), so
``probe.models.model_config`` reads its sizes without importing anything above the models.
"""

from __future__ import annotations

from typing import Any

from probe.errors import ProbeError

# Sizes. `tiny` trains on a 2-core CPU in a minute or two; `base` is the paper's (Table
# tab:hyperparam, HuggingFace "base": 12 layers, d_model 768, 12 heads, d_ff 3072).
# Deviations of `base` from the released code, all TransformerLens-imposed or vocabulary-driven:
# - word-level vocabulary instead of T5's 32K SentencePiece one (~85M weights, not ~107M);
# - none in Rotary: like the released code, it rotates d_head / 4 = 16 of each head's dimensions
#   (``Rotary.preset_options``; `-p fraction=1` rotates the whole head, the usual RoPE);
# - dropout 0.1 is applied by the training loop through hooks on attention/MLP outputs.
# `tiny` and `small` use TransformerLens' usual recipe (1/sqrt(d_head) logit scale, N(0, 0.8/sqrt(d))
# weights, an untied unembedding): T5's tied, d_model^-0.5-scaled output assumes N(0, 1)
# embeddings, and with small ones it caps the logits and slows training several-fold.
PRESETS: dict[str, dict[str, Any]] = {
    "tiny": dict(
        n_layers=2, d_model=128, n_heads=4, d_head=32, d_mlp=512, attn_scale=True, init="gpt2", tie_embeddings=False
    ),
    "small": dict(
        n_layers=4, d_model=256, n_heads=8, d_head=32, d_mlp=1024, attn_scale=True, init="gpt2", tie_embeddings=False
    ),
    "base": dict(n_layers=12, d_model=768, n_heads=12, d_head=64, d_mlp=3072, attn_scale=False, init="t5", dropout=0.1),
    # The paper's pretrained models (Appendix "Pretraining at 1.3B Scale": the same T5 stack, 24 layers,
    # d_model 1024, 32 heads of d_kv 128, d_ff 16384; dropout 0.1 and eps 1e-6 from the authors'
    # model_configs/1b/config.json), for `probe pretrain` on GPUs.
    "lm-1b": dict(
        n_layers=24,
        d_model=1024,
        n_heads=32,
        d_head=128,
        d_mlp=16384,
        attn_scale=False,
        init="t5",
        dropout=0.1,
        eps=1e-6,
        n_ctx=4096,
    ),
}

# Per-preset recipe. `base` is the paper's (Table tab:hyperparam: lr 3e-5, 40K steps, dropout 0.1);
# smaller models train well with a larger peak rate and far fewer steps.
# Measured on SCAN (NoPE, held-out IID exact match): tiny at lr 1e-3 reaches 96.6% after 4000
# steps of 32, against 92.8% after 2000 steps of 64 (the same examples, at about the same cost on
# a CPU) and 89% for a peak rate of 3e-3.
RECIPES: dict[str, dict[str, Any]] = {
    "tiny": dict(steps=4000, lr=1e-3, batch_size=32, dropout=0.0),
    "small": dict(steps=8000, lr=5e-4, batch_size=32, dropout=0.0),
    "base": dict(steps=40_000, lr=3e-5, batch_size=64, dropout=0.1),
}
# Per-preset recipe on a code corpus (`probe pretrain`). `tiny` is the 2-core CPU default, measured
# by bench/pretrain_speed.py; `lm-1b` is the paper's pretraining (Appendix "Pretraining at 1.3B
# Scale", after SantaCoder: AdamW beta2 0.95, weight decay 0.1, lr 2e-4, cosine decay after 2%
# warm-up, 256 windows of 1024 tokens a step; its 30B tokens are ~114K steps).
LM_RECIPES: dict[str, dict[str, Any]] = {
    "tiny": dict(steps=1500, lr=1e-3, batch_size=32, dropout=0.0),
    "small": dict(steps=6000, lr=5e-4, batch_size=32, dropout=0.0),
    "base": dict(
        steps=40_000, lr=2e-4, batch_size=64, dropout=0.1, weight_decay=0.1, warmup=0.02, schedule="cosine", beta2=0.95
    ),
    "lm-1b": dict(
        steps=114_000,
        lr=2e-4,
        batch_size=256,
        dropout=0.1,
        weight_decay=0.1,
        warmup=0.02,
        schedule="cosine",
        beta2=0.95,
    ),
}
# Presets whose forward pass `--precision auto` runs under bf16 autocast on a CPU too (on a GPU it
# always does): where a bf16 step is faster on this 2-core CPU (bench/results/protocol_step_cpu.json)
# and the default study trains to the same accuracy in it (reproduce_small_authors_bf16_cpu.json
# against the float32 study; docs/reproducing.md's `--precision`). `tiny` is faster too but stays float32: the
# default `probe train` and its 10-minute target are measured in float32, and only NoPE was trained
# both ways.
CPU_BF16 = frozenset({"small"})
RECIPE_DEFAULTS = dict(weight_decay=0.05, warmup=0.06, schedule="polynomial", beta2=0.999)  # the paper's (HF's) AdamW
CONTEXTS = {"tiny": 128, "small": 256, "base": 512, "lm-1b": 1024}  # training context on code (the paper: 1024)
# T of hf: models unless -o context=N: the paper's reads (1x and 2x T; perplexity 12 sizes from 0.5x to 2.5x) of
# 20 files cost a 135M model on 2 cores 70 s to 290 s per command at T = 512 (bench/real_lm.py), half of that and
# under 3 minutes at 256, where 151 and 146 of the default corpus's 200 held-out files reach 2x and 2.5x
HF_CONTEXT = 256
# `probe perplexity`: a file's scored tokens read from one window per context size, or each from one of its own
PERPLEXITY_WINDOWS = ("shared", "own")

# `probe extrapolate`'s intervention families: fixed rules take the length trained on; tuned ones are
# searched on a validation slice of the unseen lengths (``probe.extrapolation.plan``).
EXTRAPOLATION_FIXED = ("log-length", "cap", "rope")
EXTRAPOLATION_TUNED = ("temperature", "window", "head-temperature")


# The main job: what `probe train` trains with no arguments (every paper PE at seed 0, plus NoPE' at seed 1), the
# runs every analysis reads when no task is named (`probe eval`, `compare`, `distances`, `positions`,
# `extrapolate`, `sweep`, the explorer), and `probe sweep`'s default grid. Chosen by measurement among the
# Section 3 scenarios (docs/getting-started.md, "Why copy's count variant"): within 10 minutes on 2 cores,
# install included, every run at >= 95% IID, and the PEs apart on unseen lengths by more than their seeds' spread.
MAIN_JOB: dict[str, Any] = dict(
    task="copy", options={"split": "paper", "variant": "count"}, preset="tiny", steps=1500, pack=True
)
MAIN_JOB_TRAINING = ("preset", "steps", "pack")  # the fields of MAIN_JOB that are a run's training settings


def main_task(task: str | None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
    """The task a command reads and its options: ``task`` with ``options`` where a task is named, else the
    main job's task with its options, ``options`` (the command's ``-o`` flags) over them."""
    if task is not None:
        return task, dict(options or {})
    return MAIN_JOB["task"], {**MAIN_JOB["options"], **(options or {})}


def check_preset(preset: str) -> None:
    """One line naming the presets when ``preset`` is not one of them."""
    if preset not in PRESETS:
        raise ProbeError(f"unknown preset {preset!r}; choose one of {', '.join(PRESETS)}")


def training_recipe(preset: str, task: str, *, code: bool) -> dict[str, Any]:
    """The preset's recipe for ``task`` (on a code corpus when ``code``), the AdamW defaults filled in:
    not every size has a recipe for both (``lm-1b`` is for code only)."""
    check_preset(preset)
    recipes = LM_RECIPES if code else RECIPES
    if preset not in recipes:
        raise ProbeError(f"no {task} recipe for preset {preset!r}; choose one of {', '.join(recipes)}")
    return {**RECIPE_DEFAULTS, **recipes[preset]}


def training_context(preset: str) -> int:
    """The context, in tokens, a code model of ``preset`` trains on."""
    check_preset(preset)
    return CONTEXTS[preset]


def listed(presets: dict[str, Any]) -> str:
    """``tiny, small or base``: the keys of one of the tables above, for a help text."""
    names = list(presets)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} or {names[-1]}"
