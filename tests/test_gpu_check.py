"""The prepared GPU check: its options, its report, and the whole check on the CPU (slow)."""

from __future__ import annotations

import datetime
import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

import gpu_check
from gpu_check import CHECKS, CheckOptions, build_report, run_checks, write_report
from gpu_check.steps import _comparison_prompts, _placement_in

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"


def _all_but(step: str) -> tuple[str, ...]:
    """Every step of the check but ``step``: what ``--skip`` takes to run it alone."""
    return tuple(name for name in CHECKS if name != step)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("device", "tpu", r"device: must be one of \['cuda', 'cpu'\], got 'tpu'"),
        ("tasks", 1, "tasks: training takes two trajectories"),
        ("updates", 0, "updates: must be a positive integer"),
        ("max_new_tokens", True, "max_new_tokens: must be a positive integer"),
        ("skip", ("train",), r"skip\[0\]: must be one of \[.generation."),
        ("budget_s", 0, "budget_s: must be > 0, got 0"),
        ("scale_response_tokens", 0, "scale_response_tokens: must be a positive integer"),
        ("sampler_sweep_rows", (8, 0), r"sampler_sweep_rows\[1\]: must be a positive integer"),
    ],
)
def test_bad_options_name_the_field(field, value, message):
    with pytest.raises(ValueError, match=message):
        CheckOptions(**{field: value})


def test_the_command_line_refuses_a_bad_value_in_one_line(capsys):
    with pytest.raises(SystemExit) as exit_:
        gpu_check.parse_args(["--tasks", "1"])
    assert exit_.value.code == 2
    assert "tasks: training takes two trajectories" in capsys.readouterr().err


def test_the_report_goes_under_08_reporting_by_default(tmp_path):
    options, out = gpu_check.parse_args(["--device", "cpu", "--project", str(tmp_path)])
    assert out == tmp_path / "data" / "08_reporting" / "gpu_check" / "cpu.json"
    assert options.policy_path == tmp_path / "reference" / "textcraft-initial"
    # the scale step: Qwen3-4B's published shape on a GPU, the policy's own on the CPU
    assert options.scale_shape_path == options.policy_path
    on_gpu, _ = gpu_check.parse_args(["--project", str(tmp_path), "--scale-words", "7"])
    assert on_gpu.scale_shape_path == tmp_path / "reference" / "shapes" / "Qwen3-4B"
    assert on_gpu.scale_prompt_words == 7
    assert on_gpu.sampler_sweep_rows == (8, 16, 32)  # the sampler step's sweep by default
    # the zero2_8b step: Qwen3-8B's published shape on a GPU, the policy's own on the CPU
    assert options.zero2_shape_path == options.policy_path
    assert on_gpu.zero2_shape_path == tmp_path / "reference" / "shapes" / "Qwen3-8B"
    assert (on_gpu.zero2_layers, on_gpu.zero2_response_tokens) == (4, 128)
    swept, _ = gpu_check.parse_args(["--sampler-sweep-rows", "4", "12", "--sampler-rows", "4"])
    assert swept.sampler_sweep_rows == (4, 12) and swept.sampler_rows == 4
    assert gpu_check.parse_args(["--sampler-sweep-rows"])[0].sampler_sweep_rows == ()


def test_where_the_trainer_ran_is_read_from_its_log():
    log = (
        "2026-01-01 10:00:00,000 [rank 0] INFO resail_pipeline.training.engine: "
        "rank 0 of 1 on cuda:0, nccl process group\n"
    )
    assert _placement_in(log) == ("cuda:0", "nccl")
    assert _placement_in("rank 0 of 1 on cpu, no process group") == ("cpu", "none")
    assert _placement_in("engine single x 1") is None


def test_compared_prompts_are_each_episodes_first_and_last():
    steps = pd.DataFrame(
        {
            "traj_id": ["b", "a", "a", "a", "b"],
            "t": [1, 2, 0, 1, 0],
            "prompt": ["b1", "a2", "a0", "a1", "b0"],
        }
    )
    assert _comparison_prompts(steps, 10) == ["a0", "a2", "b0", "b1"]
    assert _comparison_prompts(steps, 3) == ["a0", "a2", "b0"]


