"""Mean rank across scenarios and the bootstrap interval."""

from __future__ import annotations

import itertools

import pytest
import torch
from scipy.stats import rankdata

from probe.errors import ProbeError
from probe.metrics import (
    average_ranks,
    bootstrap_ci,
    mean_rank,
    mean_reciprocal_rank_over_seeds,
    mean_reciprocal_rank_reference_code,
    reciprocal_ranks_shared,
)


def test_average_ranks_share_ties():
    scores = torch.tensor([[0.9, 0.9, 0.5, 0.1], [0.2, 0.7, 0.7, 0.7]])
    assert average_ranks(scores).tolist() == [[1.5, 1.5, 3.0, 4.0], [4.0, 2.0, 2.0, 2.0]]
    lower_better = average_ranks(scores, higher_is_better=False)
    assert lower_better.tolist() == [[3.5, 3.5, 2.0, 1.0], [1.0, 3.0, 3.0, 3.0]]
    assert mean_rank(scores).tolist() == [2.75, 1.75, 2.5, 3.0]


def test_average_ranks_match_scipy_rankdata():
    gen = torch.Generator().manual_seed(0)
    scores = torch.randint(0, 4, (30, 6), generator=gen).double()  # many ties
    want = torch.from_numpy(rankdata(-scores.numpy(), method="average", axis=1))
    assert torch.equal(average_ranks(scores).double(), want)
    assert torch.allclose(mean_rank(scores.reshape(5, 6, 6)).double(), want.mean(0))


def test_reference_code_mean_reciprocal_rank_breaks_ties_by_order():
    scores = torch.tensor([[1.0, 1.0, 0.0], [0.0, 0.5, 1.0]])
    # ranks (ties by order): [1, 2, 3] and [3, 2, 1]
    want = [(1 + 1 / 3) / 2, 0.5, (1 / 3 + 1) / 2]
    assert mean_reciprocal_rank_reference_code(scores).tolist() == pytest.approx(want)
    # exactly as Python writes those fractions: the JSON reports read 0.6666666666666666, not float32's digits
    assert mean_reciprocal_rank_reference_code(scores).tolist() == want


def test_missing_scores_are_one_clear_error():
    with pytest.raises(ProbeError, match="NaN"):
        mean_rank(torch.tensor([[1.0, float("nan")]]))


def test_bootstrap_interval_contains_the_mean_and_is_seeded():
    gen = torch.Generator().manual_seed(0)
    values = torch.rand(40, 3, generator=gen, dtype=torch.float64)  # [example, layer]
    ci = bootstrap_ci(values, seed=7)
    assert torch.equal(ci.mean, values.mean(0))
    assert (ci.low < ci.mean).all() and (ci.mean < ci.high).all()
    again = bootstrap_ci(values, seed=7)
    assert torch.equal(again.low, ci.low) and torch.equal(again.high, ci.high)
    assert not torch.equal(bootstrap_ci(values, seed=8).low, ci.low)


def test_bootstrap_matches_resampling_by_indexing():
    gen = torch.Generator().manual_seed(1)
    values = torch.randn(25, 2, generator=gen, dtype=torch.float64)
    ci = bootstrap_ci(values, n_resamples=500, confidence=0.9, seed=3)
    draws = torch.randint(25, (500, 25), generator=torch.Generator().manual_seed(3))  # the same draws
    means = values[draws].mean(1)  # [resample, 2]
    torch.testing.assert_close(ci.low, torch.quantile(means, 0.05, dim=0))
    torch.testing.assert_close(ci.high, torch.quantile(means, 0.95, dim=0))


@pytest.mark.parametrize("values", [[0.010, 0.018], [0.2, 0.5, 0.1]])
def test_a_95_percent_interval_over_two_or_three_seeds_is_their_range(values):
    """A value drawn every time has probability 1/4 (two seeds) or 1/27 (three), over the 2.5% tail, so the
    percentile interval's ends are the lowest and the highest seed."""
    ci = bootstrap_ci(torch.tensor(values, dtype=torch.float64))
    assert (float(ci.low), float(ci.high)) == pytest.approx((min(values), max(values)))


