"""The NVML and host telemetry sources, the sampler, phase tagging and aggregates.

NVML branches run against tests/fake_nvml.py, which raises pynvml's real error classes.
"""

import json
import subprocess
import sys
import time

import pandas as pd
import pynvml
import pytest
from fake_nvml import FakeNvml, GiB, a100, h100
from records import engine_record

from profiler.telemetry.cpu_source import CpuSource
from profiler.telemetry.nvml_source import NvmlSource, NvmlUnavailable, resolve_visible
from profiler.telemetry.sampler import Sampler, TelemetryError, aggregate, frame, open_sources, tag_phases


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def source(devices, visible=None, count=1, **kw):
    clock = Clock()
    fake = FakeNvml(devices, **kw)
    src = NvmlSource(count=count, cuda_visible=visible, nvml=fake, clock=clock)
    return src, fake, clock


def test_hopper_device_every_signal_recorded():
    dev = h100(procs=[(4242, 70 * GiB), (999, GiB)], reasons=pynvml.nvmlClocksEventReasonSwPowerCap)
    src, fake, clock = source([dev])
    src.engine_pids = lambda: [4242]
    first = src.sample()[0]
    # A GPM window shorter than 100 ms gives no value, not a zero.
    assert first["gpm_dram_bw_pct"] is None
    clock.t += 0.1
    row = src.sample()[0]
    assert row["device"] == "gpu0"
    assert row["mem_used_bytes"] == 72 * GiB and row["mem_reserved_bytes"] == 529 * 2**20
    assert row["mem_total_bytes"] + 0 == 81559 * 2**20
    assert row["mem_free_bytes"] == 81559 * 2**20 - 529 * 2**20 - 72 * GiB
    assert (row["util_gpu_pct"], row["util_mem_busy_pct"]) == (97.0, 81.0)
    assert (row["gpm_dram_bw_pct"], row["gpm_sm_pct"], row["gpm_tensor_pct"]) == (71.5, 88.0, 34.0)
    assert row["power_w"] == 612.0 and row["temperature_c"] == 63
    assert row["energy_j"] == 8_765_432.101  # NVML counts millijoules
    assert (row["clock_sm_mhz"], row["clock_mem_mhz"]) == (1980, 2619)
    assert row["throttled"] is True  # software power cap
    assert row["engine_mem_bytes"] == 70 * GiB  # only the engine's process, not pid 999
    assert src.unavailable == {}
    d = src.describe()
    assert d["driver"] == "580.65.06"
    assert d["devices"][0]["spec_bandwidth_Bps"] == 3.35e12 and d["devices"][0]["gpm"] is True
    src.close()
    assert fake.freed == 2 and fake.shutdowns == 1


class SlowEnergyNvml(FakeNvml):
    """A driver whose energy-counter read costs 3.2 ms of CPU, as an H200's did in a Firecracker VM (driver
    580.159.04, benchmarks/telemetry_overhead.py --calls: 3,186 µs against 3 µs for the power reading)."""

    def __init__(self, devices, cpu):
        super().__init__(devices)
        self.cpu = cpu

    def nvmlDeviceGetTotalEnergyConsumption(self, h):
        self.cpu.t += 3.2e-3
        return super().nvmlDeviceGetTotalEnergyConsumption(h)


def test_a_dear_energy_counter_is_read_at_half_a_percent_of_a_core():
    clock, cpu = Clock(), Clock()
    src = NvmlSource(nvml=SlowEnergyNvml([h100()], cpu), clock=clock, cpu_clock=cpu)
    rows = []
    for _ in range(20):  # 10 Hz for 2 s
        rows.append(src.sample()[0])
        clock.t += 0.1
    # 3.2 ms a read at 0.5 % of a core: a read every 3.2e-3 / 0.005 = 0.64 s, i.e. the first sample at or after
    # each 0.64 s: samples 0, 7 (0.7 s) and 14 (1.4 s).
    assert [i for i, r in enumerate(rows) if r["energy_j"] is not None] == [0, 7, 14]
    assert all(r["energy_t"] is None for r in rows if r["energy_j"] is None)
    assert rows[3]["power_w"] == 612.0  # every other signal is read every sample
    assert any("3.2 ms of CPU" in n and "every 0.64 s" in n for n in src.describe()["notes"])
    src.read_counters_next()  # the baseline's and the last samples read it whatever it costs
    assert src.sample()[0]["energy_j"] == 8_765_432.101


