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