def test_bootstrap_of_a_constant_collapses():
    ci = bootstrap_ci(torch.full((10,), 0.25))
    assert float(ci.low) == pytest.approx(0.25) and float(ci.high) == pytest.approx(0.25)


def test_paper_mean_reciprocal_rank_hand_worked_with_a_tie():
    from probe.analysis.eval_report import EvalReport
    from probe.analysis.evaluation import mean_reciprocal_ranks

    def report(task, seed, pe, ood):
        return EvalReport(pe, "", task, task, pe, seed, 1.0, ood, [], 0)

    reports = [
        report("scan", 0, "nope", 0.8),
        report("scan", 0, "t5", 0.8),
        report("scan", 0, "alibi", 0.5),
        report("scan", 1, "nope", 0.9),
        report("scan", 1, "t5", 0.7),
        report("scan", 1, "alibi", 0.95),
        report("copy", 0, "nope", 1.0),
        report("copy", 0, "t5", 0.2),
    ]  # copy lacks ALiBi: not a query
    # seed 0: T5 and NoPE tie at 0.8 and the tie goes against NoPE: T5 1, NoPE 2, ALiBi 3.
    # seed 1: ALiBi 1, NoPE 2, T5 3.
    want = {"nope": (1 / 2 + 1 / 2) / 2, "t5": (1 + 1 / 3) / 2, "alibi": (1 / 3 + 1) / 2}
    got = mean_reciprocal_ranks(reports)
    assert got == pytest.approx(want)
    import pandas  # a dependency of transformer-lens; the authors' own computation: rank(method="first") in row order

    frame = pandas.DataFrame({"q0": [0.8, 0.5, 0.8], "q1": [0.7, 0.95, 0.9]}, index=["t5", "alibi", "nope"])
    oracle = (1 / frame.rank(method="first", ascending=False)).mean(axis=1)
    assert got == pytest.approx(oracle.to_dict())


def test_ties_between_the_papers_pes_go_as_the_authors_notebook_breaks_them():
    """Every paper PE at 0% on one scenario (addition at this scale): the notebook's table holds its rows as its
    stored output prints them (Rotary, ALiBi, T5's Relative Bias, Absolute Sinusoid, No PE) and pandas'
    method="first" ranks a tie by row order; a second scenario, untied, ranks them by score."""
    import pandas

    from probe.analysis.evaluation import reciprocal_rank_scores

    rows = ["Rotary", "ALiBi", "T5's Relative Bias", "Absolute Sinusoid", "No PE"]  # plot_aggregate_final.ipynb
    kinds = {"Rotary": "rotary", "ALiBi": "alibi", "T5's Relative Bias": "t5", "Absolute Sinusoid": "ape"}
    kinds["No PE"] = "nope"
    tied = dict.fromkeys(rows, 0.0)
    apart = {"Rotary": 0.1, "ALiBi": 0.3, "T5's Relative Bias": 0.5, "Absolute Sinusoid": 0.2, "No PE": 0.4}
    frame = pandas.DataFrame({"tied": tied, "apart": apart}).loc[rows]
    oracle = (1 / frame.rank(method="first", ascending=False)).mean(axis=1)
    queries = {name: {kinds[row]: score for row, score in column.items()} for name, column in frame.items()}
    got = reciprocal_rank_scores(queries)
    assert got == pytest.approx({kinds[row]: value for row, value in oracle.items()})
    assert got["rotary"] == pytest.approx((1 + 1 / 5) / 2) and got["nope"] == pytest.approx((1 / 5 + 1 / 2) / 2)


