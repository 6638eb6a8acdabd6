"""NVML telemetry: per-device memory, utilisation, GPM bandwidth, power and energy, clocks, throttling.

Written against ``pynvml`` from the ``nvidia-ml-py`` package (ARCHITECTURE.md §6). The
module is injected (``NvmlSource(nvml=...)``) so tests drive every branch with a
fake that raises the real ``pynvml.NVMLError_*`` classes.

A signal the device or driver cannot give is recorded in ``unavailable`` with the
reason and sampled as None — never as zero, never silently dropped.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from typing import Any

# Fields this source writes per device row (None when unavailable).
SIGNALS = (
    "mem_used_bytes", "mem_total_bytes", "mem_reserved_bytes", "mem_free_bytes",
    "util_gpu_pct", "util_mem_busy_pct",
    "gpm_dram_bw_pct", "gpm_sm_pct", "gpm_tensor_pct",
    "power_w", "clock_sm_mhz", "clock_mem_mhz", "clocks_event_reasons", "throttled",
    "temperature_c", "engine_mem_bytes", "gpm_window_s", "energy_j", "energy_t",
)
GPM_SIGNALS = ("gpm_dram_bw_pct", "gpm_sm_pct", "gpm_tensor_pct")
GPM_MIN_WINDOW_S = 0.1  # GPM metrics need samples at least 100 ms apart
# NVML's total-energy counter costs microseconds a read on most drivers but milliseconds of CPU on some: 3.2 ms on
# an H200 in a Firecracker VM (driver 580.159.04), 5 % of a core at 10 Hz, the sampler's whole cost there
# (benchmarks/telemetry_overhead.py --calls). The counter is cumulative, so reading it less often loses only the
# sharpness of a point's ends (interpolated between reads): it is read once its last read's CPU time over
# ENERGY_CPU_SHARE has passed (at most that share of one core), and at least every ENERGY_MAX_INTERVAL_S.
ENERGY_CPU_SHARE = 0.005
ENERGY_MAX_INTERVAL_S = 1.0

# Clock-event reasons that mean the GPU was held below its clocks (idle and
# application-clock settings are not throttling).
THROTTLE_REASONS = {
    "sw_power_cap": 0x4, "hw_slowdown": 0x8, "sw_thermal": 0x20, "hw_thermal": 0x40, "hw_power_brake": 0x80,
}
THROTTLE_MASK = sum(THROTTLE_REASONS.values())


class NvmlUnavailable(RuntimeError):
    """NVML cannot be used at all (no library, no driver, no devices)."""


@dataclass
class Device:
    label: str  # "gpu0", "gpu1" … in the engine's CUDA order
    handle: Any
    uuid: str
    name: str
    pci_bus_id: str
    mig: bool = False
    spec_bandwidth_Bps: float | None = None
    gpm: tuple[Any, Any] | None = None  # two GPM samples, swapped each window (freed on close)
    gpm_t: float = 0.0
    gpm_on: bool = False  # GPM was set up; describe() says so after close too
    energy_next_t: float = float("-inf")  # when the energy counter is next read (its cost sets the interval)

    def describe(self) -> dict[str, Any]:
        return {"label": self.label, "uuid": self.uuid, "name": self.name, "pci_bus_id": self.pci_bus_id,
                "mig": self.mig, "spec_bandwidth_Bps": self.spec_bandwidth_Bps, "gpm": self.gpm_on}


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def _reason(nvml: Any, exc: Exception) -> str:
    if isinstance(exc, nvml.NVMLError_NotSupported):
        return "not supported by this device or driver"
    if isinstance(exc, nvml.NVMLError_NoPermission):
        return "no permission"
    if isinstance(exc, getattr(nvml, "NVMLError_FunctionNotFound", ())):
        return "driver too old for this NVML call"
    if isinstance(exc, getattr(nvml, "NVMLError_ArgumentVersionMismatch", ())):
        return "the driver does not know this call's struct version (pynvml newer than the driver)"
    return f"NVML error: {exc}"


def _kinds(nvml: Any, *names: str) -> tuple[type, ...]:
    return tuple(k for k in (getattr(nvml, n, None) for n in names) if k)


def _permanent(nvml: Any, exc: Exception) -> bool:
    # Errors that will not change during a run: asking again only costs time.
    return isinstance(exc, _kinds(nvml, "NVMLError_NotSupported", "NVMLError_NoPermission",
                                  "NVMLError_FunctionNotFound", "NVMLError_ArgumentVersionMismatch"))


def _too_old(nvml: Any, exc: Exception) -> bool:
    """The driver lacks this entry point or struct version: an older one may answer."""
    return isinstance(exc, _kinds(nvml, "NVMLError_FunctionNotFound", "NVMLError_ArgumentVersionMismatch"))


def resolve_visible(nvml: Any, cuda_visible: str | None, count: int) -> list[Any]:
    """NVML handles of the first `count` CUDA devices the engine will see.

    CUDA_VISIBLE_DEVICES may hold indices or (prefixes of) GPU-/MIG- UUIDs. Indices
    are CUDA's, which the runner pins to PCI bus order (CUDA_DEVICE_ORDER=PCI_BUS_ID),
    so they are matched to NVML devices sorted by PCI bus id — never NVML's index.
    """
    all_handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
    by_pci = sorted(all_handles, key=lambda h: _text(nvml.nvmlDeviceGetPciInfo(h).busId).lower())
    if cuda_visible is None or not cuda_visible.strip():
        entries = [str(i) for i in range(len(by_pci))]
    else:
        entries = [e.strip() for e in cuda_visible.split(",") if e.strip()]
    handles = []
    for entry in entries[:count]:
        if entry.startswith(("GPU-", "MIG-")):
            try:
                handles.append(nvml.nvmlDeviceGetHandleByUUID(entry))
                continue
            except nvml.NVMLError:
                pass  # CUDA accepts unique UUID prefixes; NVML wants the whole UUID
            found = [h for h in all_handles if _text(nvml.nvmlDeviceGetUUID(h)).startswith(entry)]
            if len(found) != 1:
                raise NvmlUnavailable(f"CUDA_VISIBLE_DEVICES entry {entry!r} matches {len(found)} NVML devices")
            handles.append(found[0])
        else:
            try:
                idx = int(entry)
            except ValueError:
                raise NvmlUnavailable(f"CUDA_VISIBLE_DEVICES entry {entry!r} is neither an index nor a UUID") from None
            if not 0 <= idx < len(by_pci):
                raise NvmlUnavailable(f"CUDA_VISIBLE_DEVICES index {idx} but NVML sees {len(by_pci)} devices")
            handles.append(by_pci[idx])
    if len(handles) < count:
        raise NvmlUnavailable(f"the engine needs {count} devices but only {len(handles)} are visible")
    return handles


@dataclass
class NvmlSource:
    """Samples the engine's devices. ``engine_pids`` (a callable) names the engine's processes."""

    count: int = 1
    cuda_visible: str | None = None
    nvml: Any = None
    engine_pids: Any = None
    kind: str = "nvml"
    devices: list[Device] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)
    driver: str | None = None
    clock: Any = time.monotonic  # injectable so tests can step GPM windows
    cpu_clock: Any = time.thread_time  # what a read costs the sampler's thread (injectable, like clock)
    notes: set[str] = field(default_factory=set)
    _transient: dict[str, int] = field(default_factory=dict)
    _legacy: set[str] = field(default_factory=set)  # signals read through an older NVML entry point
    _energy_slowest: float = 0.0  # the dearest energy read that was spaced out (CPU seconds), for the note

    def __post_init__(self) -> None:
        if self.nvml is None:
            try:
                import pynvml
            except ImportError as exc:  # pragma: no cover - a hard dependency of kvprof
                raise NvmlUnavailable(f"pynvml (nvidia-ml-py) is not installed: {exc}") from None
            self.nvml = pynvml
        nv = self.nvml
        if self.cuda_visible is None:
            self.cuda_visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        try:
            nv.nvmlInit()
        except nv.NVMLError_LibraryNotFound:
            raise NvmlUnavailable("NVML library not found (no NVIDIA driver on this machine)") from None
        except nv.NVMLError as exc:
            raise NvmlUnavailable(f"NVML did not initialise: {exc}") from None
        try:
            if nv.nvmlDeviceGetCount() == 0:
                raise NvmlUnavailable("NVML sees no devices")
            self.driver = _text(nv.nvmlSystemGetDriverVersion())
            handles = resolve_visible(nv, self.cuda_visible, self.count)
        except BaseException:
            nv.nvmlShutdown()
            raise
        for i, h in enumerate(handles):
            self.devices.append(self._describe(f"gpu{i}", h))

    def _describe(self, label: str, h: Any) -> Device:
        nv = self.nvml
        name = _text(nv.nvmlDeviceGetName(h))
        dev = Device(label=label, handle=h, uuid=_text(nv.nvmlDeviceGetUUID(h)), name=name,
                     pci_bus_id=_text(nv.nvmlDeviceGetPciInfo(h).busId))
        # A MIG instance (a MIG- UUID), or a whole GPU partitioned into instances.
        try:
            flag = nv.nvmlDeviceIsMigDeviceHandle(h)  # a ctypes c_uint in pynvml
            dev.mig = bool(getattr(flag, "value", flag))
        except nv.NVMLError:
            dev.mig = False
        if not dev.mig:
            with contextlib.suppress(nv.NVMLError):  # no MIG support at all: pre-Ampere, consumer parts
                dev.mig = nv.nvmlDeviceGetMigMode(h)[0] == 1
        try:
            from analysis.catalog import gpu

            dev.spec_bandwidth_Bps = gpu(name).bandwidth_tbs * 1e12
        except Exception:
            self.unavailable.setdefault("spec_bandwidth_Bps", f"{name!r} is not in the GPU catalog")
        self._setup_gpm(dev)
        return dev

    def _setup_gpm(self, dev: Device) -> None:
        nv = self.nvml
        reason = None
        if dev.mig:
            reason = "MIG mode: device-level GPM does not describe one instance"
        else:
            try:
                arch = nv.nvmlDeviceGetArchitecture(dev.handle)
                if arch < nv.NVML_DEVICE_ARCH_HOPPER:
                    reason = f"no GPM before Hopper (NVML architecture id {arch})"
            except nv.NVMLError:
                pass  # unknown architecture: let the support query decide
            if reason is None:
                try:
                    if not nv.nvmlGpmQueryDeviceSupport(dev.handle).isSupportedDevice:
                        reason = "GPM not supported on this device"
                except nv.NVMLError as exc:
                    reason = f"GPM support query failed: {_reason(nv, exc)}"
        if reason is None:
            try:
                a, b = nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()
                nv.nvmlGpmSampleGet(dev.handle, a)
                dev.gpm, dev.gpm_t, dev.gpm_on = (a, b), self.clock(), True
            except nv.NVMLError as exc:
                reason = f"GPM sampling failed: {_reason(nv, exc)}"
        if reason is not None:
            for s in GPM_SIGNALS:
                self.unavailable.setdefault(s, reason)

    def _read(self, signal: str, fn: Any, *args: Any) -> Any:
        if signal in self.unavailable:
            return None
        try:
            return fn(*args)
        except self.nvml.NVMLError as exc:
            self._failed(signal, exc)
            return None

    def _failed(self, signal: str, exc: Exception) -> None:
        if _permanent(self.nvml, exc):
            self.unavailable[signal] = _reason(self.nvml, exc)
        else:  # a transient error: this sample is missing, the signal stays on
            self._transient[signal] = self._transient.get(signal, 0) + 1

    def _read_compat(self, signal: str, current: Any, legacy: Any, why: str, *args: Any) -> Any:
        """Read through the current entry point, or the older one when the driver lacks it.

        NVML keeps old entry points for old drivers (before 510 no v2 memory struct,
        before 535 no clock-event reasons); losing a whole signal to that would be worse
        than reading it the old way. ``why`` is recorded once as a note.
        """
        if signal in self.unavailable:
            return None
        if signal not in self._legacy:
            try:
                return current(*args)
            except self.nvml.NVMLError as exc:
                if not _too_old(self.nvml, exc):
                    self._failed(signal, exc)
                    return None
                self._legacy.add(signal)
                self.notes.add(f"{signal}: {_reason(self.nvml, exc)}; {why}")
        return self._read(signal, legacy, *args)

    def _memory(self, h: Any) -> Any:
        nv = self.nvml
        mem = self._read_compat("mem_used_bytes", lambda d: nv.nvmlDeviceGetMemoryInfo(d, nv.nvmlMemory_v2),
                                nv.nvmlDeviceGetMemoryInfo,
                                "read with the v1 struct, whose 'used' includes the driver's reserved memory", h)
        if "mem_used_bytes" in self._legacy:
            self.unavailable.setdefault("mem_reserved_bytes", "driver has no v2 memory struct (NVML < 510)")
        return mem

    def _gpm(self, dev: Device) -> dict[str, float | None]:
        """GPM averages over the window since this device's last GPM sample; its length goes
        along (``gpm_window_s``) so a point's mean can drop windows that began before it."""
        out: dict[str, float | None] = dict.fromkeys((*GPM_SIGNALS, "gpm_window_s"))
        if dev.gpm is None or GPM_SIGNALS[0] in self.unavailable:
            return out
        now = self.clock()
        if now - dev.gpm_t < GPM_MIN_WINDOW_S:
            return out  # too soon for a valid window: this row has no GPM value
        nv = self.nvml
        prev, cur = dev.gpm
        try:
            nv.nvmlGpmSampleGet(dev.handle, cur)
            mg = nv.c_nvmlGpmMetricsGet_t()
            mg.version = nv.NVML_GPM_METRICS_GET_VERSION
            mg.numMetrics = 3
            mg.sample1, mg.sample2 = prev, cur
            ids = (nv.NVML_GPM_METRIC_DRAM_BW_UTIL, nv.NVML_GPM_METRIC_SM_UTIL, nv.NVML_GPM_METRIC_ANY_TENSOR_UTIL)
            for i, metric in enumerate(ids):
                mg.metrics[i].metricId = metric
            nv.nvmlGpmMetricsGet(mg)
        except nv.NVMLError as exc:
            if _permanent(nv, exc):
                for s in GPM_SIGNALS:
                    self.unavailable[s] = f"GPM: {_reason(nv, exc)}"
            return out
        window, dev.gpm, dev.gpm_t = now - dev.gpm_t, (cur, prev), now
        for i, s in enumerate(GPM_SIGNALS):
            if mg.metrics[i].nvmlReturn == 0:
                out[s] = float(mg.metrics[i].value)
        if any(out[s] is not None for s in GPM_SIGNALS):
            out["gpm_window_s"] = window
        return out

    def sample(self) -> list[dict[str, Any]]:
        nv = self.nvml
        pids = set(self.engine_pids()) if self.engine_pids else set()
        rows = []
        for dev in self.devices:
            h = dev.handle
            row: dict[str, Any] = {"device": dev.label}
            mem = self._memory(h)
            for key, attr in (("mem_used_bytes", "used"), ("mem_total_bytes", "total"),
                              ("mem_reserved_bytes", "reserved"), ("mem_free_bytes", "free")):
                row[key] = None if mem is None or not hasattr(mem, attr) else int(getattr(mem, attr))
            util = self._read("util_gpu_pct", nv.nvmlDeviceGetUtilizationRates, h)
            row["util_gpu_pct"] = None if util is None else float(util.gpu)
            row["util_mem_busy_pct"] = None if util is None else float(util.memory)
            row.update(self._gpm(dev))
            power = self._read("power_w", nv.nvmlDeviceGetPowerUsage, h)
            row["power_w"] = None if power is None else power / 1000.0
            row.update(self._energy(dev))
            row["clock_sm_mhz"] = self._read("clock_sm_mhz", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_SM)
            row["clock_mem_mhz"] = self._read("clock_mem_mhz", nv.nvmlDeviceGetClockInfo, h, nv.NVML_CLOCK_MEM)
            reasons = self._read_compat(
                "clocks_event_reasons", getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons",
                                               nv.nvmlDeviceGetCurrentClocksThrottleReasons),
                nv.nvmlDeviceGetCurrentClocksThrottleReasons, "read as throttle reasons (same bits)", h)
            row["clocks_event_reasons"] = reasons
            row["throttled"] = None if reasons is None else bool(reasons & THROTTLE_MASK)
            row["temperature_c"] = self._read("temperature_c", nv.nvmlDeviceGetTemperature, h,
                                              nv.NVML_TEMPERATURE_GPU)
            row["engine_mem_bytes"] = self._engine_memory(h, pids)
            rows.append(row)
        return rows

    def _energy(self, dev: Device) -> dict[str, float | None]:
        """The board's energy since the driver loaded (Volta on): a point's energy is its rise over the point.
        Stamped at its own call (the row's t is the whole source's read: every device, every signal). Where a
        read costs more than ENERGY_CPU_SHARE of a core at 10 Hz, read only that often (module note); a row
        between reads has none."""
        now = self.clock()
        if now < dev.energy_next_t:
            return {"energy_j": None, "energy_t": None}
        t0, c0 = time.time(), self.cpu_clock()
        energy = self._read("energy_j", self.nvml.nvmlDeviceGetTotalEnergyConsumption, dev.handle)
        t1, cost = time.time(), self.cpu_clock() - c0
        interval = min(cost / ENERGY_CPU_SHARE, ENERGY_MAX_INTERVAL_S)
        # A read cheap enough for every sample at 10 Hz is taken every sample (the counter's ends as sharp as
        # the sampler's); a dearer one waits out its interval.
        dev.energy_next_t = now + interval if interval > GPM_MIN_WINDOW_S else float("-inf")
        if interval > GPM_MIN_WINDOW_S:
            self._energy_slowest = max(self._energy_slowest, cost)
        if energy is None:
            return {"energy_j": None, "energy_t": None}
        return {"energy_j": energy / 1000.0, "energy_t": (t0 + t1) / 2}

    def read_counters_next(self) -> None:
        """Read the energy counter at the next sample whatever its cost (the baseline's and the last samples)."""
        for dev in self.devices:
            dev.energy_next_t = float("-inf")

    def _engine_memory(self, h: Any, pids: set[int]) -> int | None:
        procs = self._read("engine_mem_bytes", self.nvml.nvmlDeviceGetComputeRunningProcesses, h)
        if procs is None or not pids:
            return None
        mine = [p.usedGpuMemory for p in procs if p.pid in pids]
        if not mine and procs:
            # Host PIDs do not match ours inside a container's PID namespace.
            self.notes.add("engine_mem_bytes: none of the device's processes has an engine pid (container?)")
        known = [m for m in mine if m is not None]
        return sum(known) if known else None

    def describe(self) -> dict[str, Any]:
        notes = set(self.notes)
        if self._energy_slowest:
            c = self._energy_slowest
            notes.add(f"energy_j: NVML's energy counter took up to {1e3 * c:.1f} ms of CPU a read here, so it was "
                      f"read about every {min(c / ENERGY_CPU_SHARE, ENERGY_MAX_INTERVAL_S):.2f} s, not every "
                      f"sample (at most {100 * ENERGY_CPU_SHARE:g} % of a core)")
        return {"backend": self.kind, "driver": self.driver, "devices": [d.describe() for d in self.devices],
                "unavailable": dict(self.unavailable), "transient_errors": dict(self._transient),
                "notes": sorted(notes)}

    def close(self) -> None:
        nv = self.nvml
        for dev in self.devices:
            if dev.gpm:
                for s in dev.gpm:
                    with contextlib.suppress(nv.NVMLError):
                        nv.nvmlGpmSampleFree(s)
                dev.gpm = None
        with contextlib.suppress(nv.NVMLError):
            nv.nvmlShutdown()
