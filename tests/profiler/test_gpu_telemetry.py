"""Telemetry and probe against a real NVIDIA GPU (marked `gpu`: skipped without one).

Runs on a GPU box with torch (CUDA build) and pynvml; vLLM is not needed.
"""

import time

import pytest

from profiler.telemetry.nvml_source import NvmlSource

pytestmark = pytest.mark.gpu
torch = pytest.importorskip("torch")
GiB = 2**30


@pytest.fixture(scope="module")
def cuda_uuid():
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA device")
    torch.empty(1, device="cuda")  # the CUDA context exists before any baseline
    torch.cuda.synchronize()
    return f"GPU-{torch.cuda.get_device_properties(0).uuid}"


def test_memory_used_rises_by_the_size_of_a_torch_allocation(cuda_uuid):
    src = NvmlSource(count=1, cuda_visible=cuda_uuid)  # matched by UUID: the device torch uses
    try:
        assert src.devices[0].uuid == cuda_uuid
        before = src.sample()[0]["mem_used_bytes"]
        x = torch.empty(4 * GiB, dtype=torch.uint8, device="cuda")
        torch.cuda.synchronize()
        after = src.sample()[0]["mem_used_bytes"]
        assert abs((after - before) - 4 * GiB) < 64 * 2**20, (before, after)
        del x
        torch.cuda.empty_cache()
    finally:
        src.close()


def test_gpm_dram_bandwidth_agrees_with_a_measured_copy(cuda_uuid):
    src = NvmlSource(count=1, cuda_visible=cuda_uuid)
    try:
        if "gpm_dram_bw_pct" in src.unavailable:
            pytest.skip(src.unavailable["gpm_dram_bw_pct"])
        spec = src.devices[0].spec_bandwidth_Bps
        if spec is None:
            pytest.skip(src.unavailable.get("spec_bandwidth_Bps", "no spec bandwidth"))
        a = torch.empty(GiB, dtype=torch.uint8, device="cuda").fill_(1)
        b = torch.empty_like(a)
        for _ in range(5):
            b.copy_(a)
        torch.cuda.synchronize()
        time.sleep(0.15)
        src.sample()  # opens the GPM window right before the copies
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        n = 0
        t0 = time.monotonic()
        while time.monotonic() - t0 < 2.0:
            for _ in range(20):
                b.copy_(a)
            n += 20
        end.record()
        end.synchronize()
        row = src.sample()[0]
        copied_Bps = 2 * GiB * n / (start.elapsed_time(end) / 1e3)
        gpm_Bps = row["gpm_dram_bw_pct"] / 100 * spec
        print(f"copy {copied_Bps / 1e12:.3f} TB/s, GPM {row['gpm_dram_bw_pct']:.1f} % of {spec / 1e12:.2f} TB/s "
              f"= {gpm_Bps / 1e12:.3f} TB/s")
        assert gpm_Bps == pytest.approx(copied_Bps, rel=0.15)
    finally:
        src.close()


def test_probe_copy_bandwidth_is_physical(cuda_uuid):
    from analysis.catalog import gpu
    from profiler.probe import run_probe

    r = run_probe("cuda", quick=True)
    spec = gpu(r["device"]).bandwidth_tbs * 1e12
    assert 0.5 * spec < r["copy"]["bandwidth_Bps"]["median"] <= 1.02 * spec
    assert r["matmul_bf16"]["flops_per_s"]["median"] > 1e13
    assert r["cuda_uuid"] == cuda_uuid
