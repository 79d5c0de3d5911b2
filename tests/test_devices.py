"""Work kept off the calling process where a GPU is visible."""

from __future__ import annotations

import os

from resail_pipeline import devices


def test_without_a_gpu_the_work_runs_here():
    assert devices.visible_devices() == []  # this machine (and CI) has none
    assert devices.off_process(os.getpid) == os.getpid()


def test_with_a_gpu_the_work_runs_in_a_fresh_process_and_returns(monkeypatch):
    monkeypatch.setattr(devices, "visible_devices", lambda: ["0"])
    assert devices.off_process(os.getpid) != os.getpid()
    assert devices.off_process(divmod, 17, 5) == (3, 2)


def test_the_processor_names_its_instruction_sets_and_any_cap(monkeypatch):
    from resail_pipeline.devices import processor

    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("MKL_ENABLE_INSTRUCTIONS", raising=False)
    monkeypatch.delenv("ATEN_CPU_CAPABILITY", raising=False)
    plain = processor()
    assert plain.count(";") == 1 and plain.split("; ")[1]  # model; instruction sets
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    assert processor() == f"{plain}; ONEDNN_MAX_CPU_ISA=AVX2"
