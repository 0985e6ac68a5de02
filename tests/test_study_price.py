"""What a study's dry run prices: training steps, the authors' checkpoint-selection passes, and scenarios
trained one at a time, each against a count made by hand or read off the tensors the trainer builds."""

from __future__ import annotations

import json
import os

import pytest
import torch
from helpers import bench_script, tiny_model

from probe.cli import main
from probe.errors import ProbeError
from probe.studies import sweep
from probe.studies.sweep import cost as cost_module

AUTHORS = {
    "task": "copy",
    "pe": ["nope"],
    "seed": [0],
    "steps": 100,
    "batch_size": 8,
    "eval_examples": 40,
    "options": {"split": "paper", "variant": "count"},  # the paper split: the authors' protocol
    "model": tiny_model(1),
}


def _run(tmp_path, **changes):
    return sweep.expand_grid({**AUTHORS, **changes}, tmp_path)[0]


@pytest.mark.parametrize(
    "steps, every, done, passes",
    [
        (1500, 75, 0, 20),  # the authors' 20 passes a run
        (1500, 75, 700, 11),  # resumed at 700: 750, 825, ..., 1500
        (100, 30, 0, 4),  # 30, 60, 90 and the last step, 100
        (100, 30, 90, 1),  # only the last step's is left
        (100, 30, 100, 0),
    ],
)
def test_selection_passes_left_are_the_multiples_of_the_interval_and_the_last_step(
    tmp_path, monkeypatch, steps, every, done, passes
):
    run = _run(tmp_path, steps=steps, eval_every=every)
    assert run.config.protocol == "authors"
    monkeypatch.setattr(cost_module, "steps_left", lambda run: steps - done)
    assert sweep.selections_left(run) == passes


def test_probes_protocol_makes_no_selection_pass(tmp_path):
    run = _run(tmp_path, options={"variant": "count"})
    assert run.config.protocol == "probe" and sweep.selections_left(run) == 0


