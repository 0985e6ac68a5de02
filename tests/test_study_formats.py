"""Section 6's measures (probe.studies.formats) on hand-worked examples: the formats' mean reciprocal rank
per task with shared ties and intervals over seeds, the scratchpad's gain per PE, the claim's one line."""

from __future__ import annotations

from dataclasses import replace

import pytest

from probe.analysis.eval_report import EvalReport
from probe.figures import format_accuracy_figure, format_rank_figure, rank_figure
from probe.studies.formats import (
    claim_best_differs,
    claim_only_addition,
    claim_pe_needed,
    fitted,
    format_accuracy,
    format_of,
    format_queries,
    format_ranks,
    format_ranks_per_pe,
    guessing,
    helps,
    helps_per_format,
    pe_queries,
    scratchpad_gain,
    task_key,
    unfitted,
)


def report(task: str, pe: str, seed: int, ood: float, fmt: str | None = None, **options) -> EvalReport:
    opts = {**options, "train_length": 8, **({"scratchpad": fmt} if fmt else {})}
    folder = "+".join([task, *(f"{k}={v}" for k, v in sorted(opts.items()))])
    path = f"/runs/{folder}/{pe}/seed{seed}"
    return EvalReport(f"{pe} {folder}", path, task, folder, pe, seed, 1.0, ood, [], 1, opts)


def test_formats_rank_per_pe_and_seed_with_shared_ties():
    """Addition, two PEs, one seed. NoPE: full 0.5, C 0.2, none 0.0 → 1, 1/2, 1/3. Rotary: all three at 0 →
    each (1 + 1/2 + 1/3) / 3 = 11/18. Means: full (1 + 11/18) / 2 = 29/36, C (1/2 + 11/18) / 2 = 20/36,
    none (1/3 + 11/18) / 2 = 17/36."""
    runs = [
        report("addition", "nope", 0, 0.5, "full"),
        report("addition", "nope", 0, 0.2, "C"),
        report("addition", "nope", 0, 0.0),
        report("addition", "rotary", 0, 0.0, "full"),
        report("addition", "rotary", 0, 0.0, "C"),
        report("addition", "rotary", 0, 0.0),
    ]
    ranks = format_ranks(format_queries(runs))["addition"]
    assert list(ranks["formats"]) == ["full", "C", "none"]
    assert [v["mrr"] for v in ranks["formats"].values()] == pytest.approx([29 / 36, 20 / 36, 17 / 36])
    assert all(v["low"] == pytest.approx(v["mrr"]) == pytest.approx(v["high"]) for v in ranks["formats"].values())
    assert ranks["pes"] == ["nope", "rotary"] and ranks["seeds"] == [0]


def test_a_query_missing_a_format_is_left_out_and_tasks_stay_apart():
    runs = [
        report("parity", "nope", 0, 0.1, "full"),
        report("parity", "nope", 0, 0.3),
        report("parity", "t5", 0, 0.4, "full"),  # t5 has no baseline: not a complete query
        report("sorting", "nope", 0, 0.2, "I+C+O+R", variant="multi-digit"),
        report("sorting", "nope", 0, 0.1, variant="multi-digit"),
    ]
    ranks = format_ranks(format_queries(runs))
    assert ranks["parity"]["pes"] == ["nope"]
    assert list(ranks["parity"]["formats"]) == ["none", "full"]
    assert list(ranks["sorting+variant=multi-digit"]["formats"]) == ["I+C+O+R", "none"]
    assert task_key(runs[3]) == "sorting+variant=multi-digit"


def test_formats_rank_per_pe_over_tasks_with_each_tasks_full_format():
    """NoPE, seed 0. Addition: C 0.3, full 0.2, none 0.1 → C 1, full 1/2, none 1/3 (its I+C+O+R and I+C+V+R
    are not formats every task trains). LEGO, whose full is I+C+O+R: full 0.6, none 0.5, C 0.4 → full 1, none
    1/2, C 1/3. Means: full 3/4, C 2/3, none 5/12. Seed 1 has addition alone, so the ranking rests on seed 0."""
    runs = [
        report("addition", "nope", 0, 0.3, "C"),
        report("addition", "nope", 0, 0.2, "full"),
        report("addition", "nope", 0, 0.1),
        report("addition", "nope", 0, 0.0, "I+C+O+R"),
        report("addition", "nope", 0, 0.9, "I+C+V+R"),
        report("lego", "nope", 0, 0.6, "I+C+O+R"),
        report("lego", "nope", 0, 0.5),
        report("lego", "nope", 0, 0.4, "C"),
    ]
    runs += [replace(r, seed=1) for r in runs[:3]]
    ranks = format_ranks_per_pe(format_queries(runs))["nope"]
    assert list(ranks["formats"]) == ["full", "C", "none"]
    assert [v["mrr"] for v in ranks["formats"].values()] == pytest.approx([3 / 4, 2 / 3, 5 / 12])
    assert ranks["seeds"] == [0] and ranks["tasks"] == ["addition", "lego"]


