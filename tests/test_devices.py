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


def test_amx_kernels_need_the_tiles_and_no_cap_below_them(monkeypatch):
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.setattr(devices, "_cpu", lambda: ("a Xeon", {"avx2", "avx512_bf16", "amx_bf16"}))
    assert devices.amx_kernels()
    for cap, amx in (("AVX512_CORE_BF16", False), ("AVX2", False), ("AVX512_CORE_AMX", True)):
        monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", cap)
        assert devices.amx_kernels() is amx, cap
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA")
    monkeypatch.setattr(devices, "_cpu", lambda: ("an EPYC", {"avx2", "avx512_bf16"}))
    assert not devices.amx_kernels()


def test_the_matmul_rate_shrinks_a_product_that_would_take_too_long(monkeypatch):
    import torch

    from resail_pipeline import devices

    sizes = []
    real_randn = torch.randn

    def recording_randn(*shape, **kwargs):
        sizes.append(shape[0])
        return real_randn(*shape, **kwargs)

    monkeypatch.setattr(devices.torch, "randn", recording_randn)
    assert devices.matmul_rate(torch.float32, size=256, seconds=1.0) > 0
    assert sizes == [256, 256]  # fast enough: measured at the size asked
    sizes.clear()
    assert devices.matmul_rate(torch.float32, size=1024, seconds=0.0) > 0
    assert sizes == [1024, 1024, 512, 512, 256, 256, 128, 128]  # halved down to the floor


def test_matmul_rates_keep_each_dtypes_best_of_interleaved_timings(monkeypatch):
    import torch

    from resail_pipeline import devices

    readings = iter([139e9, 221e9, 410e9, 225e9, 400e9, 224e9])  # fp32, bf16 in turn
    timed = []

    def fake_rate(dtype, seconds):
        timed.append((dtype, seconds))
        return next(readings)

    monkeypatch.setattr(devices, "matmul_rate", fake_rate)
    assert devices.matmul_rates(rounds=3, seconds=0.1) == {
        torch.float32: 410e9,
        torch.bfloat16: 225e9,
    }
    assert timed == [(torch.float32, 0.1), (torch.bfloat16, 0.1)] * 3


def test_compiled_kernels_of_a_capped_processor_get_a_cache_of_their_own(monkeypatch):
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    from resail_pipeline.devices import separate_compile_cache

    for name in ("ONEDNN_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS", "ATEN_CPU_CAPABILITY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    separate_compile_cache()
    assert "TORCHINDUCTOR_CACHE_DIR" not in os.environ  # the processor's own kernels: the default
    monkeypatch.setenv("ATEN_CPU_CAPABILITY", "avx2")
    separate_compile_cache()
    chosen = os.environ["TORCHINDUCTOR_CACHE_DIR"]
    assert chosen.startswith(default_cache_dir()) and chosen.endswith("-ATEN_CPU_CAPABILITY=avx2")
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", default_cache_dir())  # set by inductor itself
    separate_compile_cache()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == chosen
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", "/chosen")
    separate_compile_cache()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == "/chosen"  # a folder the user chose stays


#: faults in the last 8 of 20 tensors of 64 MB allocated, filled and freed in turn, in a fresh
#: process: kept, the heap grows for the first few (a freed block does not always fit the next
#: one's alignment) until its free blocks join into one that does
_REFILL_FAULTS = """
import resource, sys, torch
from resail_pipeline.devices import keep_freed_memory
if sys.argv[1] == "keep":
    assert keep_freed_memory()
for _ in range(12):
    torch.empty(16 * 2**20).fill_(1.0)  # freed at once
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(8):
    torch.empty(16 * 2**20).fill_(1.0)
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _refill_faults(mode: str) -> int:
    import subprocess
    import sys

    run = subprocess.run(
        [sys.executable, "-c", _REFILL_FAULTS, mode], capture_output=True, text=True, check=True
    )
    return int(run.stdout.split()[-1])


def test_freed_memory_is_kept_for_the_next_allocation():
    # 64 MB is 16,384 pages: glibc maps such a block anew each time (faulted in page by page,
    # unless the kernel backs it with huge pages); kept, once the heap has settled, each tensor
    # reuses the pages of those before it
    kept = _refill_faults("keep")
    assert kept < 500
    assert _refill_faults("default") > kept


def test_keeping_freed_memory_is_a_no_op_without_glibc(monkeypatch):
    class WithoutMallopt:  # a C library without mallopt (macOS's), named as such
        def __init__(self, name):
            pass

    monkeypatch.setattr(devices.ctypes, "CDLL", WithoutMallopt)
    assert devices.keep_freed_memory() is False
