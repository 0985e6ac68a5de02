"""Why the authors' packed step costs more beside another run than alone: the step alone and paired.

    python bench/pair_contention.py                      # small, NoPE, 30 steps a turn, 3 repeats
    python bench/pair_contention.py --pe t5 --steps 40

``bench/protocol_step.py`` times one process on one thread (process CPU time, under whatever load)
and finds the authors' packed step 1.07-1.15x probe's at ``small``; ``bench/pair_step.py`` trains
two runs side by side, as the study does, and finds 1.32x. This benchmark separates the candidates.
Two worker processes (one torch thread each) hold the same variants, built once; each turn times
``--steps`` consecutive training steps of one variant, either in one worker while the other waits
(``alone``) or in both at once (``paired``, each on its own core of a 2-core machine). The steps
are the bare step of ``probe.training.loop.Trainer`` (batch, forward, loss, backward, clipping,
AdamW as it builds it), with no selection evaluations, data set-up or states, so what ``paired``
adds over ``alone`` is what the two runs do to each other. The variants add the authors' protocol
one part at a time, so the steps between them price each part:

- ``probe``: probe's protocol (``<bos>``, length-grouped batches, dropout on the sublayer outputs);
- ``packed-probe-dropout``: the authors' sequences in random batches packed into rows (block-diagonal
  attention), with probe's dropout sites: what packing costs;
- ``authors-packed-no-attention-dropout``: T5's dropout sites too (the embeddings, the feed-forward
  hidden layer, the final norm), but not the attention probabilities;
- ``authors-packed``: the study's step, the attention probabilities dropped as well.

The middle two are diagnostics; no run trains that way. Each repeat takes every (variant, setting)
once in rotated order; ratios are of wall seconds per step, per repeat, then the median. A last
round profiles (``torch.profiler``) one turn of each and reports the ops that take the most time
per step, alone and paired. Writes bench/results/pair_contention_cpu.json.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import header, streamed_training_step, write_json  # noqa: E402

BATCH, DROPOUT = 64, 0.1  # the study's recipe
VARIANTS = {  # name: (the authors' data and packed rows, dropout sites, dropout on attention probabilities)
    "probe": (False, "probe", False),
    "packed-probe-dropout": (True, "probe", False),
    "authors-packed-no-attention-dropout": (True, "authors", False),
    "authors-packed": (True, "authors", True),
}
SETTINGS = ("alone", "paired")


def build_steps(preset: str, pe: str, seed: int) -> dict[str, Callable[[], None]]:
    """A training step for each variant, on its own model and batch stream."""
    import torch

    from probe.models.transformer import PETransformer
    from probe.tasks.batches import batch_stream
    from probe.training.sources import TaskSource
    from probe.training.train_config import TrainConfig

    sources = {authors: TaskSource("scan", {"split": "paper"}, seed=seed, authors=authors) for authors in (False, True)}
    data = {authors: source.training_set(seed) for authors, source in sources.items()}
    steps = {}
    for name, (authors, sites, attention_dropout) in VARIANTS.items():
        protocol = "authors" if authors else "probe"
        config = TrainConfig(
            task="scan", pe=pe, preset=preset, task_options={"split": "paper"}, protocol=protocol, seed=seed
        )
        torch.manual_seed(seed)
        model = PETransformer(config.model_config(sources[authors].vocab_size))
        model.train()
        stream = batch_stream(data[authors], BATCH, seed, grouped=not authors)
        steps[name] = streamed_training_step(
            model,
            stream,
            data[authors],
            sites=sites,
            p=DROPOUT,
            pack=authors,
            attention_dropout=attention_dropout,
            lr=5e-4,
        )
    return steps


def worker(connection, preset: str, pe: str, seed: int) -> None:
    """Build the variants, then time what the parent asks for until it says stop."""
    import torch

    from probe.errors import ProbeError

    torch.set_num_threads(1)
    try:
        steps = build_steps(preset, pe, seed)
    except ProbeError as error:  # an unknown PE or preset: the parent says it in one line
        connection.send(str(error))
        return
    for step in steps.values():
        step(), step()  # warm-up: allocator, first-call paths
    connection.send("ready")
    while (request := connection.recv()) != "stop":
        name, count, profile = request
        connection.send(time_steps(steps[name], count, profile))


def time_steps(step: Callable[[], None], count: int, profile: bool) -> dict:
    """Seconds per step (wall and process CPU); with ``profile``, each op's self time per step (ms)."""
    with ExitStack() as stack:
        profiler = None
        if profile:
            from torch.profiler import ProfilerActivity
            from torch.profiler import profile as torch_profile

            profiler = stack.enter_context(torch_profile(activities=[ProfilerActivity.CPU]))
        wall, cpu = time.perf_counter(), time.process_time()
        for _ in range(count):
            step()
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    timed = {"wall": wall / count, "cpu": cpu / count}
    if profiler is not None:
        ops = {event.key: event.self_cpu_time_total / 1000 / count for event in profiler.key_averages()}
        timed["ops_ms"] = dict(sorted(ops.items(), key=lambda item: -item[1])[:25])
    return timed