def _per_pe(**best: tuple[str, float, float, float]) -> dict:
    """Per PE, its best format with (mrr, low, high); the others at 0.3 [0.2, 0.4], two seeds."""
    out = {}
    for pe, (fmt, mrr, low, high) in best.items():
        formats = {fmt: {"mrr": mrr, "low": low, "high": high}}
        formats |= {f: {"mrr": 0.3, "low": 0.2, "high": 0.4} for f in ("none", "C", "full") if f != fmt}
        out[pe] = {"seeds": [0, 1], "tasks": ["addition"], "formats": formats}
    return out


def test_the_best_format_differs_where_two_pes_best_differ_both_clear_of_their_runners_up():
    clear = _per_pe(nope=("C", 0.9, 0.8, 1.0), alibi=("full", 0.8, 0.7, 0.9))
    assert claim_best_differs(clear) == "holds: best NoPE C, ALiBi full; clear of its runner-up: NoPE, ALiBi"
    close = _per_pe(nope=("C", 0.9, 0.8, 1.0), alibi=("full", 0.8, 0.35, 0.9))
    assert claim_best_differs(close).startswith("not clear: the best formats differ")
    same = _per_pe(nope=("C", 0.9, 0.8, 1.0), alibi=("C", 0.8, 0.7, 0.9))
    assert claim_best_differs(same) == "does not hold: every PE's best format is the same (NoPE C, ALiBi C)"
    one_seed = {pe: {**entry, "seeds": [0]} for pe, entry in clear.items()}
    assert claim_best_differs(one_seed).startswith("cannot be told yet: it needs two seeds (best at seed 0: NoPE C")


def test_formats_level_at_the_top_share_the_best_place_and_neither_is_clear():
    level = _per_pe(nope=("C", 0.9, 0.8, 1.0), alibi=("full", 0.8, 0.7, 0.9))
    level["nope"]["formats"]["none"] = {"mrr": 0.9, "low": 0.8, "high": 1.0}
    assert claim_best_differs(level).startswith("not clear:")
    assert "best NoPE C = none, ALiBi full; clear: ALiBi" in claim_best_differs(level)


def test_the_gain_per_pe_and_over_pes_with_its_interval_over_seeds():
    """Gains (full − none): NoPE +0.4 and +0.2 at seeds 0 and 1, ALiBi 0.0 and +0.2. Over PEs: seed 0 +0.2,
    seed 1 +0.2 → mean 0.2, an interval of no width; NoPE's mean 0.3 in [0.2, 0.4]."""
    runs = []
    for seed, (nope, alibi) in enumerate([(0.4, 0.0), (0.2, 0.2)]):
        runs += [report("addition", "nope", seed, 0.5 + nope, "full"), report("addition", "nope", seed, 0.5)]
        runs += [report("addition", "alibi", seed, 0.1 + alibi, "full"), report("addition", "alibi", seed, 0.1)]
    gain = scratchpad_gain(format_queries(runs))["addition"]
    assert gain["pes"]["nope"] == pytest.approx({"mean": 0.3, "min": 0.2, "max": 0.4})
    assert gain["pes"]["alibi"] == pytest.approx({"mean": 0.1, "min": 0.0, "max": 0.2})
    assert (gain["mean"], gain["low"], gain["high"]) == pytest.approx((0.2, 0.2, 0.2))


def test_sorting_and_legos_full_format_is_the_one_without_updates():
    runs = [report("lego", "nope", 0, 0.6, "I+C+O+R"), report("lego", "nope", 0, 0.5)]
    assert scratchpad_gain(format_queries(runs))["lego"]["format"] == "I+C+O+R"


