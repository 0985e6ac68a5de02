"""The GPU kit's pieces that a CPU can check without the device or the network (bench/gpu/): the
result file stays valid JSON whatever kills the process, the planner fits the runs it should, and
SIGTERM leaves the record written. The whole kit is rehearsed by bench/gpu/rehearse, which needs the
registry. bench/gpu/detach is followed across two calls with a stand-in for bench/gpu/run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

KIT = Path(__file__).resolve().parents[1] / "bench" / "gpu"
sys.path.insert(0, str(KIT))

from planner import RunCost, candidates, measured_pes, plan  # noqa: E402
from record import Record, write_json_atomic  # noqa: E402

# a whole paper-scale run at the target: 40,000 steps at 300 member-steps/s is 133.3 s of steps,
# 20 evaluations of 1 s, 5 s of scoring, 10 s to start: 168.3 s
TARGET = RunCost(steps=40_000, member_steps_per_s=300, evaluations=20, evaluation_s=1.0, scoring_s=5.0, startup_s=10.0)


def test_a_run_costs_its_steps_evaluations_scoring_and_start():
    assert TARGET.seconds() == pytest.approx(40_000 / 300 + 20 + 5 + 10)


@pytest.mark.parametrize(
    "seconds_left, margin, slack, fits",
    [
        (400, 30, 1.0, ["nope", "t5"]),  # 370 // 168.3 = 2
        (400, 30, 1.1, ["nope"]),  # 370 // 185.2 = 1: the slack costs a run
        (500, 30, 1.1, ["nope", "t5"]),  # 470 // 185.2 = 2
        (198.4, 30, 1.0, ["nope"]),  # 168.4 // 168.3 = 1: just fits
        (198.2, 30, 1.0, []),  # 168.2 // 168.3 = 0: just misses
        (25, 30, 1.0, []),  # less left than the margin
        (10_000, 30, 1.0, ["nope", "t5", "alibi"]),  # never more runs than PEs asked for
    ],
)
def test_the_planner_fits_whole_runs_in_the_time_left(seconds_left, margin, slack, fits):
    assert plan(["nope", "t5", "alibi"], TARGET, seconds_left, margin, slack) == fits


def test_at_the_eager_rate_measured_before_no_whole_run_fits_one_command():
    eager = RunCost(40_000, 66.7, 20, 1.0, 5.0, 10.0)  # 599.7 + 35 s: more than the 530 s a command has
    assert plan(["nope"], eager, 530, 30) == []
    assert plan(["nope"], RunCost(40_000, 0.0, 20, 1.0, 5.0, 10.0), 10_000, 30) == []  # no rate measured


def test_later_chances_measure_the_pes_earlier_records_lack():
    settings = {"preset": "base", "seed": 0, "steps": 40_000}
    records = [
        {"settings": settings, "runs": {"nope": {"test": {"ood_accuracy": 0.8}}, "t5": {"progress": {"step": 9}}}},
        {"settings": {**settings, "seed": 1}, "runs": {"alibi": {"test": {}}}},  # another seed
        {"settings": {**settings, "steps": 300}, "runs": {"rotary": {"test": {}}}},  # another length
        {
            "settings": {**settings, "precision": "float32"},
            "runs": {"ape": {"test": {"ood_accuracy": 0.1}}},
        },  # another precision
    ]
    done = measured_pes(records, "base", 0, 40_000)
    assert done == {"nope"}  # t5 was stopped before its test scoring; a record naming no precision ran auto
    assert measured_pes(records, "base", 0, 40_000, "float32") == {"ape"}
    assert candidates(None, done) == ["t5", "alibi", "rotary", "ape"]
    assert candidates(["ape", "nope"], done) == ["ape", "nope"]  # --pes is taken as given


def test_the_record_is_written_whole_to_every_path(tmp_path):
    paths = [tmp_path / "results" / "kit_cpu.json", tmp_path / "out" / "kit_cpu.json"]
    record = Record(paths, {"benchmark": "gpu_kit"})
    record.put("runs", "nope", "test", value={"ood_accuracy": 0.797})
    for path in paths:
        assert json.loads(path.read_text()) == {
            "benchmark": "gpu_kit",
            "runs": {"nope": {"test": {"ood_accuracy": 0.797}}},
        }
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == ["kit_cpu.json"]  # no temporary left


def test_a_failed_write_keeps_the_last_document_and_leaves_no_temporary(tmp_path):
    path = tmp_path / "kit_cpu.json"
    write_json_atomic(path, {"step": 1})
    looped = {"step": 2}
    looped["self"] = looped  # fails mid-document: json cannot write a loop
    with pytest.raises(ValueError):
        write_json_atomic(path, looped)
    assert json.loads(path.read_text()) == {"step": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["kit_cpu.json"]


# A process that rewrites its record as fast as it can, as the kit does after each measurement, until
# a signal stops it: what it leaves must parse, hold the last update it finished, and name the signal.
WRITER = textwrap.dedent(
    """
    import sys, time
    sys.path.insert(0, {kit!r})
    from record import Record, Stopped, stop_on_signals
    record = Record([{path!r}], {{"phase": "writing", "updates": 0, "payload": "x" * 200_000}})
    stop_on_signals(record, time.time())
    try:
        while True:
            record.put("updates", value=record.data["updates"] + 1)
            if record.data["updates"] == 3:
                print("writing", flush=True)
    except Stopped as stop:
        sys.exit(128 + stop.signum)
    """
)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_leaves_valid_json_naming_it(tmp_path, signum):
    path = tmp_path / "kit_cpu.json"
    script = WRITER.format(kit=str(KIT), path=str(path))
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "writing\n"  # mid-stream of writes, not before the first
    child.send_signal(signum)
    assert child.wait(timeout=60) == 128 + signum
    record = json.loads(path.read_text())
    assert record["updates"] >= 3
    assert record["stopped"]["signal"] == signal.Signals(signum).name
    assert record["stopped"]["phase"] == "writing"
    assert [p.name for p in tmp_path.iterdir()] == ["kit_cpu.json"]


def test_sigkill_mid_write_leaves_the_last_whole_document(tmp_path):
    path = tmp_path / "kit_cpu.json"
    script = WRITER.format(kit=str(KIT), path=str(path))
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert child.stdout.readline() == "writing\n"
    time.sleep(0.2)  # some writes in: the kill lands wherever one of them is
    os.kill(child.pid, signal.SIGKILL)
    child.wait(timeout=60)
    assert json.loads(path.read_text())["updates"] >= 3  # a temporary may be left; the record is whole


def _slice(rate: float, captured: bool) -> dict:
    """A rate slice's part as kit.py merges it: one evaluation of 1 s, 1,000 validation and 3,000 test
    examples, a second to start."""
    return {
        "build_s": 2.0,
        "_start_s": 1.0,
        "result": {
            "member_steps_per_s": rate,
            "members": 2,
            "first_logged_step_s": 4.0,
            "engines": {pe: {"captured": captured} for pe in ("nope", "t5")},
        },
        "evaluation": {"seconds": 1.0, "valid_examples": 1000, "test_examples": 3000},
    }


def test_whole_runs_take_the_captured_engine_only_where_every_member_captured_and_it_is_faster():
    from kit import choose, parse

    args = parse(["--steps", "40000"])
    engine, costs = choose({"captured": _slice(300, True), "eager": _slice(66.7, False)}, args)
    assert engine == "captured"
    # 40,000 / 300 s of steps, 20 evaluations of 1 s, scoring (2 + 4,000 / 1,000) x 1 s, a start of
    # 1 + 2 / 2 + 4 s
    assert costs["captured"].seconds() == pytest.approx(40_000 / 300 + 20 + 6 + 6)
    assert choose({"captured": _slice(300, False), "eager": _slice(66.7, False)}, args)[0] == "eager"
    assert choose({"captured": _slice(50, True), "eager": _slice(66.7, False)}, args)[0] == "eager"
    assert choose({"eager": {"error": "RuntimeError: ..."}}, args) == (None, {})


def test_a_detached_kit_is_followed_across_calls_and_each_call_gets_its_files(tmp_path):
    """bench/gpu/detach with a stand-in for bench/gpu/run: the first call starts it and returns while
    it runs, a second call with no flags follows the same kit to its end, printing only the lines
    the first did not, and each call's $OUT gets the record, the log and, at the end, the exit status."""
    bench = tmp_path / "gpu"
    bench.mkdir()
    (bench / "detach").write_bytes((KIT / "detach").read_bytes())
    release = tmp_path / "release"
    (bench / "run").write_text(
        textwrap.dedent(f"""\
            #!/usr/bin/env bash
            exec > >(tee -a "$OUT/gpu_kit.log") 2>&1
            echo "kit began with $*"
            echo '{{"phase": "run"}}' > "$OUT/gpu_kit_x_cuda.json"
            until [[ -e {release} ]]; do sleep 0.1; done
            echo "kit ended"
            echo '{{"phase": "done"}}' > "$OUT/gpu_kit_x_cuda.json"
            exit 3
            """)
    )
    (bench / "run").chmod(0o755)

    def call(*flags: str, wait_s: int, out: Path) -> subprocess.CompletedProcess:
        out.mkdir()
        env = {**os.environ, "KIT_HOME": str(tmp_path / "home"), "DETACH_WAIT_S": str(wait_s), "OUT": str(out)}
        return subprocess.run(["bash", str(bench / "detach"), *flags], env=env, capture_output=True, text=True)

    nothing = call(wait_s=1, out=tmp_path / "out0")
    assert nothing.returncode == 2 and "no kit started" in nothing.stderr

    first = call("--device", "cuda", wait_s=3, out=tmp_path / "out1")
    assert first.returncode == 0, first.stderr
    assert "kit began with --device cuda" in first.stdout and "still running" in first.stdout
    assert json.loads((tmp_path / "out1" / "gpu_kit_x_cuda.json").read_text()) == {"phase": "run"}
    assert not (tmp_path / "out1" / "exit_status").exists()

    release.touch()
    second = call(wait_s=30, out=tmp_path / "out2")
    assert second.returncode == 0, second.stderr
    assert "kit ended" in second.stdout and "kit began" not in second.stdout
    assert "exit status 3" in second.stdout
    assert (tmp_path / "out2" / "exit_status").read_text().strip() == "3"
    assert json.loads((tmp_path / "out2" / "gpu_kit_x_cuda.json").read_text()) == {"phase": "done"}
    assert "kit began" in (tmp_path / "out2" / "gpu_kit.log").read_text()  # the whole log comes back
