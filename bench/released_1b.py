"""What reading the paper's released 1B code models takes on this machine, without their files.

    python bench/released_1b.py [--device cpu] [--dtype bfloat16]

Builds a probe model of the released config (``CustomDecoderOnlyT5`` at 24 layers, d_model 1024, 32
heads of 128, d_ff 16384, vocab 49,152; Rotary, as ``probe import`` makes it) with random weights, its
weights in ``--dtype``, and measures, each in a process of its own (its own peak memory), what one
held-out file or window costs each analysis at the released training context T = 1,024:

- ``perplexity``: one file read at the 12 context sizes (512 ... 2,560 tokens, 16,726 in all);
- ``distances``: one window at 1x (1,024 tokens) and one at 2x (2,048), every layer's maps folded in hooks;
- ``positions``: one window at 1x and one at 2x, every measure (its logit statistics a block of layers at
  a time);
- ``forward_1024``: one plain forward pass, for scale.

From these it projects a full run over the three released models (NoPE, Rotary, ALiBi: the same shape;
ALiBi and NoPE cost what Rotary does to within the positional term): ``probe perplexity --max-files 20`` and
``distances``/``positions`` at 10 windows per context size. Writes bench/results/released_1b_<device>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import header, write_json  # noqa: E402

from probe.device import DTYPES  # noqa: E402

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
CONTEXT = 1024  # the released models' training context
MEASURES = ("forward_1024", "perplexity", "distances", "positions")


def measure(name: str, device: str, dtype: str) -> dict:
    """One measure, in this process: seconds (per file or window, by context size) and the peak RSS."""
    from probe.analysis.distances import attended_results
    from probe.analysis.perplexity import ScoringPlan, scored_nll
    from probe.analysis.position_hooks import collect
    from probe.device import resolve_dtype
    from probe.models.released import model_config
    from probe.models.transformer import PETransformer
    from probe.subjects.inputs import Inputs, WindowGroup
    from probe.subjects.memory import keep_freed_memory
    from probe.subjects.run_info import RunInfo
    from probe.subjects.subject import Loaded, Subject
    from probe.subjects.windows import ContextWindows

    keep_freed_memory()
    placed = torch.device(device)
    model = PETransformer(model_config(RELEASED)).eval().to(placed, resolve_dtype(dtype))
    tokens = torch.randint(0, RELEASED["vocab_size"], (1, 5 * CONTEXT // 2), generator=torch.Generator().manual_seed(0))
    seconds: dict[str, float] = {}

    def timed(key: str, run, *args, **kwargs) -> None:
        started = time.perf_counter()
        run(*args, **kwargs)
        if placed.type == "cuda":
            torch.cuda.synchronize()
        seconds[key] = time.perf_counter() - started

    with torch.inference_mode():
        if name == "forward_1024":
            model(tokens[:, :64].to(placed))  # warm-up
            timed("1024", model, tokens[:, :CONTEXT].to(placed))
        elif name == "perplexity":
            protocol = ScoringPlan.scaled(CONTEXT)
            for c in protocol.contexts:
                timed(str(c), scored_nll, model, [tokens[0]], c, protocol.scored, device=placed)
            seconds["file"] = sum(seconds.values())
        else:
            for multiple in (1, 2):
                c = multiple * CONTEXT
                windows = ContextWindows(c, float(multiple), multiple == 1, ("random",), tokens[:, :c])
                if name == "distances":
                    loaded = Loaded(Subject("released", None), model, RunInfo("rotary", "rotary", 0, "released"))
                    inputs = Inputs([WindowGroup(windows)], 0, "code", {})
                    settings = dict(weightings=["argmax", "attention"], normalization="text", bins=20, batch_size=1)
                    timed(f"{multiple}x", attended_results, loaded, inputs, device=placed, **settings)
                else:
                    inputs = WindowGroup(windows).position_inputs()
                    settings = dict(pad_id=0, batch_size=1, max_probe_positions=256, sink_first=(1, 4))
                    timed(f"{multiple}x", collect, model, inputs, device=placed, **settings)
    peak = torch.cuda.max_memory_allocated() / 2**30 if placed.type == "cuda" else None
    return {
        "weights": sum(p.numel() for p in model.parameters()),
        "seconds": seconds,
        "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        "peak_gpu_gb": peak,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="bfloat16", choices=list(DTYPES))
    parser.add_argument("--only", choices=MEASURES, help=argparse.SUPPRESS)  # one measure, in a child process
    args = parser.parse_args()
    if args.only:
        print(json.dumps(measure(args.only, args.device, args.dtype)))
        return
    load_before = os.getloadavg()
    results = {}
    for name in MEASURES:
        argv = [sys.executable, __file__, "--only", name, "--device", args.device, "--dtype", args.dtype]
        done = subprocess.run(argv, capture_output=True, text=True)
        results[name] = (
            json.loads(done.stdout.strip().splitlines()[-1])
            if done.returncode == 0
            else {"error": done.stderr.strip().splitlines()[-1:]}
        )
        print(name, results[name], flush=True)
    projected = {}
    if "seconds" in results["perplexity"]:
        projected["perplexity_20_files_3_models_h"] = 3 * 20 * results["perplexity"]["seconds"]["file"] / 3600
    for name in ("distances", "positions"):
        if "seconds" in results[name]:
            per_window = sum(results[name]["seconds"].values())  # one window at 1x and one at 2x
            projected[f"{name}_10_windows_3_models_h"] = 3 * 10 * per_window / 3600
    payload = {
        **header(
            "released_1b",
            "each analysis on one file or window of a model of the released 1B config (random weights), in its "
            "own process, and the projected cost of a full run over the three released models",
            args.device,
            load_before,
        ),
        "dtype": args.dtype,
        "measures": results,
        "projected": projected,
    }
    print(write_json("released_1b", args.device, payload))


if __name__ == "__main__":
    main()