def _gains(addition: dict[str, float], parity: dict[str, float], seeds=(0, 1)) -> dict:
    """One PE at ``seeds``: each task's gain per format (over no scratchpad) the same at every seed; per
    format, :func:`scratchpad_gain` of the runs, as the report reads them."""
    runs = []
    for seed in seeds:
        for task, by_format in (("addition", addition), ("parity", parity)):
            runs.append(report(task, "nope", seed, 0.2))
            runs += [report(task, "nope", seed, 0.2 + gain, fmt) for fmt, gain in by_format.items()]
    queries = format_queries(runs)
    return {fmt: scratchpad_gain(queries, fmt) for fmt in {*addition, *parity}}


PLANNED = {"addition": ["full", "C", "I+C+V+R"], "parity": ["full", "C"]}


@pytest.mark.parametrize(
    "addition, parity, line",
    [
        (
            {"full": 0.3, "C": 0.1, "I+C+V+R": 0.2},
            {"full": 0.0, "C": -0.1},
            "holds: every format helps on addition (3 of 3), and none on any other task",
        ),
        (
            {"full": 0.3, "C": 0.0, "I+C+V+R": 0.2},
            {"full": 0.0, "C": 0.0},
            "holds in part: 2 of 3 formats help on addition (not C), none on any other task",
        ),
        (
            {"full": 0.3, "C": 0.1, "I+C+V+R": 0.2},
            {"full": 0.0, "C": 0.1},
            "holds in part: 3 of 3 formats help on addition; also C on parity",
        ),
        (
            {"full": 0.0, "C": -0.1, "I+C+V+R": 0.0},
            {"full": 0.0, "C": 0.0},
            "does not hold: 0 of 3 formats help on addition (not full, C, I+C+V+R), none on any other task",
        ),
        (
            {"full": -0.1, "C": 0.0, "I+C+V+R": 0.0},
            {"full": 0.2, "C": 0.1},
            "does not hold: 0 of 3 formats help on addition (not full, C, I+C+V+R); also full, C on parity",
        ),
    ],
)
def test_the_claim_line_reads_every_format_of_every_task(addition, parity, line):
    """The paper's "regardless of the format": the full format helping on addition alone is not the claim."""
    assert claim_only_addition(_gains(addition, parity), PLANNED) == line


def test_a_format_helps_only_where_it_helps_every_pe():
    """The paper's "helpful across all PEs": a gain over PEs carried by one PE (ALiBi +30 points, the others
    at 0, at both seeds: the mean +6 with its interval clear of 0) is not help; every PE above 0 is."""
    by_pe = {"nope": 0.0, "t5": 0.0, "alibi": 0.3, "rotary": 0.0, "ape": 0.0}
    runs = []
    for seed in (0, 1):
        for pe, gain in by_pe.items():
            runs += [report("addition", pe, seed, 0.1), report("addition", pe, seed, 0.1 + gain, "full")]
    gain = scratchpad_gain(format_queries(runs), "full")["addition"]
    assert gain["mean"] == pytest.approx(0.06) and gain["low"] > 0
    assert helps(gain) is False
    lifted = [replace(r, ood_accuracy=r.ood_accuracy + 0.01) if format_of(r) == "full" else r for r in runs]
    assert helps(scratchpad_gain(format_queries(lifted), "full")["addition"]) is True


def test_one_seed_cannot_tell_the_claim():
    gains = _gains({"full": 0.3}, {"full": 0.0}, seeds=(0,))
    assert claim_only_addition(gains, {"addition": ["full"], "parity": ["full"]}).startswith("cannot be told yet")


def test_the_claim_waits_for_every_format_of_every_task_of_the_study():
    """Every format the study trains has landed at two seeds but parity's C: "holds" on the rest would be a
    verdict about formats and tasks not yet measured, so the claim waits, and says for which task; and for
    a task of the study with nothing landed at all."""
    gains = _gains({"full": 0.3, "C": 0.1, "I+C+V+R": 0.2}, {"full": 0.0})
    line = "cannot be told yet: it needs at least two seeds of every format on every task (parity not yet)"
    assert claim_only_addition(gains, PLANNED) == line
    assert claim_only_addition(gains, {**PLANNED, "parity": ["full"], "summation": ["full"]}).endswith(
        "(summation not yet)"
    )
    with pytest.raises(ValueError, match="no 'addition' task"):
        claim_only_addition(gains, {"parity": ["full"]})


