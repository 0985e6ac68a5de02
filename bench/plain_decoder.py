"""Our HookedTransformer models against a plain PyTorch decoder of the same shape: training tokens/s.

    python bench/plain_decoder.py [--device cuda] [--preset tiny|small|base] [--pes nope t5]

``PlainDecoder`` is the nanoGPT-style reference: the same layers, d_model, heads, d_head, d_mlp,
pre-norm RMSNorm, ReLU MLP, no biases, the same logit scale, the same output layer (tied to the
embedding with the final residual scaled by d_model^-0.5 where the preset ties them, as ``base``
does; a separate unembedding where it does not, as ``tiny`` and ``small`` do), no positional
encoding (NoPE's architecture exactly), built on
``torch.nn.functional.scaled_dot_product_attention`` with one fused QKV projection and no hook
points. Both take the same training step on the same SCAN batch, interleaved in one run; the
ratio is probe tokens/s / plain tokens/s per repeat, median over repeats. Writes
bench/results/plain_decoder_<preset>_<device>.json.
"""

from __future__ import annotations

import argparse
import os
import sys

import torch
import torch.nn.functional as F
from common import (
    add_common_args,
    clock,
    header,
    medians,
    paired_ratio,
    scan_batch,
    setup,
    time_training_steps,
    training_repeats,
    training_step,
    write_json,
)
from torch import nn

from probe.models import build_model
from probe.models.model_config import ModelConfig, resolve_config
from probe.models.registry import PE_KINDS
from probe.presets import PRESETS


class Block(nn.Module):
    def __init__(self, c: ModelConfig, eps: float):
        super().__init__()
        self.n_heads, self.d_head, self.eps = c.n_heads, c.d_head, eps
        self.scale = c.d_head**-0.5 if c.attn_scale else 1.0
        self.ln1 = nn.Parameter(torch.ones(c.d_model))
        self.qkv = nn.Linear(c.d_model, 3 * c.n_heads * c.d_head, bias=False)
        self.out = nn.Linear(c.n_heads * c.d_head, c.d_model, bias=False)
        self.ln2 = nn.Parameter(torch.ones(c.d_model))
        self.mlp_in = nn.Linear(c.d_model, c.d_mlp, bias=False)
        self.mlp_out = nn.Linear(c.d_mlp, c.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, pos, d_model = x.shape
        h = F.rms_norm(x, (d_model,), self.ln1, self.eps)
        qkv = self.qkv(h).view(batch, pos, 3, self.n_heads, self.d_head)
        q, k, v = qkv.permute(2, 0, 3, 1, 4)  # [batch, head, pos, d_head] each
        z = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=self.scale)  # [batch, head, pos, d_head]
        x = x + self.out(z.transpose(1, 2).reshape(batch, pos, -1))
        h = F.rms_norm(x, (d_model,), self.ln2, self.eps)
        return x + self.mlp_out(F.relu(self.mlp_in(h)))