def test_the_samplers_baseline_reads_a_dear_energy_counter_twice():
    clock, cpu = Clock(), Clock()
    src = NvmlSource(nvml=SlowEnergyNvml([h100()], cpu), clock=clock, cpu_clock=cpu)
    s = Sampler([src], interval_s=0.1)
    s.sample_once(counters=True)
    s.sample_once(counters=True)  # 0.25 s later in a real baseline: well inside 0.64 s
    s.sample_once()
    assert [r["energy_j"] is not None for r in s.snapshot()] == [True, True, False]


def test_a_cheap_energy_counter_is_read_every_sample():
    src, _, _ = source([h100()])  # the clock never moves: a read spaced out by its cost would be skipped
    assert all(src.sample()[0]["energy_j"] == 8_765_432.101 for _ in range(5))
    assert not any("energy" in n for n in src.describe()["notes"])


def test_idle_clock_reason_is_not_throttling():
    src, _, _ = source([h100(reasons=pynvml.nvmlClocksEventReasonGpuIdle)])
    assert src.sample()[0]["throttled"] is False


def test_ampere_has_no_gpm_and_says_why():
    src, fake, clock = source([a100()])
    clock.t += 1
    row = src.sample()[0]
    assert row["gpm_dram_bw_pct"] is None and row["gpm_sm_pct"] is None
    assert "no GPM before Hopper" in src.unavailable["gpm_dram_bw_pct"]
    assert row["util_mem_busy_pct"] == 81.0  # the fallback signal is still there
    assert "nvmlGpmSampleGet" not in fake.calls


def test_hopper_without_gpm_support():
    src, _, _ = source([h100(gpm_supported=0)])
    assert src.unavailable["gpm_sm_pct"] == "GPM not supported on this device"


def test_gpm_query_error_is_a_reason():
    src, _, _ = source([h100(fail={"nvmlGpmQueryDeviceSupport": pynvml.NVML_ERROR_NOT_SUPPORTED})])
    assert "not supported" in src.unavailable["gpm_dram_bw_pct"]


def test_mig_instance_gets_no_device_gpm():
    src, _, _ = source([h100(mig_handle=1)])
    assert src.unavailable["gpm_tensor_pct"].startswith("MIG mode")


def test_not_supported_signal_is_recorded_once_and_not_asked_again():
    src, fake, _ = source([h100(fail={"nvmlDeviceGetPowerUsage": pynvml.NVML_ERROR_NOT_SUPPORTED})])
    for _ in range(3):
        assert src.sample()[0]["power_w"] is None
    assert src.unavailable["power_w"] == "not supported by this device or driver"
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 1


def test_no_permission_for_processes():
    src, _, _ = source([h100(fail={"nvmlDeviceGetComputeRunningProcesses": pynvml.NVML_ERROR_NO_PERMISSION})])
    src.engine_pids = lambda: [1]
    assert src.sample()[0]["engine_mem_bytes"] is None
    assert src.unavailable["engine_mem_bytes"] == "no permission"


def test_transient_error_misses_one_sample_only():
    dev = h100(fail={"nvmlDeviceGetTemperature": pynvml.NVML_ERROR_UNKNOWN})
    src, _, _ = source([dev])
    assert src.sample()[0]["temperature_c"] is None
    dev["fail"].clear()
    assert src.sample()[0]["temperature_c"] == 63
    assert "temperature_c" not in src.unavailable
    assert src.describe()["transient_errors"] == {"temperature_c": 1}


def test_engine_pids_not_on_the_device_are_a_note_not_a_zero():
    src, _, _ = source([h100(procs=[(1, GiB)])])
    src.engine_pids = lambda: [5]
    assert src.sample()[0]["engine_mem_bytes"] is None
    assert any("container" in n for n in src.describe()["notes"])