def test_a_format_is_read_on_its_own_once_every_task_training_it_has_two_seeds():
    """Addition's full and I+C+V+R help (every gain above 0 at both seeds), its C does not; parity's C helps
    and its full does not. Every format at two seeds: each named with the tasks it helps on. Parity's C at
    one seed only: C waits, the others are read."""
    gains = _gains({"full": 0.3, "C": 0.0, "I+C+V+R": 0.2}, {"full": 0.0, "C": 0.1})
    both = ["addition", "parity"]
    full, c = {"read": both, "helps": ["addition"]}, {"read": both, "helps": ["parity"]}
    updates = {"read": ["addition"], "helps": ["addition"]}
    assert helps_per_format(gains, PLANNED) == {"full": full, "C": c, "I+C+V+R": updates}
    one_seed = _gains({}, {"C": 0.1}, seeds=(0,))["C"]
    waiting = {**gains, "C": {**gains["C"], "parity": one_seed["parity"]}}
    assert helps_per_format(waiting, PLANNED) == {"full": full, "I+C+V+R": updates}


def test_pes_ranked_with_a_scratchpad_only():
    runs = [report("addition", "nope", 0, 0.4, "full"), report("addition", "t5", 0, 0.3, "full")]
    runs.append(report("addition", "nope", 0, 0.9))  # no scratchpad: not a query of the PE ranking
    queries = pe_queries(runs)
    assert list(queries.values()) == [{"nope": 0.4, "t5": 0.3}]
    runs.append(report("parity", "nope", 0, 0.7, "C"))
    assert set(pe_queries(runs)) == {
        ("addition+scratchpad=full+train_length=8", 0),
        ("parity+scratchpad=C+train_length=8", 0),
    }
    assert pe_queries(runs, scenarios=["parity+scratchpad=C+train_length=8"]) == {
        ("parity+scratchpad=C+train_length=8", 0): {"nope": 0.7}
    }


def _ranking(**pes: tuple[float, float, float]) -> dict:
    """ranked_over_seeds' entry at two seeds: {pe: (mrr, low, high)}."""
    return {
        "seeds": [0, 1],
        "scenarios": 20,
        "pes": {pe: dict(zip(("mrr", "low", "high"), v)) for pe, v in pes.items()},
    }


APART = {"nope": (0.8, 0.7, 0.9), "t5": (0.6, 0.55, 0.65), "alibi": (0.5, 0.45, 0.5), "rotary": (0.3, 0.2, 0.4)}
APART["ape"] = (0.2, 0.1, 0.3)  # the paper's order, every leader's interval clear of every trailer's


@pytest.mark.parametrize(
    ("changed", "line"),
    [
        ({}, "holds: with a scratchpad, NoPE and T5 still rank ahead of ALiBi, Rotary and APE, intervals apart"),
        (  # ALiBi's mean above T5's; NoPE's interval still clear of ALiBi's (0.7 > 0.68)
            {"alibi": (0.62, 0.5, 0.68)},
            "holds in part: with a scratchpad, NoPE or T5 ranks ahead of ALiBi, Rotary or APE in 5 of 6 pairs, "
            "5 with intervals apart (not ahead: ALiBi ≥ T5's Relative Bias)",
        ),
        (
            {"t5": (0.6, 0.5, 0.7), "alibi": (0.5, 0.4, 0.6)},
            "holds in part: with a scratchpad, NoPE or T5 ranks ahead of ALiBi, Rotary or APE in 6 of 6 pairs, "
            "5 with intervals apart (intervals overlap: T5's Relative Bias and ALiBi)",
        ),
        (
            {
                "nope": (0.3, 0.2, 0.4),
                "t5": (0.2, 0.1, 0.3),
                "alibi": (0.5, 0.4, 0.6),
                "rotary": (0.6, 0.5, 0.7),
                "ape": (0.4, 0.3, 0.5),
            },
            "does not hold: with a scratchpad, neither NoPE nor T5 ranks ahead of ALiBi, Rotary or APE",
        ),
    ],
)
def test_the_pe_claim_names_the_pairs_that_fall_short(changed, line):
    assert claim_pe_needed(_ranking(**{**APART, **changed}), waiting=0, every=20) == line