class PlainDecoder(nn.Module):
    """tokens [batch, pos] -> logits [batch, pos, vocab]; see the module docstring."""

    def __init__(self, c: ModelConfig, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.embed = nn.Embedding(c.d_vocab, c.d_model)
        self.blocks = nn.ModuleList(Block(c, eps) for _ in range(c.n_layers))
        self.ln_final = nn.Parameter(torch.ones(c.d_model))
        self.unembed = None if c.tie_embeddings else nn.Linear(c.d_model, c.d_vocab, bias=False)
        generator = torch.Generator().manual_seed(c.seed)
        with torch.no_grad():
            for param in self.parameters():
                if param.dim() >= 2:
                    param.copy_(torch.randn(param.shape, generator=generator) * 0.8 / c.d_model**0.5)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        x = self.embed(tokens)  # [batch, pos, d_model]
        for block in self.blocks:
            x = block(x)
        x = F.rms_norm(x, (x.size(-1),), self.ln_final, self.eps)
        if self.unembed is None:  # tied, as T5
            return F.linear(x.size(-1) ** -0.5 * x, self.embed.weight)  # [batch, pos, vocab]
        return self.unembed(x)  # [batch, pos, vocab]

    @torch.no_grad()
    def load_from(self, model: nn.Module) -> PlainDecoder:
        """Copy a probe ``nope`` model's weights in, so both compute the same function."""
        self.embed.weight.copy_(model.W_E)
        for mine, theirs in zip(self.blocks, model.blocks):
            attn = theirs.attn
            qkv = [w.permute(0, 2, 1).flatten(0, 1) for w in (attn.W_Q, attn.W_K, attn.W_V)]  # [(head d_head), d_model]
            mine.qkv.weight.copy_(torch.cat(qkv))
            mine.out.weight.copy_(attn.W_O.flatten(0, 1).T)
            mine.mlp_in.weight.copy_(theirs.mlp.W_in.T)
            mine.mlp_out.weight.copy_(theirs.mlp.W_out.T)
            mine.ln1.copy_(theirs.ln1.w)
            mine.ln2.copy_(theirs.ln2.w)
        self.ln_final.copy_(model.ln_final.w)
        if self.unembed is not None:
            self.unembed.weight.copy_(model.W_U.T)
        return self


def trainable(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_common_args(parser, repeats=None)
    parser.add_argument("--preset", default="tiny", choices=list(PRESETS))
    parser.add_argument(
        "--pes",
        nargs="+",
        default=["nope"],
        choices=PE_KINDS,
        help="probe models to compare with the plain decoder (default nope: the same architecture)",
    )
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--length", type=int, default=24, help="tokens per SCAN sequence")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per variant per repeat (default 1)")
    args = parser.parse_args()
    device = setup(args)
    args.repeats, steps = training_repeats(args, device)
    tokens, mask, vocab = scan_batch(args.batch, args.length, args.seed, device)
    load_before = os.getloadavg()

    plain = PlainDecoder(resolve_config("nope", vocab_size=vocab, preset=args.preset, seed=args.seed)).to(device)
    models = {
        pe: build_model(pe, vocab_size=vocab, preset=args.preset, seed=args.seed, device=device) for pe in args.pes
    }
    same_function = None
    if "nope" in models:  # same weights in both: the same function, checked on the batch itself
        if trainable(plain) != trainable(models["nope"]):
            sys.exit(f"plain decoder has {trainable(plain)} trainable weights, probe nope {trainable(models['nope'])}")
        with torch.no_grad():
            plain.load_from(models["nope"])
            same_function = float((plain(tokens) - models["nope"](tokens)).abs().max())
    variants = {"plain": training_step(plain, tokens, mask, device)}
    variants.update({pe: training_step(model, tokens, mask, device) for pe, model in models.items()})
    timings, ops, warmup = time_training_steps(
        variants, preset=args.preset, repeats=args.repeats, calls=steps, device=device
    )
    runs = timings[clock(device)]
    step_s = medians(runs)
    ratios = {pe: _inverse(paired_ratio(runs, pe, "plain")) for pe in models}

    payload = {
        **header(
            "plain_decoder",
            "training tokens/s of probe's HookedTransformer models vs PlainDecoder (same shape, plain "
            "PyTorch on scaled_dot_product_attention); one step = target-token loss, backward, grad "
            "clip, AdamW (foreach on CPU, fused + bf16 autocast on CUDA); no dropout; same SCAN batch",
            device,
            load_before,
        ),
        "preset": args.preset,
        "batch": args.batch,
        "length": args.length,
        "steps_per_repeat": steps,
        "trainable_weights": trainable(plain),
        "max_abs_logit_diff_vs_nope_same_weights": same_function,
        "clock": clock(device),
        "timing": f"{args.repeats} interleaved repeats (order rotated each repeat) after {warmup} warm-up step(s) per "
        "variant; "
        f"step_s, tokens_per_s and ratios on the {clock(device)} clock (process CPU time on CPU, "
        "wall on CUDA); ratios are medians of per-repeat ratios; wall-clock figures beside them",
        "step_s": step_s,
        "wall_step_s": medians(timings["wall"]),
        "runs_s": timings,
        "tokens_per_s": {name: tokens.numel() / seconds for name, seconds in step_s.items()},
        "dispatched_ops_per_step": ops,
        "plain_over_probe_kernels": {pe: ops["plain"]["kernels"] / ops[pe]["kernels"] for pe in models},
        "target": "probe/plain tokens/s >= 0.8 at base on an H100",
        # probe tokens/s over plain tokens/s = plain step time over probe step time
        "probe_over_plain_tokens_per_s": ratios,
        "probe_over_plain_tokens_per_s_wall": {
            pe: _inverse(paired_ratio(timings["wall"], pe, "plain"))["median"] for pe in models
        },
    }
    path = write_json(f"plain_decoder_{args.preset}", device, payload)
    print(f"\n{'model':>6} {'step (ms)':>10} {'tokens/s':>10} {'probe/plain':>12} {'kernels':>8}")
    for name, seconds in step_s.items():
        ratio = format(ratios[name]["median"], ".3f") if name in ratios else ""
        print(
            f"{name:>6} {seconds * 1e3:>10.1f} {payload['tokens_per_s'][name]:>10.0f} {ratio:>12} "
            f"{ops[name]['kernels']:>8}"
        )
    print(f"wrote {path}")
    return 0


def _inverse(ratio: dict) -> dict:
    """A time ratio (probe / plain) turned into a throughput ratio (probe / plain tokens/s)."""
    return {
        "median": 1 / ratio["median"],
        "min": 1 / ratio["max"],
        "max": 1 / ratio["min"],
        "ratio_of_medians": 1 / ratio["ratio_of_medians"],
        "per_repeat": [1 / r for r in ratio["per_repeat"]],
    }


if __name__ == "__main__":
    sys.exit(main())