def test_a_selection_pass_reads_the_padded_tokens_of_the_batches_it_scores(tmp_path):
    """Read off the batches themselves: the validation set the trainer builds, scored by the teacher-forced
    pass (256 examples a batch), each batch's tensor counted as a stand-in model receives it."""
    from probe.tasks.decoding import teacher_forced_exact_match
    from probe.training.sources import TaskSource

    class Counting(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.seen: list[int] = []

        def forward(self, tokens):  # [batch, pos] -> [batch, pos, vocab] of zeros
            self.seen.append(tokens.numel())
            return torch.zeros(*tokens.shape, 4)

    run = _run(tmp_path, eval_examples=600)
    data = TaskSource("copy", run.config.task_options, 0, authors=True).validation_set(600)
    model = Counting()
    teacher_forced_exact_match(model, data)
    assert len(model.seen) == 3 and sum(model.seen) > int(data.lengths.sum())  # padding counts
    assert sweep.selection_tokens(run) == sum(model.seen)


def test_a_given_throughput_prices_steps_and_selection_passes(tmp_path):
    """100 steps of B tokens at 1,000 tokens/s, and 20 passes of V tokens at 3,000 (a forward pass is about
    a third of a step's work per token)."""
    run = _run(tmp_path)
    batch, valid = sweep.mean_batch_tokens(run), sweep.selection_tokens(run)
    cost = sweep.estimate_cost([run], tokens_per_second=1000.0)
    assert cost["seconds"] == [pytest.approx(100 * batch / 1000 + 20 * valid / 3000)]
    assert list(cost["selection_tokens_per_second"].values()) == [3000.0]


def test_a_measured_price_times_selection_once_per_shape(tmp_path, monkeypatch):
    """A selection pass is timed once per model shape, whatever the PE or seed (the passes are a few percent of
    a run: a PE's difference there is not worth a measurement per PE)."""
    measured: list[tuple[str, int]] = []
    monkeypatch.setattr(cost_module, "measure_tokens_per_second", lambda run, *args: 1000.0)
    monkeypatch.setattr(
        cost_module,
        "measure_selection_tokens_per_second",
        lambda run, *args: measured.append((run.config.pe, run.config.seed)) or 5000.0,
    )
    runs = sweep.expand_grid({**AUTHORS, "pe": ["nope", "t5"], "seed": [0, 1]}, tmp_path)
    cost = sweep.estimate_cost(runs)
    batch, valid = sweep.mean_batch_tokens(runs[0]), sweep.selection_tokens(runs[0])
    assert measured == [("nope", 0)]
    assert cost["seconds"][0] == pytest.approx(100 * batch / 1000 + 20 * valid / 5000)


def test_each_pe_is_timed_and_priced_at_its_own_speed(tmp_path, monkeypatch):
    """T5's bias trains slower than NoPE at one model shape: a run is priced at its own PE's measured speed,
    not at the first PE's, and the seeds of a PE share its measurement."""
    speed = {"nope": 1000.0, "t5": 800.0, "alibi": 900.0}
    measured: list[str] = []
    monkeypatch.setattr(
        cost_module,
        "measure_tokens_per_second",
        lambda run, *args: measured.append(run.config.pe) or speed[run.config.pe],
    )
    monkeypatch.setattr(cost_module, "measure_selection_tokens_per_second", lambda run, *args: 3000.0)
    runs = sweep.expand_grid({**AUTHORS, "pe": ["nope", "t5", "alibi"], "seed": [0, 1]}, tmp_path)
    cost = sweep.estimate_cost(runs)
    assert sorted(measured) == ["alibi", "nope", "t5"]
    batch, valid = sweep.mean_batch_tokens(runs[0]), sweep.selection_tokens(runs[0])
    for run, seconds in zip(runs, cost["seconds"], strict=True):
        assert seconds == pytest.approx(100 * batch / speed[run.config.pe] + 20 * valid / 3000)


def test_a_selection_pass_is_timed_after_a_warm_up_and_read_at_the_median(tmp_path, monkeypatch):
    import time

    import probe.tasks.decoding

    calls, clock = [], iter([0.0, 9.0, 10.0, 12.0, 20.0, 21.0, 30.0, 34.0])  # 9 s warm-up, then 2, 1, 4 s
    monkeypatch.setattr(probe.tasks.decoding, "teacher_forced_exact_match", lambda *a, **k: calls.append(1) or [])
    monkeypatch.setattr(time, "perf_counter", lambda: next(clock))
    run = _run(tmp_path)
    speed = sweep.measure_selection_tokens_per_second(run, "cpu", threads=1, passes=3)
    assert len(calls) == 4 and speed == pytest.approx(sweep.selection_tokens(run) / 2.0)


@pytest.mark.parametrize("width, rows", [(1.0, 1), (45.0, 32), (46.0, 64), (800.0, 1024), (3000.0, 4096)])
def test_a_row_width_is_priced_at_the_nearest_power_of_two(width, rows):
    assert cost_module.row_class(width) == rows


def test_vocabularies_of_other_sizes_are_timed_apart(tmp_path, monkeypatch):
    """PCFG's 535 words cost its embedding, unembedding and loss about 5x copy's 107: its rows, as wide as
    copy's, are not priced at copy's speed. Its two seeds share one measurement."""
    measured: list[str] = []
    monkeypatch.setattr(
        cost_module, "measure_tokens_per_second", lambda run, *args: measured.append(run.label) or 1000.0
    )
    monkeypatch.setattr(cost_module, "measure_selection_tokens_per_second", lambda run, *args: 3000.0)
    copy = _run(tmp_path / "copy")
    pcfg = sweep.expand_grid({**AUTHORS, "task": "pcfg", "options": {}, "seed": [0, 1]}, tmp_path / "pcfg")
    sizes = [cost_module.vocabulary_size(run) for run in (copy, pcfg[0])]
    assert cost_module.row_class(sizes[1]) >= 4 * cost_module.row_class(sizes[0])
    sweep.estimate_cost([copy, *pcfg])
    assert measured == [copy.label, pcfg[0].label]


def test_rows_of_other_widths_are_timed_apart(tmp_path, monkeypatch):
    """Attention's cost grows with the square of a row's width, so addition with its full scratchpad (rows
    of hundreds of tokens) is not priced at the speed measured without one; two seeds of one folder share
    a measurement."""
    measured: list[str] = []
    monkeypatch.setattr(
        cost_module, "measure_tokens_per_second", lambda run, *args: measured.append(run.label) or 1000.0
    )
    monkeypatch.setattr(cost_module, "measure_selection_tokens_per_second", lambda run, *args: 3000.0)
    grid = {
        **AUTHORS,
        "task": "addition",
        "seed": [0, 1],
        "options": {"train_length": 4},
        "model": tiny_model(1, n_ctx=1024),
    }
    plain = sweep.expand_grid(grid, tmp_path / "plain")
    scratch = sweep.expand_grid({**grid, "scratchpad": "full"}, tmp_path / "scratch")
    widths = [cost_module.batch_geometry(run)[1] for run in (plain[0], scratch[0])]
    assert cost_module.row_class(widths[1]) >= 4 * cost_module.row_class(widths[0])
    sweep.estimate_cost([*plain, *scratch])
    assert measured == [plain[0].label, scratch[0].label]


def test_a_batchs_geometry_is_read_off_the_rows_the_trainer_builds(tmp_path):
    """Packed and padded, the mean padded tokens and row width of the first epoch's batches, against the
    tensors themselves."""
    from probe.tasks.batches import epoch_batches
    from probe.training.sources import TaskSource

    for pack in (True, False):
        run = _run(tmp_path / str(pack), pack=pack)
        source = TaskSource("copy", run.config.task_options, 0, authors=True)
        data = source.training_set(0)
        batches = epoch_batches(data, 8, 0, 0, grouped=False)
        rows = [data.packed_batch(b)[0] if pack else data.batch(b)[0] for b in batches]
        whole = cost_module.batch_geometry(run, sample=None)
        assert whole == pytest.approx(
            (sum(r.numel() for r in rows) / len(rows), sum(r.shape[1] for r in rows) / len(rows))
        )


def test_phases_run_one_after_another_each_a_queue_taken_in_its_order():
    """Three runs of 100 s then one of 50 s on 2 slots: 200 s then 50 s (pooled, 200 s in all). In its order,
    a queue of 50, 100, 100, 50 s on 2 slots ends at 150 s (the second 100 s starts at 50 s); longest first,
    as a sweep prices, it would too, but 30, 30, 100 ends at 130 s where longest first ends at 100 s."""
    seconds, phases = [100.0, 100.0, 100.0, 50.0], ["a", "a", "a", "b"]
    assert sweep.wall_seconds(seconds, 2) == 200.0
    assert sweep.queued_wall_seconds(seconds, phases, 2) == 250.0
    assert sweep.queued_wall_seconds([50.0, 100.0, 100.0, 50.0], ["a"] * 4, 2) == 150.0
    assert sweep.queued_wall_seconds([30.0, 30.0, 100.0], ["a"] * 3, 2) == 130.0
    assert sweep.wall_seconds([30.0, 30.0, 100.0], 2) == 100.0


def test_the_dry_run_prices_each_scenario_and_seed_0_before_the_others(tmp_path, capsys, monkeypatch):
    """Two scenarios x 5 PEs x 3 seeds, 100 s a run on 2 jobs: seed 0 of both (10 runs, one queue: 500 s),
    then seeds 1-2 of both (20 runs: 1,000 s), 1,500 s in all; each scenario's share 15 x 100 s / 2. A
    scenario at a time, as the study trained before its phases were one queue, it was 1,600 s: each
    scenario's fifth run of a seed-0 phase trained alone. Each run's evaluation, 10 s on one thread beside the
    training, adds 30 x 10 s over the 2 cores: 1,650 s, and a scenario's share 15 x 110 s / 2."""
    import probe.studies.sweep

    def estimate_cost(runs, *, device, threads, on_measure):
        seconds = [100.0] * len(runs)
        evaluation = [10.0] * len(runs)
        return {"seconds": seconds, "total_seconds": sum(seconds), "evaluation_seconds": evaluation, "source": "given"}

    monkeypatch.setattr(probe.studies.sweep, "estimate_cost", estimate_cost)
    argv = ["reproduce", "--scale", "section3", "--task", "scan", "--task", "pcfg", "--seeds", "3", "--jobs", "2"]
    assert main([*argv, "--dry-run", "--json", "--checkpoints", str(tmp_path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["scenarios"] == {"scan+split=paper": 825.0, "pcfg": 825.0}
    assert out["estimated_training_seconds"] == 1650.0
    assert len(out["todo"]) == 30 and {t["seconds"] for t in out["todo"]} == {100.0}
    assert {t["steps_left"] for t in out["todo"]} == {1500}


def test_a_sittings_progress_counts_its_steps_and_reads_the_time_left_at_its_own_pace(tmp_path, monkeypatch):
    """Run A from step 0 and run B resumed at 1,000, both to 4,000: 7,000 steps in the sitting. After 100 s,
    A at 1,000 and B at 2,000: 2,000 done (29%), 5,000 left at 20 steps/s, 250 s (4.2 min). A third run the rule adds
    joins the count."""
    import probe.studies.progress
    from probe.studies.progress import SittingProgress

    a, b, c = sweep.expand_grid({**AUTHORS, "pe": ["nope", "t5", "alibi"], "steps": 4000}, tmp_path)
    monkeypatch.setattr(probe.studies.progress, "steps_left", lambda run: 3000 if run is b else run.config.steps)
    now = [0.0]
    progress = SittingProgress([a, b], clock=lambda: now[0])
    assert progress.line() == "0/2 runs, 0% of their tokens"
    now[0] = 100.0
    progress.update(str(a.path), 1000)
    progress.update(str(b.path), 2000)
    progress.update(str(c.path), 50)  # not in the sitting yet: not counted
    assert progress.line() == "0/2 runs, 29% of their tokens, about 4.2 min left"
    progress.update(str(a.path), 4000)
    progress.expect([a, c])
    assert progress.last_step(str(c.path)) == 4000 and progress.last_step(str(tmp_path)) is None
    assert progress.line() == "1/3 runs, 45% of their tokens, about 2.0 min left"


def test_a_sittings_progress_weighs_each_step_by_its_runs_tokens(tmp_path):
    """A baseline of 1 token a step and a scratchpad of 7, 1,000 steps each: after 100 s the baseline has
    trained, the scratchpad not begun. 1,000 of 8,000 tokens (12%), 7,000 left at 10 tokens/s: 700 s (11.7 min),
    where steps counted alike would say 50% and 1.7 min."""
    from probe.studies.progress import SittingProgress

    base, pad = sweep.expand_grid({**AUTHORS, "pe": ["nope", "t5"], "steps": 1000}, tmp_path)
    now = [0.0]
    progress = SittingProgress([base, pad], clock=lambda: now[0], tokens_per_step=lambda r: 7.0 if r is pad else 1.0)
    now[0] = 100.0
    progress.update(str(base.path), 1000)
    assert progress.line() == "1/2 runs, 12% of their tokens, about 11.7 min left"


def test_a_study_weighs_a_step_by_its_scenarios_tokens_read_once_per_scenario_and_seed(tmp_path, monkeypatch):
    """Every PE and rung of a scenario at a seed cuts the same batches: one reading each; a full scratchpad's
    step is several times its baseline's."""
    import probe.studies.sweep.cost
    from probe.commands.reproduce import _tokens_per_step
    from probe.studies.reproduce import plan

    reads = []
    real = probe.studies.sweep.cost.mean_batch_tokens
    monkeypatch.setattr(probe.studies.sweep.cost, "mean_batch_tokens", lambda run: reads.append(run) or real(run))
    tokens = _tokens_per_step()
    runs = plan("section6", tmp_path, seeds=2, tasks=["addition"])
    per = {(r.path.parent.parent.name, r.config.seed): tokens(r) for r in runs}
    assert len(reads) == len(per) == 18 and len(runs) == 90  # addition: 9 scenarios x 2 seeds
    for seed in (0, 1):
        assert per[("addition+scratchpad=full", seed)] > 4 * per[("addition+template=authors+train_length=8", seed)]


def test_a_pause_while_runs_train_is_left_out_of_the_pace_and_an_evaluation_is_not(tmp_path):
    """Two runs of 4,000 steps log 100 steps every 10 s (20 steps/s in all). A 20-minute silence half-way
    through a run is a stopped study: left out, the time left stays at the pace of the steps. The same
    silence once every run has trained (an evaluation before the next scenario) counts."""
    from probe.studies.progress import SittingProgress

    a, b, c = sweep.expand_grid({**AUTHORS, "pe": ["nope", "t5", "alibi"], "steps": 4000}, tmp_path)
    now = [0.0]
    progress = SittingProgress([a, b], clock=lambda: now[0])
    for step in range(100, 2100, 100):  # 2,000 steps each by 200 s
        now[0] += 5.0
        progress.update(str(a.path), step)
        now[0] += 5.0
        progress.update(str(b.path), step)
    assert progress.line() == "0/2 runs, 50% of their tokens, about 3.3 min left"
    now[0] += 1200.0  # stopped
    progress.update(str(a.path), 2100)
    assert progress.line() == "0/2 runs, 51% of their tokens, about 3.2 min left"
    for step in range(2200, 4100, 100):
        now[0] += 5.0
        progress.update(str(a.path), step)
        progress.update(str(b.path), step)
    progress.update(str(b.path), 4000)
    progress.expect([c])
    now[0] += 1200.0  # the scenario's evaluation: nothing trains
    progress.update(str(c.path), 400)
    # 2,695 s since the start, less the pause (1,200 s less one usual spacing, 5 s): 1,500 s for 8,400 steps;
    # 3,600 left at that pace, 643 s
    assert progress.paused == 1195.0
    assert progress.line() == "2/3 runs, 70% of their tokens, about 10.7 min left"


@pytest.mark.parametrize("eval_n", [60, None])
def test_an_evaluation_is_priced_at_the_tokens_the_evaluation_reads(tmp_path, monkeypatch, eval_n):
    """Counted off the model's own forward passes while ``evaluate_run`` scores a trained run (the selected
    weights and the last step's, the held-out set and the test split), against the price's count."""
    from probe.analysis.evaluation import evaluate_run
    from probe.models.checkpoint import read_checkpoint_config
    from probe.models.transformer import PETransformer
    from probe.runs.folders import Run
    from probe.training.bookkeeping import train_run

    run = _run(tmp_path, steps=6, eval_every=3, eval_n=eval_n, eval_valid=50)
    train_run(run.config, run.path, torch.device("cpu"))
    seen: list[int] = []
    forward = PETransformer.forward

    def counting(self, tokens, *args, **kwargs):
        seen.append(tokens.numel())
        return forward(self, tokens, *args, **kwargs)

    monkeypatch.setattr(PETransformer, "forward", counting)
    evaluate_run(Run(run.path, read_checkpoint_config(run.path)), n_test=run.eval_n, n_valid=run.eval_valid)
    work = sweep.evaluation_work(run)
    assert work.passes == 2 and not work.decoded and len(seen) >= 2
    assert work.passes * work.forced_tokens == sum(seen)


def test_a_decoded_evaluation_is_priced_at_the_batches_it_decodes(tmp_path, monkeypatch):
    """A scratchpad is scored on its final answer, decoded token by token: each batch greedy decoding is given
    while ``evaluate_run`` scores a trained run (examples, prompt length, new tokens) is one the price counts,
    but for the rows left unended at the gold's length, decoded on to the authors' positions (not priced)."""
    import probe.tasks.decoding
    from probe.analysis.evaluation import evaluate_run
    from probe.models.checkpoint import read_checkpoint_config
    from probe.runs.folders import Run
    from probe.tasks.decoding import SCRATCHPAD_POSITIONS
    from probe.training.bookkeeping import train_run

    grid = {**AUTHORS, "task": "addition", "options": {"train_length": 3}, "scratchpad": "full"}
    run = sweep.expand_grid({**grid, "steps": 4, "eval_every": 2, "eval_n": 40, "eval_valid": 20}, tmp_path)[0]
    train_run(run.config, run.path, torch.device("cpu"))
    seen: list[tuple[int, int, int]] = []
    decode = probe.tasks.decoding.greedy_decode

    def recording(model, prompts, max_new, *args, **kwargs):
        seen.append((*prompts.shape, max_new))
        return decode(model, prompts, max_new, *args, **kwargs)

    monkeypatch.setattr(probe.tasks.decoding, "greedy_decode", recording)
    evaluate_run(Run(run.path, read_checkpoint_config(run.path)), n_test=run.eval_n, n_valid=run.eval_valid)
    work = sweep.evaluation_work(run)
    assert work.passes == 2 and work.forced_tokens == 0 and len(work.decoded) > 1
    budget = min(SCRATCHPAD_POSITIONS, read_checkpoint_config(run.path)["model"]["n_ctx"] + 1)
    decoded_on = [(rows, prompt, new) for rows, prompt, new in seen if new == budget - prompt]
    first = [batch for batch in seen if batch not in decoded_on]
    assert sorted(first) == sorted(list(work.decoded) * 2)
    assert 0 < len(decoded_on) <= len(first)  # at most once per batch: its unended rows, from their prompts


def test_an_evaluations_seconds_by_hand():
    """1,000 teacher-forced tokens at 100 tokens/s: 10 s. A decoded batch of 4 prompts of 10 tokens, 5 new ones:
    40 prompt tokens at 100/s (0.4 s), 5 steps of 0.01 s + 4 x 0.001 s (0.07 s), and attention over the cache,
    4 x 0.0001 s x (5 x 10 + 25 / 2) positions (0.025 s). Two sets of weights: 2 x 10.495 s."""
    work = sweep.EvaluationWork(2, forced_tokens=1000, decoded=((4, 10, 5),))
    assert work.seconds(100.0, (0.01, 0.001, 0.0001)) == pytest.approx(20.99)


def test_a_decoding_step_is_timed_at_two_batch_sizes_and_two_contexts_less_the_prompts_pass(tmp_path, monkeypatch):
    """Per step: 0.1 s at a batch of 1, 0.226 s at 64 (0.002 s more an example), and at 64 after a 512-token
    prompt 0.226 + 64 x 496 x 0.0001 s (0.0001 s more an example and cached position); the prompt's own pass
    (0.5, 0.7, 3.0 s, timed with one new token) taken out, each length timed after a warm-up."""
    import time

    import probe.tasks.decoding

    steps = cost_module.DECODE_STEPS
    per_step = {(1, 16): 0.1, (64, 16): 0.226, (64, 512): 0.226 + 64 * 496 * 0.0001}
    prompt_pass = {(1, 16): 0.5, (64, 16): 0.7, (64, 512): 3.0}
    durations = []
    for key in per_step:
        durations += [9.0, prompt_pass[key], 9.0, prompt_pass[key] + steps * per_step[key]]  # warm-up, timed
    clock = iter([t for d in durations for t in (0.0, d)])
    calls: list[tuple[int, int, int]] = []

    def decode(model, prompts, new, *args, **kwargs):
        calls.append((*prompts.shape, new))

    monkeypatch.setattr(probe.tasks.decoding, "greedy_decode", decode)
    monkeypatch.setattr(time, "perf_counter", lambda: next(clock))
    run = _run(tmp_path, model=tiny_model(1, n_ctx=1024))
    overhead, per_example, per_position = sweep.measure_decoding_step(run, "cpu", threads=1, wide=64)
    assert calls == [(b, p, n) for b, p in per_step for n in (1, 1, 1 + steps, 1 + steps)]
    assert (overhead, per_example, per_position) == (pytest.approx(0.098), pytest.approx(0.002), pytest.approx(1e-4))


def test_a_run_that_asks_no_last_step_score_is_evaluated_and_priced_once(tmp_path, monkeypatch):
    """``eval_last = false``: the selected weights alone are scored (no ``last`` in the report), and the price
    counts one pass; Section 6 asks for it, its decoded evaluations costing about as much as its training."""
    from probe.analysis.evaluation import evaluate_run
    from probe.models.checkpoint import read_checkpoint_config
    from probe.models.transformer import PETransformer
    from probe.runs.folders import Run
    from probe.studies.reproduce import plan
    from probe.training.bookkeeping import train_run

    run = _run(tmp_path, steps=6, eval_every=3, eval_n=60, eval_valid=50, eval_last=False)
    assert run.eval_last is False and all(r.eval_last is False for r in plan("section6", tmp_path / "s6"))
    train_run(run.config, run.path, torch.device("cpu"))
    seen: list[int] = []
    forward = PETransformer.forward
    monkeypatch.setattr(
        PETransformer,
        "forward",
        lambda self, tokens, *a, **k: seen.append(tokens.numel()) or forward(self, tokens, *a, **k),
    )
    report = evaluate_run(Run(run.path, read_checkpoint_config(run.path)), n_test=60, n_valid=50, last_step=False)
    assert report.last is None and report.selected_step is not None
    work = sweep.evaluation_work(run)
    assert work.passes == 1 and work.forced_tokens == sum(seen)


def test_an_eval_last_that_is_not_true_or_false_is_one_line(tmp_path):
    with pytest.raises(ProbeError, match="eval_last must be true or false, got 'false'"):
        _run(tmp_path, eval_last="false")


def _logged_run(folder, times, evaluated=None):
    """A run folder whose log has a line at each of ``times`` and, where ``evaluated``, an eval file then."""
    folder.mkdir(parents=True)
    lines = [json.dumps({"step": i, "time": t}) for i, t in enumerate(times)]
    (folder / "metrics.jsonl").write_text("".join(line + "\n" for line in lines))
    if evaluated is not None:
        (folder / "eval.json").write_text("{}")
        os.utime(folder / "eval.json", (evaluated, evaluated))


def test_a_sittings_measured_span_leaves_out_a_stop_and_not_an_evaluation_beside_the_next_runs(tmp_path):
    """Part A logs every 10 s from 0 to 100 and is evaluated until 150, while part B (not compared: still
    training) logs from 100 to 300, stopped from 200 to 260. Its span: first start (0 less one interval, -10) to
    A's evaluation, 160 s; B's stop is outside it, A's evaluation is work. With B's stop inside A's evaluation
    span nothing is a pause either; a 60 s stop inside A's own training is."""
    script = bench_script("study_price")
    a, b = tmp_path / "a" / "nope" / "seed0", tmp_path / "b" / "nope" / "seed0"
    _logged_run(a, [float(t) for t in range(0, 110, 10)], evaluated=150.0)
    _logged_run(b, [float(t) for t in [*range(100, 210, 10), *range(260, 310, 10)]])
    assert script.span([[a]], 20.0, [b]) == {"wall_seconds": 160.0, "paused_seconds": 0.0}
    assert script.span([[a]], 20.0) == {"wall_seconds": 160.0, "paused_seconds": 0.0}  # the evaluation alone
    c = tmp_path / "c" / "nope" / "seed0"
    _logged_run(c, [float(t) for t in [*range(0, 50, 10), *range(100, 160, 10)]], evaluated=170.0)
    assert script.span([[c]], 20.0) == {"wall_seconds": 120.0, "paused_seconds": 60.0}
    assert script.span([[c]], None) == {"wall_seconds": 180.0, "paused_seconds": 0.0}  # under the floor: no pause


def test_a_price_times_training_steps_with_freed_memory_kept_as_a_worker_trains_them(tmp_path, monkeypatch):
    """A study's workers keep their freed memory mapped (probe.training.memory), which makes a scratchpad's step
    up to 1.4x faster: the price times its steps the same way, or it would price the workers' steps too dear."""
    import contextlib

    import probe.training.memory as memory

    kept: list[str] = []

    @contextlib.contextmanager
    def spy(device_type="cpu"):
        kept.append("entered")
        yield True
        kept.append("left")

    monkeypatch.setattr(memory, "freed_memory_kept", spy)
    speed = cost_module.measure_tokens_per_second(_run(tmp_path, steps=4), "cpu", steps=2)
    assert speed > 0 and kept == ["entered", "left"]