def test_the_pe_claim_waits_for_two_seeds_of_every_scratchpad_scenario():
    ranking = _ranking(**APART)
    waiting = "cannot be told yet: it needs at least two seeds of every scratchpad scenario"
    assert claim_pe_needed(ranking, waiting=3, every=20) == f"{waiting} (17 of 20 have them)"
    assert claim_pe_needed(ranking, waiting=19, every=20) == f"{waiting} (1 of 20 has them)"
    assert claim_pe_needed({**ranking, "seeds": [0]}, waiting=0, every=20) == f"{waiting} (20 of 20 have them)"
    assert claim_pe_needed(None, waiting=0, every=20).startswith(waiting)
    assert claim_pe_needed(ranking, waiting=1, every=3, scope="each of them") == (
        "cannot be told yet: it needs at least two seeds of each of them (2 of 3 have them)"
    )


def test_the_pe_claim_reads_a_ranking_made_from_the_runs():
    """Two seeds of two scratchpad scenarios, the PEs in the paper's order at both (NoPE 0.5, T5 0.4, ALiBi 0.3,
    Rotary 0.2, APE 0.1 on unseen lengths): every (seed) resample ranks them alike, so every interval has no
    width and every pair is apart; with T5 and ALiBi tied everywhere, they split 1/2 and 1/3, and the pair is
    not ahead."""
    from probe.studies.ranks import ranked_over_seeds

    ood = {"nope": 0.5, "t5": 0.4, "alibi": 0.3, "rotary": 0.2, "ape": 0.1}

    def line(scores: dict[str, float]) -> str:
        runs = [
            report(task, pe, seed, acc, "full")
            for task in ("addition", "parity")
            for seed in (0, 1)
            for pe, acc in scores.items()
        ]
        ranking = ranked_over_seeds(pe_queries(runs), ties="shared")
        return claim_pe_needed(ranking, waiting=0, every=2)

    assert line(ood).startswith("holds:")
    assert line({**ood, "alibi": 0.4}).endswith("(not ahead: ALiBi ≥ T5's Relative Bias)")


def test_one_set_of_queries_ranks_alone_and_as_a_category_alike():
    """The Section 6 ranking of the PEs with a scratchpad is one set of queries, not a category beside an
    ``overall`` that repeats it: ranked_over_seeds of them is rank_intervals' entry for a category holding them,
    and nothing with one PE."""
    from probe.studies.ranks import rank_intervals, ranked_over_seeds

    queries = {
        (task, seed): {"nope": 0.5 - 0.1 * seed, "t5": 0.3, "alibi": 0.2 + 0.2 * seed}
        for task in ("addition", "parity")
        for seed in (0, 1)
    }
    alone = ranked_over_seeds(queries, ties="shared")
    assert alone == rank_intervals({"maths": queries}, ties="shared")["maths"]
    assert alone["seeds"] == [0, 1] and alone["scenarios"] == 2
    # seed 0: NoPE 1st, T5 2nd, ALiBi 3rd; seed 1: ALiBi 0.4 and NoPE 0.4 share 1st and 2nd, T5 3rd
    assert alone["pes"]["t5"]["mrr"] == pytest.approx((1 / 2 + 1 / 3) / 2)
    assert alone["pes"]["nope"]["mrr"] == pytest.approx((1 + 3 / 4) / 2)
    assert ranked_over_seeds({key: {"nope": q["nope"]} for key, q in queries.items()}) is None


