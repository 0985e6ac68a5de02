"""bench/scratchpad_errors.py sorts a wrong scratchpad prediction by where it went wrong, on hand-written ones."""

from __future__ import annotations

import pytest
from helpers import bench_script

GOLD = (
    "Thinking step by step: comp 1 * 2 ** 1 = 1 * 2 # comp 3 * 2 ** 3 = 3 * 8 # comp - 2 * 2 ** 0 = - 2 * 1"
    " . Thus, The answer is 6."
)


@pytest.mark.parametrize(
    ("prediction", "where"),
    [
        (GOLD.replace("is 6", "is 0"), "steps right"),  # every step as the gold's, the conclusion missed
        (GOLD.replace("3 * 8", "3 * 6").replace("is 6", "is 0"), "a step wrong"),
        (GOLD.replace(" # ", "  #  ").replace("is 6.", "is 4 ."), "steps right"),  # spaced otherwise
        (GOLD.split(" . Thus,")[0] + " # comp 1 * 2 ** 1 = 1 * 2", "no end"),
        (GOLD.replace(" # comp - 2 * 2 ** 0 = - 2 * 1", ""), "a step wrong"),  # a step left out
    ],
)
def test_a_wrong_prediction_is_sorted_by_where_it_went_wrong(prediction, where):
    errors = bench_script("scratchpad_errors")
    assert errors.where_wrong(prediction, GOLD, "authors") == where
