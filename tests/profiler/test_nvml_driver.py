"""NvmlSource through the real pynvml bindings, over a fake libnvidia-ml.so (tests/fake_libnvml.c).

test_telemetry.py fakes the pynvml module; here pynvml itself runs: its ctypes
structs, versioned entry points (nvmlMemory_v2, GPM metrics v1), the
INSUFFICIENT_SIZE process protocol and its error mapping. What these catch that the
module fake cannot: a wrong struct version, GPM samples passed in the wrong order,
a leaked GPM buffer, a call after shutdown, an entry point an older driver lacks.
"""

import ctypes
import json
import os
import sys
import time
import types

import pandas as pd
import pynvml
import pytest
from helpers import ROOT
from nvml_library import build, installed
from records import decode_point, engine_record

from analysis.results.load import ResultsWarning
from analysis.results.schema import Manifest
from profiler.runner.children import store_telemetry
from profiler.store import ResultsDir
from profiler.telemetry.nvml_source import NvmlSource, NvmlUnavailable
from profiler.telemetry.sampler import Sampler, open_sources

GiB, MiB = 2**30, 2**20
H200_BPS = 4.8e12  # analysis.catalog's H200 bandwidth: the fake's GPM peak, so % × spec = bytes/s
HOPPER, AMPERE = pynvml.NVML_DEVICE_ARCH_HOPPER, pynvml.NVML_DEVICE_ARCH_AMPERE
WINDOW = 0.12  # just over GPM's 100 ms minimum


@pytest.fixture(scope="module")
def libs(tmp_path_factory):
    d = tmp_path_factory.mktemp("libnvml")
    return {"current": build(d), "old": build(d, old_driver=True)}


@pytest.fixture
def driver(libs):
    with installed(libs["current"]) as drv:
        yield drv


@pytest.fixture
def old_driver(libs):
    with installed(libs["old"]) as drv:
        yield drv


def h200(drv, bus="00000000:1B:00.0", uuid="GPU-5e1f0c2a-9d3b-4c55-8e2f-0a1b2c3d4e5f", used=96 * GiB):
    i = drv.add_device("NVIDIA H200", uuid, bus, HOPPER, 143771 * MiB, 592 * MiB, used)
    drv.readings(i, util=(99, 84), power_mw=641_250, clocks=(1980, 3201), temp=61,
                 reasons=pynvml.nvmlClocksEventReasonSwPowerCap)
    return i


def test_every_signal_through_the_real_bindings(driver):
    i = h200(driver)
    driver.add_process(i, 4242, 95 * GiB)
    driver.add_process(i, 77, 300 * MiB)
    driver.set_load(i, H200_BPS, 3.6e12, 0.9, 0.25)
    src = NvmlSource(count=1, cuda_visible="0", engine_pids=lambda: [4242])
    assert driver.refcount() == 1 and driver.live_samples() == 2
    time.sleep(WINDOW)
    row = src.sample()[0]
    assert row["mem_used_bytes"] == 96 * GiB and row["mem_reserved_bytes"] == 592 * MiB
    assert row["mem_total_bytes"] == 143771 * MiB
    assert row["mem_free_bytes"] == 143771 * MiB - 592 * MiB - 96 * GiB
    assert (row["util_gpu_pct"], row["util_mem_busy_pct"]) == (99.0, 84.0)
    assert row["power_w"] == 641.25 and row["temperature_c"] == 61
    assert (row["clock_sm_mhz"], row["clock_mem_mhz"]) == (1980, 3201)
    assert row["clocks_event_reasons"] == pynvml.nvmlClocksEventReasonSwPowerCap and row["throttled"] is True
    assert row["engine_mem_bytes"] == 95 * GiB  # pid 77 is not the engine's
    assert row["gpm_dram_bw_pct"] == pytest.approx(75.0, abs=1e-6)  # 3.6 of 4.8 TB/s
    assert row["gpm_sm_pct"] == pytest.approx(90.0, abs=1e-6)
    assert row["gpm_tensor_pct"] == pytest.approx(25.0, abs=1e-6)
    assert src.unavailable == {} and src.describe()["transient_errors"] == {}
    desc = src.describe()
    assert desc["driver"] == "580.95.05"
    assert desc["devices"][0]["pci_bus_id"] == "00000000:1B:00.0"
    assert desc["devices"][0]["spec_bandwidth_Bps"] == H200_BPS
    src.close()
    assert driver.live_samples() == 0, "GPM sample buffers leaked"
    assert driver.refcount() == 0, "nvmlShutdown not called"
    assert src.describe()["devices"][0]["gpm"] is True  # the manifest is written after close