def test_a_third_seed_landed_for_one_scenario_leaves_the_ranking_on_the_seeds_all_share():
    """Seeds 0 and 1 of addition and parity, seed 2 of addition alone: the ranking rests on both scenarios at
    seeds 0 and 1, as the claim asks (every scenario), not on addition alone at seeds 0-2 (where seed 2's
    NoPE-last would show); parity at seed 2 with one PE is not a seed parity holds."""
    from probe.studies.ranks import ranked_over_seeds, ranked_text, rests_on

    queries = {(task, seed): {"nope": 0.5, "t5": 0.3} for task in ("addition", "parity") for seed in (0, 1)}
    queries[("addition", 2)] = {"nope": 0.1, "t5": 0.3}
    queries[("parity", 2)] = {"nope": 0.4}
    shared = ranked_over_seeds(queries)
    assert (shared["scenarios"], shared["seeds"]) == (2, [0, 1])
    assert rests_on(shared) == "2 scenarios, seeds 0,1"
    assert ranked_text(shared) == "NoPE 1.00, T5's Relative Bias 0.50"  # every seed alike: intervals of no width
    queries[("parity", 2)] = {"nope": 0.2, "t5": 0.3}
    every = ranked_over_seeds(queries)
    assert rests_on(every) == "2 scenarios, seeds 0,1,2"
    assert every["pes"]["nope"]["mrr"] == pytest.approx((1 + 1 + 1 / 2) / 3)  # first at seeds 0 and 1, then second
    assert (
        ranked_over_seeds({("addition", 1): {"nope": 0.5, "t5": 0.3}, ("parity", 0): {"nope": 0.5, "t5": 0.3}}) is None
    )


def test_the_formats_figure_names_every_format_with_its_interval():
    per_task = {
        "addition": {
            "formats": {"full": {"mrr": 0.8, "low": 0.7, "high": 0.9}, "none": {"mrr": 0.4, "low": 0.4, "high": 0.5}}
        },
        "parity": {
            "formats": {"C": {"mrr": 0.75, "low": 0.5, "high": 1.0}, "none": {"mrr": 0.5, "low": 0.5, "high": 0.5}}
        },
    }
    figure = format_rank_figure(per_task, "formats")
    assert [t.name for t in figure.data] == ["full", "C", "no scratchpad"]  # full first, none last
    full, c, none = figure.data
    assert list(full.x) == ["addition"] and list(full.error_y.array) == pytest.approx([0.1])
    assert list(full.error_y.arrayminus) == pytest.approx([0.1])
    assert list(none.x) == ["addition", "parity"] and list(none.y) == [0.4, 0.5]
    assert list(none.error_y.array) == pytest.approx([0.1, 0.0]) and none.marker.color == "#9e9e9e"


def test_format_accuracy_keeps_each_pe_s_mean_range_and_seeds_per_format():
    """Parity: NoPE full 0.2 and 0.4 at seeds 0 and 1 → mean 0.3, range 0.2–0.4; none 0.5 and 0.7 → 0.6;
    T5's bias has full at seed 0 alone. Sorting's formats run none, C, then I+C+O+R; addition's full comes last."""
    runs = [
        report("parity", "nope", 0, 0.2, "full"),
        report("parity", "nope", 1, 0.4, "full"),
        report("parity", "nope", 0, 0.5),
        report("parity", "nope", 1, 0.7),
        report("parity", "t5", 0, 0.1, "full"),
        report("sorting", "nope", 0, 0.3, "I+C+O+R"),
        report("sorting", "nope", 0, 0.1, "C"),
        report("sorting", "nope", 0, 0.2),
        report("addition", "alibi", 0, 0.05, "full"),
        report("addition", "alibi", 0, 0.02, "C+O"),
        report("addition", "alibi", 0, 0.01),
        report("addition", "alibi", 0, 0.03, "C"),
    ]
    accuracy = format_accuracy(format_queries(runs))
    parity = accuracy["parity"]
    assert parity["formats"] == ["none", "full"]
    assert parity["pes"]["nope"]["full"] == {"mean": pytest.approx(0.3), "min": 0.2, "max": 0.4, "seeds": [0, 1]}
    assert parity["pes"]["nope"]["none"]["mean"] == pytest.approx(0.6)
    assert parity["pes"]["t5"] == {"full": {"mean": 0.1, "min": 0.1, "max": 0.1, "seeds": [0]}}
    assert accuracy["sorting"]["formats"] == ["none", "C", "I+C+O+R"]
    assert accuracy["addition"]["formats"] == ["none", "C", "C+O", "full"]