def ask(workers, setting: str, name: str, count: int, profile: bool = False) -> dict:
    """Time ``name`` in the first worker (``alone``) or in both at once (``paired``: the mean)."""
    busy = workers[:1] if setting == "alone" else workers
    for connection in busy:
        connection.send((name, count, profile))
    answers = [connection.recv() for connection in busy]
    timed = {clock: statistics.mean(a[clock] for a in answers) for clock in ("wall", "cpu")}
    if profile:
        timed["ops_ms"] = answers[0]["ops_ms"]
    return timed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--pe", default="nope")
    parser.add_argument("--steps", type=int, default=30, help="consecutive steps a turn")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if (os.cpu_count() or 1) < 2:
        sys.exit("pairing two runs needs 2 cores")
    if args.steps < 1 or args.repeats < 1:
        sys.exit(f"--steps and --repeats must be at least 1, got {args.steps} and {args.repeats}")
    load = os.getloadavg()
    context = mp.get_context("spawn")
    pipes = [context.Pipe() for _ in range(2)]
    processes = [
        context.Process(target=worker, args=(child, args.preset, args.pe, args.seed), daemon=True) for _, child in pipes
    ]
    for process in processes:
        process.start()
    workers = [parent for parent, _ in pipes]
    for connection in workers:
        if (answer := connection.recv()) != "ready":
            sys.exit(answer)
    turns = [(setting, name) for setting in SETTINGS for name in VARIANTS]
    seconds: dict[str, dict[str, list[dict]]] = {name: {s: [] for s in SETTINGS} for name in VARIANTS}
    for repeat in range(args.repeats):
        for setting, name in turns[repeat % len(turns) :] + turns[: repeat % len(turns)]:
            timed = ask(workers, setting, name, args.steps)
            seconds[name][setting].append(timed)
            print(f"repeat {repeat} {setting:6s} {name}: {timed['wall']:.3f} s/step wall, {timed['cpu']:.3f} cpu")
    profiles = {
        name: {s: ask(workers, s, name, args.steps, profile=True)["ops_ms"] for s in SETTINGS} for name in VARIANTS
    }
    for connection in workers:
        connection.send("stop")
    for process in processes:
        process.join()

    def ratio(name: str, setting: str, base: str, base_setting: str) -> float:
        """Median over repeats of the per-repeat ratio of wall seconds per step."""
        pairs = zip(seconds[name][setting], seconds[base][base_setting])
        return statistics.median(a["wall"] / b["wall"] for a, b in pairs)

    ratios = {
        f"{name}_over_probe_{setting}": ratio(name, setting, "probe", setting)
        for setting in SETTINGS
        for name in list(VARIANTS)[1:]
    } | {f"{name}_paired_over_alone": ratio(name, "paired", name, "alone") for name in VARIANTS}
    result = {
        **header("pair_contention", "a training step alone and beside another run, per protocol", "cpu", load),
        "preset": args.preset,
        "pe": args.pe,
        "batch": BATCH,
        "steps_per_turn": args.steps,
        "repeats": args.repeats,
        "seconds_per_step": seconds,
        "ratios_of_wall_seconds_per_step": ratios,
        "top_ops_ms_per_step": profiles,
    }
    print("  ".join(f"{k} {v:.2f}" for k, v in ratios.items()))
    print(f"wrote {write_json('pair_contention', 'cpu', result)}")


if __name__ == "__main__":
    main()
