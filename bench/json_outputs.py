"""Every command's ``--json`` on one fixed set of runs, to diff two checkouts of probe byte for byte.

A refactoring promises the same outputs; this is how it is held to that. The script trains, in a fresh
folder, a fixed set of tiny subjects from fixed seeds (NoPE, T5 and Rotary on reverse with L = 4, NoPE and
ALiBi code runs on a small generated corpus, the authors' T5 fixture imported, a tiny random GPT-2 as
``hf:FOLDER``), runs every command that prints ``--json`` on them in this process (RoPE scaling at inference
included), and writes each command's output with timings and the folder's path taken out, and the hash of
every weights file it wrote::

    python bench/json_outputs.py --out /tmp/after
    python bench/json_outputs.py --repo /path/to/old/checkout --out /tmp/before
    python bench/json_outputs.py --diff /tmp/before /tmp/after     # exit 1 on any difference

``--repo`` imports probe from another checkout (its ``probe/`` comes before this one's on ``sys.path``).
Training is deterministic on one device, so two checkouts that compute the same thing print the same bytes.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import fcntl
import hashlib
import io
import json
import re
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent.parent
TIMING = re.compile(r"(seconds|_s|wall|elapsed|time|duration|per_second|steps_per_s|tokens_per_s)$")
TINY = ["-m", "n_layers=2", "-m", "d_model=32", "-m", "n_heads=2", "-m", "d_head=16", "-m", "d_mlp=64"]
TASK = ["--task", "reverse", "-o", "train_length=4"]
SCALED = ["-p", "scaling=linear", "-p", "factor=2"]  # RoPE scaling at inference: applies to the Rotary run only


def _corpus(folder: Path) -> Path:
    """Forty small Python files: enough for a BPE, a held-out split and windows of 32 tokens."""
    folder.mkdir(parents=True)
    for i in range(40):
        body = "".join(f"def f{j}(x):\n    return x * {j} + {i}\n\n" for j in range((1, 2, 4, 6)[i % 4] * 3))
        (folder / f"m{i:02d}.py").write_text(body)
    return folder


def _hf_gpt2(folder: Path, corpus: Path) -> str:
    """A random 2-layer GPT-2 with a byte-level BPE trained on the corpus, saved as Hugging Face files."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import GPT2Config, GPT2LMHeadModel, PreTrainedTokenizerFast

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=["<|endoftext|>"],
        show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator([p.read_text() for p in sorted(corpus.iterdir())], trainer)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|endoftext|>", bos_token="<|endoftext|>")
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tokenizer), n_positions=256, n_embd=32, n_layer=2, n_head=4)
    GPT2LMHeadModel(config).eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return f"hf:{folder}"


def commands(root: Path) -> dict[str, list[str]]:
    """The fixed set, in order: each name's argv (training first: later commands read its runs)."""
    runs, corpus = root / "runs", _corpus(root / "corpus")
    hf = _hf_gpt2(root / "gpt2", corpus)
    at = ["--checkpoints", str(runs)]
    code = ["--corpus", str(corpus), "--context", "32", "--heldout", "0.5"]
    as_task = ["--task", "code", "-o", f"corpus={corpus}", "-o", "heldout=0.5", "-o", "context=32"]
    authors = HERE / "tests" / "fixtures" / "authors_t5" / "none"
    return {
        "train": [
            "train",
            *TASK,
            "--pe",
            "nope",
            "--pe",
            "t5",
            "--pe",
            "rotary",
            "--steps",
            "30",
            "--batch-size",
            "16",
            *TINY,
            *at,
        ],
        "eval": ["eval", *TASK, "--n", "8", "--valid", "8", *at],
        "compare": ["compare", "nope", "t5", *TASK, "--n-per-bucket", "3", *at],
        "compare-scaled": ["compare", "rotary", "nope", *TASK, "--n-per-bucket", "2", *SCALED, *at],
        "eval-scaled": ["eval", *TASK, "--n", "8", "--valid", "8", *SCALED, *at],
        "compare-detail": ["compare", "nope", "t5", *TASK, "--n-per-bucket", "2", "--detail", "--no-baseline", *at],
        "distances": ["distances", *TASK, "--n-per-bucket", "3", *at],
        "positions": ["positions", *TASK, "--n-per-bucket", "3", "--resamples", "20", *at],
        "theorem": ["theorem", "--max-length", "8"],
        "tasks": ["tasks"],
        "pes": ["pes"],
        "pretrain": [
            "pretrain",
            "--pe",
            "nope",
            "--pe",
            "alibi",
            *code,
            "--steps",
            "10",
            "--batch-size",
            "4",
            *TINY,
            *at,
        ],
        "perplexity": ["perplexity", *code, "--max-files", "6", *at],
        "import": ["import", str(authors), *at],
        "perplexity-hf": ["perplexity", hf, *code, "--max-files", "6", *at],
        "compare-hf": ["compare", hf, hf, *as_task, "--n-per-bucket", "2", *at],
        "compare-code": ["compare", "nope", "alibi", *as_task, "--n-per-bucket", "2", *at],
        "positions-code": ["positions", *as_task, "--n-per-bucket", "2", "--resamples", "10", *at],
        "positions-hf": ["positions", hf, *as_task, "--n-per-bucket", "2", "--resamples", "10", *at],
        "distances-code": ["distances", *as_task, "--pe", "nope", "--n-per-bucket", "2", *at],
        "distances-hf": ["distances", hf, *as_task, "--n-per-bucket", "2", *at],
    }