def test_the_format_accuracy_figure_draws_a_panel_per_task_with_its_floor():
    """Two tasks: a bar trace per PE in each panel (the paper's order, named in the legend once), a group per
    format with no scratchpad first, in %, with the seeds' range as error bars; the constant guess dashed where
    it scores above 0, and each panel's axis reaching its highest bar's range."""
    runs = [
        report("parity", "rotary", 0, 0.2, "full"),
        report("parity", "rotary", 1, 0.4, "full"),
        report("parity", "nope", 0, 0.5),
        report("parity", "nope", 0, 0.6, "full"),
        report("addition", "nope", 0, 0.05, "full"),
        report("addition", "nope", 0, 0.0),
    ]
    figure = format_accuracy_figure(format_accuracy(format_queries(runs)), "t", {"parity": 0.48, "addition": 0.0})
    parity_nope, parity_rotary, addition_nope = figure.data
    assert [t.name for t in figure.data] == ["NoPE", "Rotary", "NoPE"]
    assert [t.showlegend for t in figure.data] == [True, True, False]
    assert list(parity_nope.x) == ["no scratchpad", "full"] and list(parity_nope.y) == pytest.approx([50, 60])
    assert list(parity_rotary.x) == ["full"] and list(parity_rotary.y) == pytest.approx([30])
    assert list(parity_rotary.error_y.array) == pytest.approx([10]) == list(parity_rotary.error_y.arrayminus)
    assert list(addition_nope.y) == pytest.approx([0, 5]) and addition_nope.yaxis == "y2"
    floors = [shape for shape in figure.layout.shapes if shape.line.dash == "dash"]
    assert len(floors) == 1 and floors[0].y0 == pytest.approx(48) and floors[0].yref == "y"
    assert figure.layout.yaxis.range[1] >= 60 and 5 <= figure.layout.yaxis2.range[1] < 10


def test_the_pe_rank_figure_keeps_the_papers_order_and_labels():
    figure = rank_figure(
        {"overall": {"rotary": 0.3, "nope": 0.9}}, "ranks", "MRR", intervals={"overall": {"nope": (0.8, 1.0)}}
    )
    assert [t.name for t in figure.data] == ["NoPE", "Rotary"]
    assert list(figure.data[0].error_y.array) == pytest.approx([0.1]) and list(figure.data[1].error_y.array) == [0.0]


def test_a_planned_run_and_its_evaluation_name_one_task():
    """A run asks some options; its evaluation records every option, defaults included (LEGO's shuffle=False):
    both must key the same task, or a study's claim would wait for a task its runs never name."""
    from probe.studies.formats import task_key_of
    from probe.studies.reproduce import plan
    from probe.tasks import get

    keys = set()
    for run in plan("section6", "/nonexistent", seeds=1):
        asked = run.config.task_options
        recorded = get(run.config.task, **asked).options
        assert task_key_of(run.config.task, asked) == task_key_of(run.config.task, recorded), asked
        keys.add(task_key_of(run.config.task, asked))
    assert keys == {"addition", "parity", "summation", "polynomial", "lego", "sorting", "sorting+variant=multi-digit"}


@pytest.mark.parametrize(
    ("key", "label"),
    [
        ("sorting", "sorting (single-token)"),  # the default variant, which the key leaves out
        ("sorting+variant=multi-digit", "sorting (multi-digit)"),
        ("addition", "addition"),  # no variants: the task alone
        ("lego+shuffle=True", "lego (True)"),
    ],
)
def test_a_task_key_is_labelled_with_its_options_and_its_default_variant(key, label):
    from probe.studies.formats import task_label

    assert task_label(key) == label


def test_unfitted_names_the_scratchpad_scenarios_a_pe_has_not_fit_its_mean_iid_over_seeds_under_the_bar():
    """NoPE on addition's full format: IID 0.99 and 0.90 at seeds 0 and 1, mean 0.945 < 0.95: under, though
    one seed passes. Rotary there: 0.98 and 0.94, mean 0.96: not under, though one seed fails. Parity's C:
    NoPE 0.50 at seed 0 alone, under; Rotary 1.0. A run without a scratchpad is not counted, however low its
    IID."""
    iid = {("nope", 0): 0.99, ("nope", 1): 0.90, ("rotary", 0): 0.98, ("rotary", 1): 0.94}
    runs = [replace(report("addition", pe, seed, 0.0, "full"), iid_accuracy=x) for (pe, seed), x in iid.items()]
    runs += [replace(report("parity", "nope", 0, 0.0, "C"), iid_accuracy=0.5), report("parity", "rotary", 0, 0.0, "C")]
    runs += [replace(report("addition", pe, 0, 0.0), iid_accuracy=0.1) for pe in ("nope", "rotary")]
    assert unfitted(runs, 0.95) == {
        "nope": {"under": ["addition+scratchpad=full+train_length=8", "parity+scratchpad=C+train_length=8"], "of": 2},
        "rotary": {"under": [], "of": 2},
    }