def test_skipped_steps_are_reported_with_their_reason(tmp_path, monkeypatch):
    monkeypatch.setitem(gpu_check.REQUIRES, "generation", ("no_such_module_here",))
    options = CheckOptions(device="cpu", project=ROOT, skip=CHECKS[1:])
    seen = []
    results = run_checks(options, tmp_path, lambda done, running: seen.append(running))
    assert results["generation"].status == "skipped"
    assert "no_such_module_here" in results["generation"].reason
    assert all(results[name].reason == "--skip" for name in CHECKS[1:])
    assert seen == [None] * len(CHECKS)  # no step ran
    report = build_report(
        options,
        results,
        started=datetime.datetime.now(datetime.timezone.utc),
        seconds=0.5,
        work=tmp_path,
    )
    assert report["passed"] and report["complete"] and report["peak_gpu_memory_mib"] is None
    assert report["versions"]["torch"] and report["machine"]
    path = write_report(tmp_path / "out" / "cpu.json", report)
    assert json.loads(path.read_text())["checks"]["generation"]["status"] == "skipped"


def test_the_script_refuses_a_missing_wheels_folder(tmp_path):
    done = subprocess.run(
        ["bash", str(SCRIPT), "--wheels", str(tmp_path / "none"), "--device", "cpu"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "--wheels: " in done.stderr and "is not a folder" in done.stderr


def test_a_step_that_errs_keeps_what_it_measured_before(tmp_path):
    """Prompts longer than the policy's positions: the scale step fails at decoding, with the
    error and the figures of the policy it built."""
    options = CheckOptions(
        device="cpu",
        project=ROOT,
        skip=_all_but("scale"),
        scale_prompt_words=5000,
        scale_response_tokens=8,
    )
    scale = run_checks(options, tmp_path)["scale"]
    assert scale.status == "failed" and "exceed the model's 4096 positions" in scale.reason
    assert scale.details["parameters"] == 3_616_768 and "decoding" not in scale.details


def test_a_check_stopped_by_sigterm_keeps_what_the_running_step_measured(tmp_path):
    """The scale step stopped once its policy is built: recorded as failed, with its figures."""
    out = tmp_path / "cpu.json"
    command = ["bash", str(SCRIPT), "--device", "cpu", "--out", str(out), "--work", str(tmp_path)]
    command += [f"--skip={name}" for name in _all_but("scale")]
    command += ["--scale-words", "300", "--scale-response", "400"]
    process = subprocess.Popen(
        command,
        env={**os.environ, "PYTHON": sys.executable},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    inputs = tmp_path / "cpu" / "scale" / "inputs"
    deadline = time.monotonic() + 300
    while not inputs.is_dir() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.1)
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=60) == 128 + signal.SIGTERM
    report = json.loads(out.read_text())
    scale = report["checks"]["scale"]
    assert not report["passed"] and scale["status"] == "failed"
    assert scale["reason"] == "stopped by SIGTERM"
    assert scale["details"]["parameters"] == 3_616_768  # the shipped policy's shape on the CPU
    assert "training" not in scale["details"]  # stopped before it trained


@pytest.mark.slow
def test_the_sampler_step_on_the_cpu(tmp_path):
    """The sampler step alone, small: each mode decodes every row to the end (the static step of
    ``cuda_graphs`` without a graph on the CPU), its greedy tokens equal eager's at the scale
    shape and on the shipped policy, and the sweep reports each row count."""
    options = CheckOptions(
        device="cpu",
        project=ROOT,
        skip=_all_but("sampler"),
        scale_prompt_words=60,
        sampler_rows=3,
        sampler_tokens=6,
        sampler_sweep_rows=(1, 4),
        sampler_sweep_tokens=4,
        sampler_greedy_tokens=8,
        prompts=3,
        max_new_tokens=16,
    )
    sampler = run_checks(options, tmp_path)["sampler"]
    assert sampler.status == "passed", sampler.reason
    details = sampler.details
    for label in ("eager", "compiled", "graphs", "compiled_graphs"):
        assert details[label]["shortest_response"] == 6 and details[label]["tokens_per_s"] > 0
    assert details["graphs"]["graph_captures"] == 0  # no graph on the CPU
    assert details["graphs_speedup"] > 0 and isinstance(details["graphs_target_met"], bool)
    assert (
        details["greedy"]["rows_equal"] == "3/3" and details["greedy"]["first_difference"] is None
    )
    shipped = details["shipped_greedy"]
    assert shipped["prompts"] == "words" and shipped["float32"]["rows_equal"] == "3/3"
    assert "bfloat16" not in shipped  # the trainer's GPU precision, compared on a GPU only
    sweep = details["rows_sweep"]
    assert [entry["rows"] for entry in sweep] == [1, 4]
    assert all(e["eager_tokens_per_s"] > 0 and e["graphs_tokens_per_s"] > 0 for e in sweep)


@pytest.mark.slow
def test_the_zero2_step_on_the_cpu(tmp_path):
    """The zero2_8b step alone, at the shipped policy's shape cut to 2 layers: two ``oel_resail``
    updates sampling in the loop, under DeepSpeed ZeRO-2 in one gloo rank under torchrun, each
    update's phases timed by the rank beside the plan's terms for them (the CPU's allocator is
    not counted: no peaks)."""
    pytest.importorskip("deepspeed")
    options = CheckOptions(
        device="cpu",
        project=ROOT,
        skip=_all_but("zero2_8b"),
        zero2_layers=2,
        zero2_prompt_words=40,
        zero2_response_tokens=8,
    )
    step = run_checks(options, tmp_path)["zero2_8b"]
    assert step.status == "passed", step.reason
    details = step.details
    assert details["layers"] == 2 and details["parameters"] == 1_911_552
    assert details["engine"] == "deepspeed ZeRO-2 x 1, fp32" and details["micro_batch_steps"] == 2
    assert (details["device"], details["process_group"]) == ("cpu", "gloo")
    assert details["updates"] == 2 and len(details["losses"]) == 2
    assert 0 < details["response_tokens"][1] <= 8
    for phase in ("sampling", "training", "step"):
        entry = details["phases"][phase]
        assert len(entry["seconds"]) == 2 and all(s > 0 for s in entry["seconds"])
        assert entry["planned_gib"] > 0 and "peak_gib" not in entry
    assert "sampling cache" in details["phases"]["sampling"]["plan_terms_gib"]
    assert "optimiser step" in details["phases"]["step"]["plan_terms_gib"]
    assert len(details["update_s"]) == 2 and len(details["trainer_seconds"]["response"]) == 2


@pytest.mark.slow
def test_the_check_passes_on_the_cpu(tmp_path):
    """``scripts/gpu_check.sh --device cpu`` end to end (about 3 minutes on 2 cores)."""
    out = tmp_path / "cpu.json"
    command = ["bash", str(SCRIPT), "--device", "cpu", "--out", str(out), "--work", str(tmp_path)]
    command += ["--tasks", "2", "--updates", "1", "--max-new-tokens", "24", "--prompts", "4"]
    command += ["--scale-words", "300", "--scale-response", "48"]
    command += ["--zero2-layers", "2", "--zero2-words", "60", "--zero2-response", "16"]
    # what the steps do is under test, not how fast: a loaded machine must not fail them
    command += ["--budget-s", "3000"]
    done = subprocess.run(
        command,
        env={**os.environ, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=3600,
        check=False,
    )
    report = json.loads(out.read_text())
    checks = report["checks"]
    failed = {name: c["reason"] for name, c in checks.items() if c["status"] == "failed"}
    assert done.returncode == 0, (failed, done.stderr[-3000:])
    assert report["passed"] and report["complete"] and report["device"] == "cpu"
    assert report["peak_gpu_memory_mib"] is None and report["versions"]["torch"]
    for name in ("generation", "probe", "train_single", "aitz", "scale"):
        assert checks[name]["status"] == "passed", name
    assert checks["generation"]["details"]["fp32_equal"] == "4/4"
    assert checks["train_single"]["details"]["device"] == "cpu"
    aitz = checks["aitz"]["details"]
    assert aitz["fp32_equal"] == "4/4" and aitz["updates"] == 1 and aitz["device"] == "cpu"
    assert aitz["process_group"] == ("gloo" if aitz["engine"] == "deepspeed" else "none")
    # the shipped policy's shape on the CPU: 8 prompts x 48 tokens decoded, 8 rows per update
    scale = checks["scale"]["details"]
    assert scale["parameters"] == 3_616_768 and scale["decoding"]["generated_tokens"] == 8 * 48
    assert scale["training"]["rows_per_update"] == 8 and len(scale["training"]["losses"]) == 2
    assert scale["memory"]["planned_gib"] >= scale["memory"]["measured_gib"]
    optional = {
        "train_deepspeed": ("deepspeed",),
        "zero2_8b": ("deepspeed",),
        "smoke": ("kedro", "matplotlib"),
    }
    for name, modules in optional.items():
        if all(importlib.util.find_spec(m) for m in modules):
            assert checks[name]["status"] == "passed", name
        else:
            assert checks[name]["status"] == "skipped" and "importable" in checks[name]["reason"]
    if checks["train_deepspeed"]["status"] == "passed":
        assert checks["train_deepspeed"]["details"]["process_group"] == "gloo"