def _normalised(value, root: str):
    """``value`` with timings dropped and the work folder's path written as ``<ROOT>``."""
    if isinstance(value, dict):
        return {k: _normalised(v, root) for k, v in value.items() if not TIMING.search(str(k))}
    if isinstance(value, list):
        return [_normalised(v, root) for v in value]
    if isinstance(value, str):
        return value.replace(root, "<ROOT>")
    return value


def run_all(out: Path) -> None:
    import torch

    torch.set_num_threads(1)
    out.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.gettempdir()).resolve() / "probe-json-outputs"  # one path: run names digest it
    with open(root.with_suffix(".lock"), "w") as lock:  # two runs at once would train into one folder: take turns
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(f"another run holds {root}; waiting for it", file=sys.__stderr__)
            fcntl.flock(lock, fcntl.LOCK_EX)
        _run_in(root, out)


def _run_in(root: Path, out: Path) -> None:
    from probe.cli import main

    shutil.rmtree(root, ignore_errors=True)
    try:
        for name, argv in commands(root).items():
            stdout, stderr = io.StringIO(), io.StringIO()
            with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
                try:
                    code = main([*argv, "--json"])
                except SystemExit as exit:  # argparse refusing the argv
                    code = exit.code
            if code:
                print(stderr.getvalue().strip().splitlines()[-1:], file=sys.__stderr__)
            text = stdout.getvalue()
            try:
                data = json.loads(text)
            except json.JSONDecodeError:
                data = {"not_json": text}
            record = {
                "argv": [a.replace(str(root), "<ROOT>") for a in argv],
                "exit": code,
                "output": _normalised(data, str(root)),
            }
            (out / f"{name}.json").write_text(json.dumps(record, indent=1, sort_keys=True, default=str) + "\n")
            print(f"{name:16s} exit {code}", file=sys.__stderr__)
        weights = {
            str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*.safetensors"))
        }
        (out / "checkpoints.json").write_text(json.dumps(weights, indent=1) + "\n")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def diff(before: Path, after: Path) -> int:
    """Print a unified diff per command whose output changed; 1 if any did (or one side lacks a command)."""
    names = sorted({p.name for p in before.glob("*.json")} | {p.name for p in after.glob("*.json")})
    changed = 0
    for name in names:
        a, b = before / name, after / name
        old = a.read_text().splitlines() if a.exists() else []
        new = b.read_text().splitlines() if b.exists() else []
        lines = list(difflib.unified_diff(old, new, str(a), str(b), lineterm="", n=2))
        changed += bool(lines)
        print("\n".join(lines[:80]) if lines else f"{name}: the same")
    print(f"{changed} of {len(names)} outputs differ")
    return int(changed > 0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, help="folder for one JSON per command")
    parser.add_argument("--repo", type=Path, help="import probe from this checkout instead")
    parser.add_argument("--diff", type=Path, nargs=2, metavar=("BEFORE", "AFTER"))
    args = parser.parse_args()
    if args.diff:
        return diff(*args.diff)
    if args.out is None:
        parser.error("--out or --diff")
    if args.repo:
        sys.path.insert(0, str(args.repo.resolve()))
    import probe

    print(f"probe from {Path(probe.__file__).parent}", file=sys.stderr)
    run_all(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