def test_gpm_windows_follow_the_load_with_the_samples_in_order(driver):
    # Each window must pass (earlier, later); the fake driver refuses them reversed.
    i = h200(driver)
    driver.set_load(i, H200_BPS, 1.2e12, 0.5, 0.0)
    src = NvmlSource(count=1)
    values = []
    for rate in (1.2e12, 2.4e12, 4.32e12):
        driver.set_load(i, H200_BPS, rate, 0.5, 0.0)
        time.sleep(WINDOW)
        src.sample()  # closes the window that mixed the old and new load
        time.sleep(WINDOW)
        values.append(src.sample()[0]["gpm_dram_bw_pct"])
    assert values == pytest.approx([25.0, 50.0, 90.0], abs=1e-6)
    assert src.describe()["transient_errors"] == {}
    # Too soon after the last window: no value, and no GPM call spent on it.
    before = driver.calls("nvmlGpmMetricsGet")
    assert src.sample()[0]["gpm_dram_bw_pct"] is None
    assert driver.calls("nvmlGpmMetricsGet") == before
    src.close()


def test_devices_matched_by_pci_order_and_uuid_prefix(driver):
    # NVML enumerates the H200 on bus 9A first; CUDA (PCI order) calls it device 1.
    h200(driver, bus="00000000:9A:00.0", uuid="GPU-9a9a9a9a-0000-0000-0000-000000000000")
    driver.add_device("NVIDIA H200", "GPU-07070707-0000-0000-0000-000000000000", "00000000:07:00.0", HOPPER,
                      143771 * MiB, 592 * MiB, GiB)
    src = NvmlSource(count=1, cuda_visible="1")
    assert src.devices[0].uuid == "GPU-9a9a9a9a-0000-0000-0000-000000000000"
    src.close()
    src = NvmlSource(count=2, cuda_visible="GPU-0707,GPU-9a9a9a9a-0000-0000-0000-000000000000")
    assert [d.pci_bus_id for d in src.devices] == ["00000000:07:00.0", "00000000:9A:00.0"]
    assert [r["device"] for r in src.sample()] == ["gpu0", "gpu1"]
    src.close()
    with pytest.raises(NvmlUnavailable, match="index 2 but NVML sees 2"):
        NvmlSource(count=1, cuda_visible="2")
    assert driver.refcount() == 0  # a failed open shuts NVML down again


def test_ampere_is_never_asked_for_gpm(driver):
    i = driver.add_device("NVIDIA A100-SXM4-80GB", "GPU-a100", "00000000:07:00.0", AMPERE, 81920 * MiB,
                          512 * MiB, 10 * GiB)
    driver.readings(i, util=(40, 30))
    src = NvmlSource(count=1)
    time.sleep(WINDOW)
    row = src.sample()[0]
    assert row["gpm_dram_bw_pct"] is None and row["util_mem_busy_pct"] == 30.0
    assert "no GPM before Hopper" in src.unavailable["gpm_dram_bw_pct"]
    assert driver.calls("nvmlGpmSampleAlloc") == 0 and driver.calls("nvmlGpmSampleGet") == 0
    src.close()


def test_mig_instance_gets_no_device_gpm(driver):
    i = h200(driver)
    driver.set_mig(i, 1, 1)
    src = NvmlSource(count=1)
    assert src.devices[0].mig is True
    assert "MIG" in src.unavailable["gpm_sm_pct"]
    assert driver.calls("nvmlGpmSampleGet") == 0
    src.close()