def test_fitted_keeps_the_scratchpad_scenarios_where_every_pe_s_mean_iid_over_seeds_reaches_the_bar():
    """Addition's full format: NoPE 0.99 and 0.92 (mean 0.955), Rotary 1.0 at both: every PE at the bar, kept,
    though one of NoPE's seeds is under it. Parity's C: NoPE 0.96 and 0.93 (mean 0.945), under: left out, though
    one seed passes. Summation's C measures NoPE alone: Rotary has no run there, so it is not known to fit. A run
    without a scratchpad is never a scenario of the claim, whatever its IID."""
    iid = {
        ("addition", "nope", 0): 0.99,
        ("addition", "nope", 1): 0.92,
        ("parity", "nope", 0): 0.96,
        ("parity", "nope", 1): 0.93,
    }
    runs = [
        replace(report(task, pe, seed, 0.0, fmt), iid_accuracy=x)
        for (task, pe, seed), x in iid.items()
        for fmt in [{"addition": "full", "parity": "C"}[task]]
    ]
    runs += [
        report(task, "rotary", seed, 0.0, fmt)
        for task, fmt in (("addition", "full"), ("parity", "C"))
        for seed in (0, 1)
    ]
    runs += [report("summation", "nope", 0, 0.0, "C")]
    runs += [report("addition", pe, 0, 0.0) for pe in ("nope", "rotary")]  # IID 1.0 without a scratchpad
    assert fitted(runs, 0.95, ["nope", "rotary"]) == ["addition+scratchpad=full+train_length=8"]
    assert fitted(runs, 0.95, ["nope"]) == [
        "addition+scratchpad=full+train_length=8",
        "summation+scratchpad=C+train_length=8",
    ]
    assert fitted(runs, 0.9, ["nope", "rotary"]) == [
        "addition+scratchpad=full+train_length=8",
        "parity+scratchpad=C+train_length=8",
    ]


def test_guessing_names_the_scratchpad_scenarios_where_a_pe_s_mean_ood_is_no_better_than_a_constant_guess():
    """Parity's C, the guess at 0.52: NoPE 0.50 and 0.56 (mean 0.53), above; Rotary 0.52 at seed 0 alone, at the
    guess, so no better. Addition's full format, the guess at 0.001: NoPE 0.0, no better; Rotary 0.1, above. A
    run without a scratchpad is not counted, however it does."""
    ood = {("parity", "nope", 0): 0.50, ("parity", "nope", 1): 0.56, ("parity", "rotary", 0): 0.52}
    ood |= {("addition", "nope", 0): 0.0, ("addition", "rotary", 0): 0.1}
    fmt = {"parity": "C", "addition": "full"}
    runs = [report(task, pe, seed, x, fmt[task]) for (task, pe, seed), x in ood.items()]
    runs += [report("parity", pe, 0, 0.0) for pe in ("nope", "rotary")]
    chance = {"parity+scratchpad=C+train_length=8": 0.52, "addition+scratchpad=full+train_length=8": 0.001}
    assert guessing(runs, chance) == {
        "nope": {"under": ["addition+scratchpad=full+train_length=8"], "of": 2},
        "rotary": {"under": ["parity+scratchpad=C+train_length=8"], "of": 2},
    }


def test_a_mean_that_prints_as_the_guess_is_no_better_than_it():
    """Addition's C, a guess of 0: ALiBi right on one unseen example in 2,000 at seed 0 and none at seed 1 (a mean
    of 0.025%, printed 0.0) is no better; Rotary at 0.2% and 0.0% (0.1%) is better."""
    ood = {("alibi", 0): 0.0005, ("alibi", 1): 0.0, ("rotary", 0): 0.002, ("rotary", 1): 0.0}
    runs = [report("addition", pe, seed, x, "C") for (pe, seed), x in ood.items()]
    assert guessing(runs, {"addition+scratchpad=C+train_length=8": 0.0}) == {
        "alibi": {"under": ["addition+scratchpad=C+train_length=8"], "of": 1},
        "rotary": {"under": [], "of": 1},
    }
