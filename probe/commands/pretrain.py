"""`probe pretrain`: a language model per PE on a code corpus (the paper's pretraining study, offline)."""

from __future__ import annotations

import argparse
import shlex
from typing import TYPE_CHECKING

from probe.commands.common import add_corpus_options, check_seeds, console, corpus_spec, parse_options, pe_kinds
from probe.commands.shared_training import add_training_options, report_results, results_table, train_with_progress
from probe.errors import ProbeError
from probe.presets import LM_RECIPES, listed

if TYPE_CHECKING:
    from probe.corpus import CorpusSpec


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "pretrain",
        help="train a code language model per PE (default: NoPE, ALiBi, Rotary on the standard library)",
        description="The paper's pretraining study (its Appendix 'Pretraining at 1.3B Scale'), offline: next-token "
        "loss on packed windows of a code corpus (default: this Python's standard library), split into training and "
        "held-out files by file and tokenized with a byte-level BPE trained on the training files. Runs go to "
        "CHECKPOINTS/code[+options]/<pe>/seed<k>/ beside the prepared corpus; finished runs are skipped, interrupted "
        "ones resume. Then `probe perplexity` reads them at 0.5x to 2.5x the training context.",
    )
    parser.add_argument(
        "--pe",
        action="append",
        help="positional encoding (repeatable; default: the three the "
        "paper pretrains, NoPE, ALiBi and Rotary; see `probe pes`)",
    )
    parser.add_argument("--seed", action="append", type=int, help="seed (repeatable; default 0)")
    add_corpus_options(parser)
    parser.add_argument(
        "--preset",
        default="tiny",
        help=f"model size: {listed(LM_RECIPES)} (default tiny, for a "
        "CPU; lm-1b is the paper's 1.3B shape and optimizer, for GPUs)",
    )
    add_training_options(parser, "windows")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from probe.corpus import prepare_corpus
    from probe.corpus.prepared import corpus_of_run
    from probe.device import resolve_device
    from probe.presets import training_context
    from probe.runs.folders import run_dir

    args.pe = pe_kinds(args.pe)
    check_seeds(args.seed)  # a seed names its run folder: seed-1 is none
    spec = corpus_spec(args, training_context(args.preset))
    device = resolve_device(args.device)
    configs = _configs(args, spec)
    paths = [run_dir(args.checkpoints, c.task, c.pe, c.seed, c.task_options, c.pe_options) for c in configs]
    out = console(stderr=args.json)
    with out.status("preparing the corpus") as status:
        corpus = prepare_corpus(spec, corpus_of_run(paths[0]), progress=lambda what: status.update(what))
    corpus.require_heldout_window(spec.context)
    sizes = corpus.summary()
    out.print(
        f"corpus {spec.corpus}: {sizes['train_files']:,} training files ({sizes['train_tokens']:,} tokens), "
        f"{sizes['heldout_files']:,} held out ({sizes['heldout_tokens']:,} tokens), {sizes['skipped_files']} "
        f"skipped; {len(corpus.tokenizer):,}-id BPE; windows of {spec.context} tokens",
        highlight=False,
    )
    results = train_with_progress(configs, paths, device, args, out)

    def cells(r):
        speed = None if r.steps_per_second is None else r.steps_per_second * r.config.batch_size * spec.context
        perplexity = r.held_out.get("heldout_perplexity")
        return "-" if speed is None else f"{speed:,.0f}", "-" if perplexity is None else f"{perplexity:.2f}"

    title = (
        f"probe pretrain: {spec.corpus}, context {spec.context}, preset {args.preset} (runs under {args.checkpoints})"
    )
    out.print(results_table(title, results, ("tokens/s", "held-out perplexity"), cells))
    if not args.json:
        out.print(f"next: {shlex.join(['probe', 'perplexity', *perplexity_hint(args, spec)])}", highlight=False)
    return report_results(results, args, out)


def perplexity_hint(args: argparse.Namespace, spec: CorpusSpec) -> list[str]:
    """The arguments of `probe perplexity` that find the runs just trained: their checkpoints folder, every option
    naming their task folder (corpus, context, vocabulary, held-out fraction) that differs from what `probe
    perplexity` reads without it (a preset's context is not the default one), and a seed trained if not 0."""
    from probe.corpus import CorpusSpec
    from probe.presets import CONTEXTS

    default = CorpusSpec(context=CONTEXTS["tiny"])  # what `probe perplexity` looks for without options
    hint = ["--checkpoints", str(args.checkpoints)]
    for flag, name in (("--corpus", "corpus"), ("--context", "context"), ("--vocab-size", "vocab_size")):
        if getattr(spec, name) != getattr(default, name):
            hint += [flag, str(args.corpus if name == "corpus" else getattr(spec, name))]
    if spec.heldout != default.heldout:
        hint += ["--heldout", repr(spec.heldout)]
    seeds = args.seed or [0]
    return hint if 0 in seeds else [*hint, "--seed", str(seeds[0])]


def _configs(args: argparse.Namespace, spec) -> list:
    """One TrainConfig per PE and seed; a misspelt PE, model field or PE option, or a context longer than
    the model accepts, gets its line before the corpus is read."""
    from probe.analysis.perplexity import context_room
    from probe.corpus import CODE_TASK
    from probe.models.model_config import ModelConfig
    from probe.models.registry import PRETRAIN_PES, pe_class
    from probe.presets import PRESETS
    from probe.training.train_config import TrainConfig

    pes = args.pe or list(PRETRAIN_PES)
    for pe in pes:
        pe_class(pe)
    model = parse_options(args.model, None)
    if "n_ctx" not in model and PRESETS[args.preset].get("n_ctx", ModelConfig.n_ctx) < context_room(spec.context):
        model["n_ctx"] = context_room(spec.context)  # room to read 2.5x the context
    pe_options = parse_options(args.pe_option, None)
    configs = [
        TrainConfig(
            task=CODE_TASK,
            pe=pe,
            seed=seed,
            preset=args.preset,
            task_options=spec.given(),
            pe_options=pe_options,
            steps=args.steps,
            lr=args.lr,
            batch_size=args.batch_size,
            dropout=args.dropout,
            model=model,
            checkpoint_every=args.checkpoint_every,
            precision=args.precision,
        )
        for pe in dict.fromkeys(pes)
        for seed in dict.fromkeys(args.seed or [0])
    ]
    for config in configs:
        n_ctx = config.model_config(vocab_size=spec.vocab_size).n_ctx
        if n_ctx < spec.context:
            raise ProbeError(
                f"a training context {spec.context} is longer than the model accepts (n_ctx={n_ctx}); "
                f"give -m n_ctx={context_room(spec.context)} or a shorter --context"
            )
    return configs
