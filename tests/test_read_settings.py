"""One :class:`probe.subjects.settings.ReadSettings` for how every measure reads its inputs: each entry point takes
it, a setting a measure does not read is refused in one line (never ignored), extrapolation's settings are
such settings with its own knobs beside."""

from __future__ import annotations

import inspect

import pytest
import torch

import probe
from probe.analysis.compare import compare_report, compare_runs
from probe.analysis.distances import attended_distance_report
from probe.analysis.evaluation import evaluate_run
from probe.analysis.perplexity import perplexity_report
from probe.analysis.positions import positions_report
from probe.errors import ProbeError
from probe.extrapolation.extrapolate import extrapolate
from probe.extrapolation.plan import MULTIPLES, Settings
from probe.runs.folders import Run
from probe.subjects.settings import ReadSettings

MEASURES = (
    compare_runs,
    compare_report,
    attended_distance_report,
    positions_report,
    perplexity_report,
    extrapolate,
    evaluate_run,
)


@pytest.mark.parametrize("measure", MEASURES, ids=lambda m: m.__name__)
def test_every_measure_takes_one_settings_and_none_of_its_fields_apart(measure):
    parameters = inspect.signature(measure).parameters
    assert parameters["settings"].default is None
    shared = {"options", "n_per_bucket", "lengths", "multiples", "seed", "batch_size", "device", "dtype"}
    assert not shared & set(parameters), f"{measure.__name__} repeats {shared & set(parameters)} beside settings"


def test_the_settings_hold_torch_types_and_refuse_a_bad_dtype():
    settings = ReadSettings(device="cpu", dtype="bfloat16")
    assert settings.device == torch.device("cpu") and settings.dtype is torch.bfloat16
    with pytest.raises(ProbeError, match="unknown dtype 'half'"):
        ReadSettings(dtype="half")
    assert probe.ReadSettings is ReadSettings


@pytest.mark.parametrize(
    ("measure", "settings", "field"),
    [
        (positions_report, ReadSettings(lengths="seen"), "lengths"),
        (positions_report, ReadSettings(pe_options={"factor": 2}), "pe_options"),
        (attended_distance_report, ReadSettings(pe_options={"factor": 2}), "pe_options"),
        (perplexity_report, ReadSettings(n_per_bucket=3), "n_per_bucket"),
        (perplexity_report, ReadSettings(multiples=(1.0,)), "multiples"),
    ],
)
def test_a_setting_a_measure_does_not_read_is_refused_before_anything_is_looked_for(measure, settings, field):
    with pytest.raises(ProbeError, match=f"does not read {field}"):
        measure(["no-such-run"], settings)


@pytest.mark.parametrize(
    "settings",
    [ReadSettings(seed=1), ReadSettings(n_per_bucket=3), ReadSettings(dtype="bfloat16"), ReadSettings(lengths="seen")],
    ids=["seed", "n_per_bucket", "dtype", "lengths"],
)
def test_evaluation_refuses_what_its_fixed_examples_do_not_read(settings, tmp_path):
    """Exact match reads the run's own task at seed 0 and the weights' dtype: another seed or dtype asked for
    would be a number that is not what it says."""
    with pytest.raises(ProbeError, match="probe eval does not read"):
        evaluate_run(Run(tmp_path / "no-such-run", {}), settings)


def test_extrapolation_settings_are_read_settings_with_its_own_defaults_and_knobs():
    settings = Settings(n_valid=5)
    assert isinstance(settings, ReadSettings)
    assert settings.multiples == MULTIPLES and settings.batch_size == 128 and settings.n_valid == 5
    with pytest.raises(ProbeError, match="does not read dtype"):
        Settings(dtype="bfloat16")