def test_driver_errors_become_reasons_or_missing_samples(driver):
    i = h200(driver)
    driver.set_load(i, H200_BPS, 2.4e12, 0.5, 0.1)
    driver.fail("nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_NO_PERMISSION)
    driver.fail("nvmlDeviceGetComputeRunningProcesses_v3", pynvml.NVML_ERROR_NOT_SUPPORTED)
    src = NvmlSource(count=1, engine_pids=lambda: [1])
    driver.fail("nvmlDeviceGetUtilizationRates", pynvml.NVML_ERROR_GPU_IS_LOST)
    row = src.sample()[0]
    assert row["power_w"] is None and src.unavailable["power_w"] == "no permission"
    assert src.unavailable["engine_mem_bytes"] == "not supported by this device or driver"
    assert row["util_gpu_pct"] is None and "util_gpu_pct" not in src.unavailable  # transient
    driver.fail("nvmlDeviceGetUtilizationRates", 0)
    time.sleep(WINDOW)
    row = src.sample()[0]
    assert row["util_gpu_pct"] == 99.0 and src.describe()["transient_errors"] == {"util_gpu_pct": 1}
    assert driver.calls("nvmlDeviceGetPowerUsage") == 1  # a permanent refusal is not asked again
    # A GPM struct the driver does not know: GPM is off for the run, with the reason.
    driver.fail("nvmlGpmMetricsGet", pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
    time.sleep(WINDOW)
    assert src.sample()[0]["gpm_dram_bw_pct"] is None
    assert "struct version" in src.unavailable["gpm_dram_bw_pct"]
    src.close()
    assert driver.live_samples() == 0


def test_gpm_support_query_refused(driver):
    h200(driver)
    driver.fail("nvmlGpmQueryDeviceSupport", pynvml.NVML_ERROR_NOT_SUPPORTED)
    src = NvmlSource(count=1)
    assert src.unavailable["gpm_tensor_pct"] == "GPM support query failed: not supported by this device or driver"
    src.close()


def test_old_driver_reads_memory_and_clock_reasons_the_old_way(old_driver):
    i = h200(old_driver)
    src = NvmlSource(count=1)
    rows = [src.sample()[0] for _ in range(3)]
    # The v1 struct counts the driver's reservation as used; reserved itself is unknown.
    assert [r["mem_used_bytes"] for r in rows] == [96 * GiB + 592 * MiB] * 3
    assert rows[0]["mem_free_bytes"] == 143771 * MiB - 96 * GiB - 592 * MiB
    assert rows[0]["mem_reserved_bytes"] is None and "v2 memory" in src.unavailable["mem_reserved_bytes"]
    assert rows[0]["throttled"] is True  # through the throttle-reasons entry point
    assert "mem_used_bytes" not in src.unavailable and "clocks_event_reasons" not in src.unavailable
    assert any("driver too old" in n for n in src.describe()["notes"])
    # The old entry points are used from then on, not retried each sample.
    assert old_driver.calls("nvmlDeviceGetMemoryInfo") == 3
    assert old_driver.calls("nvmlDeviceGetCurrentClocksThrottleReasons") == 3
    old_driver.set_memory_used(i, 100 * GiB)
    assert src.sample()[0]["mem_used_bytes"] == 100 * GiB + 592 * MiB
    src.close()


def test_no_library_on_this_machine():
    # The real loader and no fake: this machine has no libnvidia-ml.so.1.
    pynvml.nvmlLib = None
    pynvml._nvmlGetFunctionPointer_cache.clear()
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        with pytest.raises(NvmlUnavailable, match="NVML library not found"):
            NvmlSource(count=1)
    else:
        pytest.skip("this machine has a real NVML library")


def test_sampler_thread_records_the_timeline(driver):
    i = h200(driver, used=20 * GiB)
    driver.set_load(i, H200_BPS, 0.48e12, 0.2, 0.0)  # 10 %
    sampler = Sampler([NvmlSource(count=1)], interval_s=0.05).start()
    time.sleep(0.6)
    t_change = time.time()
    driver.set_memory_used(i, 90 * GiB)  # the engine allocates its KV cache
    driver.set_load(i, H200_BPS, 3.84e12, 0.9, 0.3)  # 80 %
    time.sleep(0.8)
    df = sampler.stop()
    assert sampler.errors == []
    assert driver.live_samples() == 0 and driver.refcount() == 0
    assert len(df) >= 15 and set(df["source"]) == {"nvml"}
    assert df["t"].is_monotonic_increasing
    # Rows stamped before the change read the old state; windows closed well after it, the new.
    before, after = df[df["t"] < t_change - 0.03], df[df["t"] > t_change + 0.35]
    assert set(before["mem_used_bytes"]) == {20 * GiB} and set(after["mem_used_bytes"]) == {90 * GiB}
    gpm_before, gpm_after = before["gpm_dram_bw_pct"].dropna(), after["gpm_dram_bw_pct"].dropna()
    assert len(gpm_before) >= 2 and len(gpm_after) >= 2
    assert gpm_before.to_numpy() == pytest.approx(10.0, abs=1e-6)
    assert gpm_after.iloc[-2:].to_numpy() == pytest.approx(80.0, abs=1e-6)
    # A window spanning the change reads between the two loads, never outside them.
    assert df["gpm_dram_bw_pct"].dropna().between(10.0 - 1e-6, 80.0 + 1e-6).all()
    # 50 ms samples against a 100 ms GPM minimum: a GPM value in at most about every other row.
    assert df["gpm_dram_bw_pct"].notna().mean() <= 0.6
    assert isinstance(df["throttled"].dtype, pd.BooleanDtype)


def test_gpu_sampler_benchmark_runs_end_to_end(driver, tmp_path, monkeypatch):
    """benchmarks/gpu_sampler.py (run on GPU boxes by benchmarks/gpu_check.sh) with torch.cuda mapped to the CPU.

    Keeps the script from rotting between GPU sessions: phases, tagging, aggregates, files.
    """
    torch = pytest.importorskip("torch", reason="the benchmark times torch's work")  # the real one, before the swap

    class Event:
        def __init__(self, enable_timing=False):
            self.t = None

        def record(self):
            self.t = time.perf_counter()

        def synchronize(self):
            pass

        def elapsed_time(self, other):
            return (other.t - self.t) * 1e3

    cpu_torch = types.SimpleNamespace(
        uint8=torch.uint8, bfloat16=torch.bfloat16, empty_like=torch.empty_like,
        empty=lambda *a, device=None, **k: torch.empty(*a, **k),
        randn=lambda *a, device=None, **k: torch.randn(*a, **k),
        cuda=types.SimpleNamespace(
            is_available=lambda: True, synchronize=lambda: None, empty_cache=lambda: None, Event=Event,
            get_device_properties=lambda i: types.SimpleNamespace(uuid="5e1f0c2a-9d3b-4c55-8e2f-0a1b2c3d4e5f")))
    monkeypatch.setitem(sys.modules, "torch", cpu_torch)
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    import gpu_sampler

    i = h200(driver, used=GiB)
    driver.set_load(i, H200_BPS, 2.4e12, 0.5, 0.1)
    r = gpu_sampler.run(tmp_path, seconds=0.4, copy_gib=1 / 16, matmul_n=256)
    gpu_sampler.show(r)
    assert list(r["phases"]) == ["idle", "alloc_8GiB", "copy", "matmul_bf16", "idle_after"]
    assert r["device"]["gpm"] is True and r["sampler"]["errors"] == []
    copy = r["phases"]["copy"]
    assert copy["measured"]["bytes_per_s"] > 0 and copy["gpu"]["samples"] >= 3
    assert copy["gpu"]["mean_gpm_dram_bw_pct"] == pytest.approx(50.0, abs=1e-6)
    assert copy["gpu"]["gpm_implied_dram_Bps"] == pytest.approx(2.4e12)
    assert r["phases"]["matmul_bf16"]["measured"]["flops_per_s"] > 0
    df = pd.read_parquet(tmp_path / "telemetry.parquet")
    assert set(r["phases"]) <= set(df["phase"]) and set(df["source"]) == {"nvml", "cpu"}
    assert (tmp_path / "gpu_sampler.json").exists()


def test_a_launch_stored_with_per_point_gpu_aggregates(driver, tmp_path):
    """open_sources → Sampler → runner.store_telemetry, as a sweep runs them, over the real bindings."""
    uuid = "GPU-5e1f0c2a-9d3b-4c55-8e2f-0a1b2c3d4e5f"
    i = h200(driver, uuid=uuid, used=2 * GiB)
    driver.add_process(i, os.getpid(), 2 * GiB)  # the "engine" is this process
    store = ResultsDir(tmp_path)
    store.prepare()
    sources, unavailable = open_sources("nvml", 1, os.getpid)
    assert [s.kind for s in sources] == ["nvml", "cpu"] and unavailable == {}
    sampler = Sampler(sources, 0.05).start()
    launched = time.time()
    time.sleep(0.2)
    ready = time.time()
    points = []
    loads = {}
    for c, pct, mem in ((1, 25.0, 60 * GiB), (2, 75.0, 90 * GiB)):
        driver.set_load(i, H200_BPS, pct / 100 * H200_BPS, 0.5, 0.0)
        driver.set_memory_used(i, mem)
        time.sleep(0.3)  # the GPM window that straddles the change closes before the point starts
        start = time.time()
        time.sleep(0.5)
        rec = decode_point("e", concurrency=c, started_at=start, finished_at=time.time())
        store.write_point(rec)
        points.append(rec.point)
        loads[rec.id] = (pct, mem)
        time.sleep(0.1)  # a row is stamped before its reads: no state change right at a point's end
    store.write_engine(engine_record("e", started_at=launched, ready_at=ready, cuda_uuids=[uuid]))
    store_telemetry(store, "e", sampler, launched_at=launched, points=points)

    eng = json.loads((tmp_path / "engines" / "e.json").read_text())["telemetry"]
    assert eng["device_match"] == "ok"
    gpu = eng["launches"][0]["sources"][0]
    assert gpu["devices"][0]["gpm"] is True and gpu["devices"][0]["spec_bandwidth_Bps"] == H200_BPS
    # every GPU signal sampled; the host's RAPL counter only where the kernel lets this user read it
    assert set(eng["unavailable"]) <= {"rapl_energy_j"} and eng["launches"][0]["errors"] == []
    for pid, (pct, mem) in loads.items():
        agg = json.loads((tmp_path / "points" / f"{pid}.json").read_text())["telemetry"]
        g = agg["gpu0"]
        assert g["samples"] >= 5 and g["peak_mem_used_bytes"] == mem
        assert g["mean_gpm_dram_bw_pct"] == pytest.approx(pct, abs=1e-6)
        assert g["gpm_windows"] >= 2 and g["gpm_partial_windows"] is False
        assert g["gpm_implied_dram_Bps"] == pytest.approx(pct / 100 * H200_BPS)
        assert g["peak_engine_mem_bytes"] == 2 * GiB and g["throttled_seen"] is True
        assert agg["host"]["peak_rss_bytes"] > 0
    df = pd.read_parquet(tmp_path / "telemetry" / "e.parquet")
    assert set(df["phase"]) >= {"baseline", "startup", "decode"} and set(df["point_id"].dropna()) == set(loads)
    assert driver.refcount() == 0 and driver.live_samples() == 0


def _sampled_after(sampler, t: float, timeout_s: float = 60) -> None:
    """Wait until the sampler has read the GPU wholly after `t` (no read straddles a power change or a point's end:
    the race is made impossible, not rare)."""
    deadline = time.monotonic() + timeout_s
    while not any(r["source"] == "nvml" and r["t"] > t for r in sampler.snapshot()):
        assert time.monotonic() < deadline, "the sampler stopped sampling"
        time.sleep(0.01)


def _launch_with_power_steps(driver, tmp_path, steps, fail_energy=False):
    """A launch over the real bindings whose GPU draws 100 W before the engine and `watts` during each point
    (steps: (concurrency, watts)); returns the store and {point id: (watts, window seconds, concurrency)}."""
    uuid = "GPU-5e1f0c2a-9d3b-4c55-8e2f-0a1b2c3d4e5f"
    i = h200(driver, uuid=uuid, used=2 * GiB)
    driver.readings(i, power_mw=100_000)  # idle
    if fail_energy:  # a pre-Volta board: no total-energy counter
        driver.fail("nvmlDeviceGetTotalEnergyConsumption", pynvml.NVML_ERROR_NOT_SUPPORTED)
    store = ResultsDir(tmp_path)
    store.prepare()
    sources, _ = open_sources("nvml", 1, os.getpid)
    sampler = Sampler(sources, 0.05).start()  # its baseline: two samples at 100 W
    launched = time.time()
    time.sleep(0.1)
    ready = time.time()
    points, windows = [], {}
    for c, watts in steps:
        driver.readings(i, power_mw=watts * 1000)
        _sampled_after(sampler, time.time())  # constant power from a sample before the point's start …
        start = time.time()
        time.sleep(0.6)
        end = time.time()
        _sampled_after(sampler, end)  # … to one after its end, however slow the machine
        rec = decode_point("e", concurrency=c, started_at=start, finished_at=end)
        store.write_point(rec)
        points.append(rec.point)
        windows[rec.id] = (watts, end - start, c)
    store.write_engine(engine_record("e", started_at=launched, ready_at=ready, cuda_uuids=[uuid]))
    store_telemetry(store, "e", sampler, launched_at=launched, points=points)
    Manifest(name="energy", status="complete", engines=["e"]).save_file(tmp_path / "manifest.json")
    return store, windows


def test_a_points_energy_is_the_counters_rise_over_its_window(driver, tmp_path):
    """The fake's counter integrates its power reading, as the driver's does: a point at a constant W watts for
    a window of T seconds used W·T joules, and decode_point's batch (c requests × 16 output tokens) makes
    J/token = W·T / (16·c), written out below. Exact but for where inside a read the counter was taken (a read is
    stamped at its middle; on a busy machine it can take milliseconds of a 0.6 s window): to 1 %."""
    from analysis.measured.energy import energy_table
    from analysis.results.load import load

    _, windows = _launch_with_power_steps(driver, tmp_path, ((1, 300), (4, 450)))
    for pid, (watts, window, _) in windows.items():
        g = json.loads((tmp_path / "points" / f"{pid}.json").read_text())["telemetry"]["gpu0"]
        assert g["energy_method"] == "counter: NVML total-energy counter"
        # exact but for the counter's whole millijoules and the instant of one NVML call
        assert g["energy_j"] == pytest.approx(watts * window, rel=1e-2)
        assert g["window_s"] == pytest.approx(window, abs=1e-9)
        assert g["idle_power_w"] == pytest.approx(100.0, rel=5e-2)  # the baseline's counter rate
        assert g["energy_above_idle_j"] == pytest.approx((watts - 100) * window, rel=3e-2)
        assert g["mean_power_w"] == pytest.approx(watts) and g["peak_power_w"] == watts
    with pytest.warns(ResultsWarning, match="no copy of the model's config.json"):  # the record's model is a stub
        table = energy_table(load(tmp_path)).set_index("point_id")
    for pid, (watts, window, c) in windows.items():
        row = table.loc[pid]
        assert row["output_tokens"] == 16 * c and row["prompt_tokens"] == 64 * c
        assert row["j_per_output_token"] == pytest.approx(watts * window / (16 * c), rel=1e-2)
        assert row["j_per_prompt_token"] == pytest.approx(watts * window / (64 * c), rel=1e-2)
        assert row["mean_power_w"] == pytest.approx(watts, rel=1e-2) and row["counted"].startswith("1 GPU")


def test_without_an_energy_counter_the_power_samples_are_integrated(driver, tmp_path):
    _, windows = _launch_with_power_steps(driver, tmp_path, ((2, 350),), fail_energy=True)
    ((pid, (watts, window, _)),) = windows.items()
    g = json.loads((tmp_path / "points" / f"{pid}.json").read_text())["telemetry"]["gpu0"]
    assert g["energy_method"].startswith("integrated: NVML power samples")
    assert "not supported by this device or driver" in g["energy_method"]  # why the counter was not used
    assert g["energy_j"] == pytest.approx(watts * window, rel=0.02)
    assert g["idle_power_w"] == pytest.approx(100.0)  # the baseline's power readings
