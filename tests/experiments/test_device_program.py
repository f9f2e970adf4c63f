"""The device program's arithmetic, a stage's own deadline, streamed stage logs and the carried wheels' check.

All cheap and CPU-only: what would waste a 15-minute GPU window if it were wrong (a plan that does not fit,
a killed stage with an empty log, a wheel clash found minutes late) is checked here first.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from experiments.device_check import budget, program, stage_process, wheel_check
from experiments.device_check.stages import stream_command
from tests.support import REPO_ROOT


def test_the_plan_counts_every_cost_of_the_window_and_prints_what_falls_outside():
    device = budget.device_program()
    assert device.fits, device.problems()
    first = device.calls[0]
    assert first.stages == ("smoke", "gpu_check", "attention") and first.timeout_s <= budget.FIRST_CALL_LIMIT_S
    assert first.timeout_s == program.INSTALL_MARGIN_S + sum(program.stage(s).budget(False) + program.STAGE_OVERRUN_S
                                                          for s in first.stages)
    held = budget.START_UP_S + first.timeout_s + budget.IDLE_S + budget.CLOSE_S
    assert device.after_first_s == 900 - budget.FAILED_START_S - held >= budget.RERUN_RESERVE_S
    inside, outside = device.later()
    assert [c.stages for c in inside] == [("memory",)] and [c.stages for c in outside] == [("claims",)]
    text = "\n".join(budget.program_lines(device))
    assert text.endswith("FITS the 15 minutes with the rerun reserve.")
    for cost in (f"a failed H100 start before the H200 fallback: {budget.FAILED_START_S} s",
                 f"start-up {budget.START_UP_S} + timeout_s {first.timeout_s} + idle {budget.IDLE_S} + close "
                 f"{budget.CLOSE_S}", f"ended at most {program.STAGE_OVERRUN_S} s past it",
                 "OUTSIDE THE WINDOW: call 3 (claims)"):
        assert cost in text, cost
    done = subprocess.run([sys.executable, "-m", "experiments.device_check", "program"], cwd=REPO_ROOT,
                          capture_output=True, text=True)
    assert done.returncode == 0 and "FITS" in done.stdout and "compiles x" in done.stdout


def test_a_plan_without_the_reserve_is_refused_by_its_arithmetic():
    everything = budget.device_program((program.STAGE_NAMES,))  # all stages in one call: over 7 minutes, no reserve
    problems = everything.problems()
    assert not everything.fits and any("over its cap" in p for p in problems)
    assert any("under the rerun reserve" in p for p in problems)
    assert budget.program_lines(everything)[-1].strip().startswith("DOES NOT FIT")


def test_the_compile_time_call_1_measured_sets_the_plan_and_the_later_calls(tmp_path):
    slow = budget.device_program(compile_s=40)
    assert slow.calls[0].timeout_s == budget.device_program().calls[0].timeout_s + 9 * 20  # 9 compiles, 20 s more each
    assert not slow.fits
    results = tmp_path / "device_check.json"
    results.write_text(json.dumps({"stages": {"gpu_check": {"result": {"compile_s_per_shape": 12.5}}}}))
    done = subprocess.run([sys.executable, "-m", "experiments.device_check", "program", "--measured", str(results)],
                          cwd=REPO_ROOT, capture_output=True, text=True)
    assert done.returncode == 0 and "compiles at 12.5 s per shape (measured" in done.stdout
    calls = [json.loads(line.split(". ", 1)[1]) for line in done.stdout.splitlines() if line[:3] in ("1. ", "2. ")]
    assert calls[1]["command"].endswith("run --stages memory --compile-s 12.5 2>&1")
    assert calls[0]["timeout_s"] == budget.device_program(compile_s=12.5).calls[0].timeout_s
    results.write_text(json.dumps({"stages": {"gpu_check": {"ok": False}}}))
    done = subprocess.run([sys.executable, "-m", "experiments.device_check", "program", "--measured", str(results)],
                          cwd=REPO_ROOT, capture_output=True, text=True)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and str(results) in done.stderr


def test_a_run_counts_its_stage_budgets_at_its_compile_time():
    config = program.DeviceCheckConfig(stages=["gpu_check"], compile_s_per_shape=30)
    assert config.budget("gpu_check") == program.stage("gpu_check").run_s + 7 * 30
    assert program.DeviceCheckConfig(toy=True).budget("gpu_check") == program.stage("gpu_check").toy_budget_s
    with pytest.raises(ValueError, match="compile_s_per_shape must be > 0"):
        program.DeviceCheckConfig(compile_s_per_shape=0)


def test_every_stage_is_one_registration():
    for spec in program.STAGES:
        assert callable(stage_process.stage_function(spec.name)), spec.entry
    assert [spec.call for spec in program.STAGES] == sorted(spec.call for spec in program.STAGES)


def test_a_stage_stops_itself_inside_its_budget_and_keeps_its_partial_result(tmp_path, monkeypatch):
    def slow_stage(config):
        from experiments.device_check.stage_io import save_partial

        save_partial(Path(config.work_dir), "smoke", {"done": 1})
        try:
            time.sleep(30)
        except Exception:  # a stage's own error handling must not swallow the deadline
            return {"ok": True}
        return {"ok": True}

    monkeypatch.setattr(stage_process, "stage_function", lambda name: slow_stage)
    monkeypatch.setattr(stage_process, "STOP_MARGIN_S", 0)
    config = program.DeviceCheckConfig(toy=True, stages=["smoke"], out_dir=str(tmp_path / "out"),
                                    work_dir=str(tmp_path / "work"))
    config_path = tmp_path / "config.json"
    from experiments.device_check.stage_io import write_stage_config

    write_stage_config(config, config_path)
    start = time.time()
    code = stage_process.run_stage_process("smoke", str(config_path), str(tmp_path / "r.json"), "2")
    record = json.loads((tmp_path / "r.json").read_text())
    assert code == 1 and time.time() - start < 10
    assert record["error"] == "stopped itself at 2 s, inside its budget" and record["result"] == {"done": 1}


def test_a_streamed_command_prints_as_it_goes_and_is_killed_at_its_timeout(tmp_path, capsys):
    script = "import time\nprint('first', flush=True)\ntime.sleep(30)\nprint('never')"
    code, output = stream_command([sys.executable, "-c", script], tmp_path, timeout_s=2)
    assert code is None and output == "first\n" and capsys.readouterr().out == "first\n"
    code, output = stream_command([sys.executable, "-c", "print('ok')"], tmp_path, timeout_s=30)
    assert (code, output) == (0, "ok\n")


def test_carried_wheels_that_this_environment_satisfies_pass(tmp_path):
    names = ("megatron-core", "nltk", "xxhash")
    from importlib.metadata import version

    wheels = [tmp_path / f"{name.replace('-', '_')}-{version(name)}-py3-none-any.whl" for name in names]
    assert wheel_check.clashes(wheels) == []


def test_a_wheel_clash_fails_in_one_line_naming_package_and_versions(tmp_path, monkeypatch, capsys):
    from importlib.metadata import version

    real = wheel_check._installed
    monkeypatch.setattr(wheel_check, "_installed", lambda name: "0.1" if name == "packaging" else real(name))
    wheel = tmp_path / f"megatron_core-{version('megatron-core')}-py3-none-any.whl"
    assert wheel_check.main([str(wheel)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("error: carried wheels: megatron-core ")
    assert "needs packaging>=24.2; the device has packaging 0.1" in err
    shadowed = tmp_path / "nltk-0.0.1-py3-none-any.whl"
    assert wheel_check.clashes([shadowed]) == [f"carried nltk 0.0.1, but nltk {version('nltk')} is what imports"]



def test_the_gpu_check_stage_budgets_a_compile_for_every_shape_it_makes():
    from experiments.device_check.stages import DEVICE_GPU_CHECK
    from megatron_crossbert.benchmarking.gpu_check import GPU_CHECK_ROWS
    from megatron_crossbert.benchmarking.throughput import ThroughputOptions, select_cases
    from megatron_crossbert.models.flex_compile import union_flex_shapes

    cases = [case for size in DEVICE_GPU_CHECK["sizes"]
             for case in select_cases(ThroughputOptions(size=size, precision="bf16", only=list(GPU_CHECK_ROWS)))]
    assert program.stage("gpu_check").compiles >= len(union_flex_shapes(case.run_cfg for case in cases)) == 7


def test_the_smoke_stage_runs_sdpa_and_compiles_nothing(monkeypatch):
    import torch

    from experiments.device_check.stages import smoke_cases
    from megatron_crossbert.models.attention_setup import attention_backend

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # what the backend resolves to on a GPU
    assert {attention_backend(case.run_cfg, training=True)[0] for case in smoke_cases("bf16")} == {"sdpa"}
    assert program.stage("smoke").compiles == 0


def _alive(pid: int) -> bool:
    """A live process (a zombie, dead but not yet reaped by its parent, counts as ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def test_a_streamed_command_left_by_the_stages_deadline_is_killed_with_it(tmp_path, capsys):
    import signal

    def deadline(signum, frame):
        raise stage_process.StageOverBudget

    script = "import os, time\nprint(os.getpid(), flush=True)\ntime.sleep(60)"
    previous = signal.signal(signal.SIGALRM, deadline)
    signal.alarm(2)
    try:
        with pytest.raises(stage_process.StageOverBudget):
            stream_command([sys.executable, "-c", script], tmp_path, timeout_s=120)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert not _alive(int(capsys.readouterr().out.split()[0]))


def test_the_driver_ends_what_a_stage_left_running_in_its_process_group():
    from experiments.device_check.runner import end_group, exited

    leader = subprocess.Popen(["bash", "-c", "sleep 60 & echo $!"], stdout=subprocess.PIPE, text=True,
                              start_new_session=True)
    child = int(leader.stdout.readline())
    assert exited(leader, 10) and leader.returncode is None  # exited, not reaped: its group id stays its own
    assert _alive(child)  # the stage exited; its child still runs
    end_group(leader)
    assert leader.returncode == 0
    deadline = time.time() + 10
    while _alive(child) and time.time() < deadline:
        time.sleep(0.05)
    assert not _alive(child)


def test_the_attention_stage_budgets_a_compile_for_each_kernel_shape():
    from experiments.device_check.attention_stage import kernel_rows

    shapes = {(s["batch"], s["heads"], s["seq_length"], s["head_dim"]) for _, s, _ in kernel_rows(toy=False)}
    assert program.stage("attention").compiles >= len(shapes) == 2
    assert (32, 12, 512, 64) in shapes  # BERT-base: flex against the dense-mask SDPA classic configs run


def test_the_compile_time_is_the_first_warm_up_round_beyond_a_timed_step_per_compiled_shape():
    from experiments.device_check.stages import compile_s_per_shape
    from megatron_crossbert.benchmarking.throughput import ThroughputOptions, compile_seconds, select_cases

    times = {"a": {"warmup_wall": [30.5, 0.6], "wall": [0.5, 0.7, 0.5]}, "b": {"warmup_wall": [12.2], "wall": [0.2]},
             "c": {"warmup_wall": [0.1], "wall": [0.3]}}  # c compiled nothing new: never negative
    assert compile_seconds(times) == pytest.approx(30.0 + 12.0)
    assert compile_seconds({"a": {"warmup_wall": [], "wall": [0.5]}}) == 0
    cases = select_cases(ThroughputOptions(size="base", precision="bf16", only=["crossbert r=0.5 compl"]))
    # the baselines' [32, 12, 512, 512, 64] and CrossBERT r=0.5's views (256 of 512 tokens): 2 shapes
    assert compile_s_per_shape({"meta": {"compile_s": 42.0}}, cases) == 21.0
    assert compile_s_per_shape({"meta": {"compile_s": 0.0}}, cases) is None