def test_mean_reciprocal_rank_over_seeds_hand_worked():
    """Two seeds that order two PEs oppositely on one scenario (and agree on a second): PE a ranks
    (1, 1) at seed 0 and (2, 1) at seed 1, so its MRR is 0.75 (seed 0 alone 1.0, seed 1 alone 0.75,
    both 0.875). Resamples of two seeds give (0, 0) a quarter of the time, (1, 1) a quarter, mixed
    half: the 95% interval runs from seed 1 alone to seed 0 alone."""
    scores = torch.tensor(
        [
            [[0.9, 0.1], [0.8, 0.2]],  # seed 0: a first twice
            [[0.1, 0.9], [0.7, 0.3]],  # seed 1: b first, then a
        ]
    )  # [seed, scenario, method]
    result = mean_reciprocal_rank_over_seeds(scores, n_resamples=2000)
    assert result.mean.tolist() == pytest.approx([0.875, 0.625])
    assert result.low.tolist() == pytest.approx([0.75, 0.5])
    assert result.high.tolist() == pytest.approx([1.0, 0.75])


def test_mean_reciprocal_rank_over_one_seed_has_no_spread():
    scores = torch.tensor([[[0.2, 0.5, 0.5], [0.9, 0.0, 0.1]]])  # [seed, scenario, method]: a tie in the first
    result = mean_reciprocal_rank_over_seeds(scores)
    want = mean_reciprocal_rank_reference_code(scores[0])  # the tie goes to the method listed first
    assert result.mean.tolist() == pytest.approx(want.tolist())
    assert result.low.tolist() == pytest.approx(want.tolist()) and result.high.tolist() == pytest.approx(want.tolist())
    assert want.tolist() == pytest.approx([(1 / 3 + 1) / 2, (1 + 1 / 3) / 2, (1 / 2 + 1 / 2) / 2])


def _expected_reciprocal_ranks(row: list[float]) -> list[float]:
    """Oracle: the mean of 1/rank over every order of the methods consistent with the scores (ties in
    every order), written from the definition, not from the harmonic numbers the code uses."""
    orders = [o for o in itertools.permutations(range(len(row))) if all(row[a] >= row[b] for a, b in zip(o, o[1:]))]
    return [sum(1 / (o.index(m) + 1) for o in orders) / len(orders) for m in range(len(row))]


@pytest.mark.parametrize(
    "row",
    [[0.0, 0.0, 0.0, 0.0], [0.9, 0.9, 0.5, 0.1], [0.2, 0.7, 0.7, 0.7], [0.3, 0.1, 0.3, 0.1, 0.3], [1.0, 0.5, 0.2]],
)
def test_shared_ties_are_the_expected_reciprocal_rank_over_random_tie_breaks(row):
    got = reciprocal_ranks_shared(torch.tensor([row]))[0]
    assert got.tolist() == pytest.approx(_expected_reciprocal_ranks(row))


def test_shared_ties_hand_worked_and_first_ties_differ():
    """Three formats at 0% and one at 5%: the leader 1, the three share (1/2 + 1/3 + 1/4) / 3 = 13/36, where
    the notebook's method="first" would hand them 1/2, 1/3, 1/4 by their order in the table."""
    scores = torch.tensor([[0.0, 0.0, 0.05, 0.0]])
    assert reciprocal_ranks_shared(scores)[0].tolist() == pytest.approx([13 / 36, 13 / 36, 1.0, 13 / 36])
    by_order = mean_reciprocal_rank_over_seeds(scores[None], ties="first").mean
    assert by_order.tolist() == pytest.approx([1 / 2, 1 / 3, 1.0, 1 / 4])
    shared = mean_reciprocal_rank_over_seeds(scores[None], ties="shared").mean
    assert shared.tolist() == pytest.approx([13 / 36, 13 / 36, 1.0, 13 / 36])


def test_an_unknown_tie_rule_is_one_clear_error():
    with pytest.raises(ProbeError, match="unknown tie rule 'random'"):
        mean_reciprocal_rank_over_seeds(torch.zeros(1, 1, 2), ties="random")