def test_no_library_no_nvml():
    with pytest.raises(NvmlUnavailable, match="NVML library not found"):
        source([h100()], init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
    with pytest.raises(NvmlUnavailable, match="did not initialise"):
        source([h100()], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED)
    with pytest.raises(NvmlUnavailable, match="no devices"):
        source([])


# --- matching CUDA devices to NVML devices ------------------------------------------

def two_gpus():
    # NVML index 0 sits on the higher PCI bus: CUDA (in PCI order) calls it device 1.
    return FakeNvml([h100(pci="00000000:9A:00.0"), a100(pci="00000000:07:00.0")])


def test_cuda_indices_follow_pci_order_not_nvml_order():
    nv = two_gpus()
    assert resolve_visible(nv, None, 2) == [1, 0]
    assert resolve_visible(nv, "1", 1) == [0]
    assert resolve_visible(nv, " 1 , 0 ", 2) == [0, 1]


def test_cuda_uuids_and_unique_prefixes():
    nv = two_gpus()
    assert resolve_visible(nv, "GPU-bbbbbbbb-1111-2222-3333-444444444444", 1) == [1]
    assert resolve_visible(nv, "GPU-aaaa", 1) == [0]
    with pytest.raises(NvmlUnavailable, match="matches 0 NVML devices"):
        resolve_visible(nv, "GPU-cccc", 1)


def test_too_few_visible_devices_for_tensor_parallelism():
    with pytest.raises(NvmlUnavailable, match="needs 2 devices but only 1"):
        resolve_visible(two_gpus(), "0", 2)
    with pytest.raises(NvmlUnavailable, match="neither an index nor a UUID"):
        resolve_visible(two_gpus(), "zero", 1)


def test_tensor_parallel_engine_gets_one_row_per_device():
    src, _, _ = source([h100(), h100(uuid="GPU-x", pci="00000000:2B:00.0")], count=2)
    assert [r["device"] for r in src.sample()] == ["gpu0", "gpu1"]


# --- choosing sources ---------------------------------------------------------------

def test_auto_falls_back_to_host_with_the_reason(monkeypatch):
    import profiler.telemetry.nvml_source as ns

    def no_nvml(**kw):
        raise NvmlUnavailable("NVML library not found (no NVIDIA driver on this machine)")

    monkeypatch.setattr(ns, "NvmlSource", no_nvml)
    sources, unavailable = open_sources("auto", 1, lambda: None)
    assert [s.kind for s in sources] == ["cpu"]
    assert "NVML library not found" in unavailable["nvml"]
    with pytest.raises(TelemetryError, match=r"telemetry\.backend nvml: NVML library not found"):
        open_sources("nvml", 1, lambda: None)
    assert open_sources("cpu", 1, None)[1] == {"nvml": "telemetry.backend is cpu"}


# --- host source, sampler, tagging, aggregates --------------------------------------

def test_host_source_follows_the_process_tree():
    child = subprocess.Popen([sys.executable, "-c", "import time; x = bytearray(64 << 20); time.sleep(30)"])
    try:
        time.sleep(1.0)
        src = CpuSource(root_pid=lambda: child.pid)
        row = src.sample()[0]
        assert row["device"] == "host" and row["rss_bytes"] > 64 << 20
        assert row["sys_mem_total_bytes"] >= row["sys_mem_used_bytes"] > 0
        assert src.pids() == [child.pid]
    finally:
        child.kill()
        child.wait()
    assert CpuSource(root_pid=lambda: None).sample()[0]["rss_bytes"] is None  # no engine yet: null


def test_sampler_runs_at_its_interval_and_nulls_unavailable_signals():
    import threading

    src, _, _ = source([a100()])
    ticked = threading.Event()

    class Counting:  # the NVML source, telling the test once the thread has sampled 10 times
        kind = src.kind
        n = 0

        def sample(self):
            Counting.n += 1
            if Counting.n == 11:  # the baseline, then 10 ticks
                ticked.set()
            return src.sample()

        def describe(self):
            return src.describe()

        def close(self):
            src.close()

    started = time.time()
    sampler = Sampler([Counting()], interval_s=0.02).start()
    assert ticked.wait(60)  # however busy the machine, the thread keeps sampling
    df = sampler.stop()
    ticks = sorted(set(df["t"]))[1:11]
    # Deadline-scheduled: tick k is never before start + k × interval (a late tick is not followed by a burst).
    assert all(t >= started + (k + 1) * 0.02 - 0.005 for k, t in enumerate(ticks))
    assert df["gpm_dram_bw_pct"].isna().all()  # never zero-filled
    assert (df["util_mem_busy_pct"] == 81.0).all()
    assert sampler.describe()["unavailable"]["gpm_dram_bw_pct"].startswith("no GPM before Hopper")


def test_sampler_survives_a_broken_source():
    class Broken:
        kind = "broken"

        def sample(self):
            raise RuntimeError("boom")

        def describe(self):
            return {"backend": "broken"}

        def close(self):
            pass

    sampler = Sampler([Broken()], interval_s=0.02).start()
    time.sleep(0.1)
    assert sampler.stop().empty
    assert "broken: RuntimeError: boom" in sampler.errors[0]


def test_phase_tags_and_point_aggregates():
    rows = [{"t": t, "source": "nvml", "device": "gpu0", "mem_used_bytes": 10 * GiB + t,
             "gpm_dram_bw_pct": 50.0 if 20 <= t < 30 else None, "power_w": 300.0,
             "throttled": t == 25} for t in range(0, 40)]
    df = frame(rows)
    engine = {"status": "ok", "started_at": 5, "ready_at": 10,
              "phases": [{"phase": "capacity", "start": 12, "end": 15}]}
    points = [{"id": "P1", "point": {"phase": "decode"}, "started_at": 20, "finished_at": 30}]
    tagged = tag_phases(df, engine, points, launched_at=3)
    by_t = tagged.set_index("t")
    assert by_t.loc[2, "phase"] == "baseline" and by_t.loc[3, "phase"] == "startup"
    assert by_t.loc[12, "phase"] == "capacity" and by_t.loc[16, "phase"] == "idle"
    assert by_t.loc[20, "phase"] == "decode" and by_t.loc[20, "point_id"] == "P1"
    assert by_t.loc[30, "phase"] == "idle" and pd.isna(by_t.loc[30, "point_id"])
    agg = aggregate(tagged[tagged["point_id"] == "P1"], {"gpu0": {"spec_bandwidth_Bps": 4.8e12}})["gpu0"]
    assert agg["samples"] == 10
    assert agg["peak_mem_used_bytes"] == 10 * GiB + 29 and agg["mean_mem_used_bytes"] == 10 * GiB + 24.5
    assert agg["mean_gpm_dram_bw_pct"] == 50.0 and agg["gpm_implied_dram_Bps"] == 2.4e12
    assert agg["throttled_seen"] is True and agg["mean_power_w"] == 300.0
    assert agg["mean_clock_sm_mhz"] is None  # not sampled: None, not 0


def test_a_read_that_straddles_two_points_belongs_to_neither():
    """A server's /metrics read can take seconds on a busy machine (1.8–2.3 s seen), and its values come from some
    moment inside it: one begun in a concurrency-4 point and answered in the concurrency-48 point after it showed
    46 requests running under the first. A sample is given a point only when its whole read lay inside it."""
    rows = [{"t": 9.0, "read_s": 0.5, "source": "vllm", "device": "server", "requests_running": 4.0},
            {"t": 9.8, "read_s": 2.3, "source": "vllm", "device": "server", "requests_running": 46.0},
            {"t": 12.5, "read_s": 0.01, "source": "vllm", "device": "server", "requests_running": 48.0},
            {"t": 19.0, "source": "vllm", "device": "server", "requests_running": 48.0}]  # read_s unknown: t alone
    engine = {"status": "ok", "started_at": 1, "ready_at": 2, "phases": []}
    points = [{"id": "c4", "point": {"phase": "serve"}, "started_at": 5, "finished_at": 10},
              {"id": "c48", "point": {"phase": "serve"}, "started_at": 10, "finished_at": 20}]
    tagged = tag_phases(frame(rows), engine, points, launched_at=0).set_index("t")
    assert by_point(tagged) == {9.0: "c4", 9.8: None, 12.5: "c48", 19.0: "c48"}


def by_point(tagged: pd.DataFrame) -> dict[float, str | None]:
    return {t: (None if pd.isna(p) else p) for t, p in tagged["point_id"].items()}


def test_telemetry_table_round_trips_through_parquet(tmp_path):
    src, _, clock = source([h100()])
    rows = []
    for _ in range(3):
        clock.t += 0.2
        rows += [{"t": time.time(), "source": "nvml", **r} for r in src.sample()]
    df = frame(rows)
    df.to_parquet(tmp_path / "t.parquet", index=False)
    back = pd.read_parquet(tmp_path / "t.parquet")
    assert back["gpm_dram_bw_pct"].iloc[-1] == 71.5 and str(back["throttled"].dtype) == "boolean"


def test_stored_telemetry_checks_the_sampled_gpus_are_the_engines(tmp_path):
    from profiler.runner.children import store_telemetry
    from profiler.store import ResultsDir

    class Finished:  # a sampler that has run: its rows and its description
        partial_path = None

        def __init__(self, uuid):
            self.uuid = uuid

        def stop(self):
            return frame([{"t": 5.0, "source": "nvml", "device": "gpu0", "mem_used_bytes": 1.0}])

        def describe(self):
            return {"interval_s": 0.1, "sampler_cpu_s": 0.0, "errors": [], "unavailable": {},
                    "sources": [{"backend": "nvml", "devices": [{"label": "gpu0", "uuid": self.uuid}]}]}

    store = ResultsDir(tmp_path)
    store.prepare()
    for uuid, verdict in (("GPU-a", "ok"), ("GPU-b", "MISMATCH")):
        store.write_engine(engine_record("e", started_at=1.0, ready_at=2.0, cuda_uuids=["GPU-a"]))
        store_telemetry(store, "e", Finished(uuid), launched_at=0.0, points=[])
        rec = json.loads((tmp_path / "engines" / "e.json").read_text())
        assert rec["telemetry"]["device_match"].startswith(verdict)
    assert (tmp_path / "telemetry" / "e.parquet").is_file()


def test_point_gpm_means_keep_to_windows_inside_the_point():
    # GPM rows: each averages the window since the previous GPM row (gpm_window_s).
    # The point starts at t=10. The row at t=10.1 covers 9.9..10.1, mostly the idle before.
    rows = [{"t": t, "source": "nvml", "device": "gpu0", "gpm_dram_bw_pct": pct, "gpm_sm_pct": pct / 2,
             "gpm_window_s": w} for t, pct, w in ((10.1, 5.0, 0.2), (10.2, 60.0, 0.1), (10.5, 80.0, 0.3))]
    df = frame(rows)
    spec = {"gpu0": {"spec_bandwidth_Bps": 4.8e12}}
    agg = aggregate(df, spec, start=10.0)["gpu0"]
    # Time-weighted over the two windows inside: (60×0.1 + 80×0.3) / 0.4 = 75.
    assert agg["mean_gpm_dram_bw_pct"] == pytest.approx(75.0) and agg["mean_gpm_sm_pct"] == pytest.approx(37.5)
    assert agg["gpm_windows"] == 2 and agg["gpm_partial_windows"] is False
    assert agg["gpm_implied_dram_Bps"] == pytest.approx(3.6e12)
    # Without the start every window counts (time-weighted): (5×0.2 + 60×0.1 + 80×0.3) / 0.6.
    assert aggregate(df, spec)["gpu0"]["mean_gpm_dram_bw_pct"] == pytest.approx(31.0 / 0.6)
    # A point too short for a whole window: the straddling ones, flagged.
    short = aggregate(df[df["t"] == 10.1], spec, start=10.0)["gpu0"]
    assert short["mean_gpm_dram_bw_pct"] == 5.0 and short["gpm_partial_windows"] is True


def test_gpm_rows_carry_their_window_length():
    src, _, clock = source([h100()])
    clock.t += 0.25
    row = src.sample()[0]
    assert row["gpm_dram_bw_pct"] == 71.5 and row["gpm_window_s"] == pytest.approx(0.25)
    clock.t += 0.05
    assert src.sample()[0]["gpm_window_s"] is None  # no GPM value, no window
