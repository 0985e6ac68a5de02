"""What reading the paper's released 1B code models takes on this machine, without their files.

    python bench/released_1b.py

Builds a probe model of the released config (``CustomDecoderOnlyT5`` at 24 layers, d_model 1024, 32
heads of 128, d_ff 16384, vocab 49,152; Rotary, as ``probe import`` makes it) with random weights,
and times one forward pass over a 1024-token window in float32 and under bf16 autocast, with the
process's peak memory. From the forward time it projects `probe perplexity`'s cost per held-out
file: a file is read once at each of the 12 context sizes (512 ... 2560 tokens, 16,726 in all).
Writes bench/results/released_1b_cpu.json.
"""

from __future__ import annotations

import os
import resource
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import header, write_json  # noqa: E402

from probe.analysis.perplexity import Protocol  # noqa: E402
from probe.models.released import model_config  # noqa: E402
from probe.models.transformer import PETransformer  # noqa: E402

RELEASED = {
    "position_encoding_type": "rotary",
    "vocab_size": 49152,
    "num_layers": 24,
    "d_model": 1024,
    "num_heads": 32,
    "d_kv": 128,
    "d_ff": 16384,
    "layer_norm_epsilon": 1e-6,
}


def main() -> None:
    load_before = os.getloadavg()
    started = time.perf_counter()
    model = PETransformer(model_config(RELEASED)).eval()
    build_s = time.perf_counter() - started
    tokens = torch.randint(0, RELEASED["vocab_size"], (1, 1024), generator=torch.Generator().manual_seed(0))
    forward = {}
    with torch.inference_mode():
        for name, dtype in (("float32", None), ("bf16_autocast", torch.bfloat16)):
            with torch.autocast("cpu", dtype=dtype or torch.bfloat16, enabled=dtype is not None):
                model(tokens[:, :64])  # warm-up
                started = time.perf_counter()
                model(tokens)
                forward[name] = time.perf_counter() - started
    per_file_tokens = sum(Protocol.scaled(1024).contexts)
    payload = {
        **header(
            "released_1b",
            "one forward of a 1024-token window through a model of the released 1B config "
            "(random weights), float32 and bf16 autocast, and the projected `probe perplexity` time per file",
            "cpu",
            load_before,
        ),
        "weights": sum(p.numel() for p in model.parameters()),
        "build_s": build_s,
        "forward_1024_s": forward,
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
        "torch_threads": torch.get_num_threads(),
        "perplexity_tokens_per_file": per_file_tokens,
        "projected_perplexity_s_per_file": {name: s * per_file_tokens / 1024 for name, s in forward.items()},
    }
    print({k: payload[k] for k in ("weights", "forward_1024_s", "peak_rss_gb", "projected_perplexity_s_per_file")})
    write_json("released_1b", "cpu", payload)


if __name__ == "__main__":
    main()
