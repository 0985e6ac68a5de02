"""Every JSON probe writes, to a file or to stdout under --json, is strict JSON: Python's json writes a NaN or
an infinity as a bare token (``NaN``) that strict parsers (JavaScript's JSON.parse, Go's) refuse; probe writes null."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from probe.analysis.eval_report import Bucket, EvalReport
from probe.atomic import atomic_write_json, strict_json
from probe.commands.common import print_json


def _strictly(text: str):
    """json.loads refusing NaN, Infinity and -Infinity, as a strict parser does."""

    def refuse(token: str):
        raise ValueError(f"not JSON: {token}")

    return json.loads(text, parse_constant=refuse)


MESSY = {
    "nan": float("nan"),
    "inf": [float("inf"), -float("inf"), 0.5],
    "numpy": np.float32(0.25),
    "numpy_nan": np.float64("nan"),
    "tensor": torch.tensor(0.5),
    "nested": ({"deep": float("nan")}, 3, True, None, "NaN"),
}
CLEAN = {
    "nan": None,
    "inf": [None, None, 0.5],
    "numpy": 0.25,
    "numpy_nan": None,
    "tensor": 0.5,
    "nested": [{"deep": None}, 3, True, None, "NaN"],
}


def test_a_file_and_stdout_hold_null_where_a_number_is_not_finite(tmp_path, capsys):
    atomic_write_json(tmp_path / "out.json", MESSY)
    assert _strictly((tmp_path / "out.json").read_text()) == CLEAN
    print_json(MESSY)
    assert _strictly(capsys.readouterr().out) == CLEAN
    assert strict_json(MESSY) == CLEAN


def test_an_evaluation_with_no_seen_example_reads_back_as_it_was_written(tmp_path):
    """--valid 0 and a test draw of unseen lengths only: IID is NaN in memory, null in eval.json, NaN again."""
    from probe.analysis.eval_report import read_eval

    report = EvalReport(
        label="copy/nope/seed0",
        path=str(tmp_path),
        pe_options_at_inference={},
        task="copy",
        task_folder="copy",
        task_options={},
        pe="nope",
        seed=0,
        n_examples=2,
        iid_accuracy=float("nan"),
        ood_accuracy=0.5,
        buckets=[Bucket(length=30, n=2, correct=1, accuracy=0.5, seen=False)],
    )
    report.write(tmp_path)
    assert _strictly((tmp_path / "eval.json").read_text())["iid_accuracy"] is None
    again = read_eval(tmp_path)
    assert again is not None and np.isnan(again.iid_accuracy) and again.ood_accuracy == 0.5


def test_what_is_not_a_number_is_still_refused():
    with pytest.raises(TypeError):
        strict_json({"path": object()})


def test_a_theorem_check_that_turns_nan_prints_null_and_fails(monkeypatch, capsys):
    """A construction that overflows in a dtype has a NaN error: the claim fails, and --json stays strict."""
    from probe.cli import main
    from probe.theorems import checks

    def overflowing(max_length, dtype, seed, progress=None):
        return [checks.ClaimResult("t1", "a claim", "hook", str(dtype), float("nan"), 1e-6, max_length, 1)]

    monkeypatch.setattr(checks, "verify_theorems", overflowing)
    assert main(["theorem", "--max-length", "4", "--dtype", "float32", "--json"]) == 1
    printed = _strictly(capsys.readouterr().out)
    assert [(c["max_error"], c["passed"]) for c in printed["claims"]] == [(None, False)]
