"""A fake ``pynvml`` module: recorded device values, the real error classes.

Constants and ``NVMLError_*`` classes come from the real ``pynvml`` so the code
under test catches exactly what it would catch on a GPU box. Each device is a
dict of recorded values (numbers taken from an H100 SXM, an A100 and an H200 under
load); ``fail`` maps a function name to the NVML return code it raises.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pynvml as real

GiB = 2**30


def h100(**over: Any) -> dict[str, Any]:
    d = {
        "uuid": "GPU-aaaaaaaa-1111-2222-3333-444444444444", "name": "NVIDIA H100 80GB HBM3",
        "pci": "00000000:1B:00.0", "arch": real.NVML_DEVICE_ARCH_HOPPER, "mig": 0, "mig_handle": 0,
        "gpm_supported": 1, "total": 81559 * 2**20, "reserved": 529 * 2**20, "used": 72 * GiB,
        "util": (97, 81), "power_mw": 612_000,
        "energy_mj": 8_765_432_101, "clocks": {real.NVML_CLOCK_SM: 1980, real.NVML_CLOCK_MEM: 2619},
        "reasons": 0, "temp": 63, "procs": [], "gpm": {real.NVML_GPM_METRIC_DRAM_BW_UTIL: 71.5,
                                                      real.NVML_GPM_METRIC_SM_UTIL: 88.0,
                                                      real.NVML_GPM_METRIC_ANY_TENSOR_UTIL: 34.0},
        "fail": {},
    }
    d.update(over)
    return d


def a100(**over: Any) -> dict[str, Any]:
    return h100(**{"uuid": "GPU-bbbbbbbb-1111-2222-3333-444444444444", "name": "NVIDIA A100-SXM4-80GB",
                   "pci": "00000000:07:00.0", "arch": real.NVML_DEVICE_ARCH_AMPERE, "gpm_supported": 0, **over})


class FakeNvml:
    """Enough of pynvml for profiler.telemetry.nvml_source, with call counting."""

    def __init__(self, devices: list[dict[str, Any]], init_error: int | None = None, driver: str = "580.65.06"):
        self.devices = devices
        self.init_error = init_error
        self.driver = driver
        self.calls: dict[str, int] = {}
        self.shutdowns = 0
        self.freed = 0
        for name in dir(real):
            if name.startswith(("NVML_", "NVMLError", "nvmlMemory_v", "nvmlClocks")):
                setattr(self, name, getattr(real, name))

    # --- plumbing -----------------------------------------------------------------
    def _dev(self, fn: str, h: Any) -> dict[str, Any]:
        self.calls[fn] = self.calls.get(fn, 0) + 1
        dev = self.devices[h]
        code = dev["fail"].get(fn)
        if code is not None:
            raise real.NVMLError(code)
        return dev

    # --- init and enumeration ------------------------------------------------------
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise real.NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlDeviceGetCount(self) -> int:
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> int:
        for i, d in enumerate(self.devices):
            if d["uuid"] == uuid:
                return i
        raise real.NVMLError(real.NVML_ERROR_NOT_FOUND)

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return self.devices[h]["uuid"]

    def nvmlDeviceGetName(self, h: int) -> str:
        return self.devices[h]["name"]

    def nvmlDeviceGetPciInfo(self, h: int) -> Any:
        return SimpleNamespace(busId=self.devices[h]["pci"].encode())

    def nvmlDeviceIsMigDeviceHandle(self, h: int) -> int:
        return self._dev("nvmlDeviceIsMigDeviceHandle", h)["mig_handle"]

    def nvmlDeviceGetMigMode(self, h: int) -> list[int]:
        return [self._dev("nvmlDeviceGetMigMode", h)["mig"], 0]

    def nvmlDeviceGetArchitecture(self, h: int) -> int:
        return self._dev("nvmlDeviceGetArchitecture", h)["arch"]

    # --- signals ---------------------------------------------------------------------
    def nvmlDeviceGetMemoryInfo(self, h: int, version: int | None = None) -> Any:
        d = self._dev("nvmlDeviceGetMemoryInfo", h)
        if version != real.nvmlMemory_v2:
            raise AssertionError("memory must be read with the v2 struct (v1 'used' counts reserved memory)")
        free = d["total"] - d["reserved"] - d["used"]
        return SimpleNamespace(version=version, total=d["total"], reserved=d["reserved"], used=d["used"], free=free)

    def nvmlDeviceGetUtilizationRates(self, h: int) -> Any:
        gpu, mem = self._dev("nvmlDeviceGetUtilizationRates", h)["util"]
        return SimpleNamespace(gpu=gpu, memory=mem)

    def nvmlDeviceGetPowerUsage(self, h: int) -> int:
        return self._dev("nvmlDeviceGetPowerUsage", h)["power_mw"]

    def nvmlDeviceGetTotalEnergyConsumption(self, h: int) -> int:
        return self._dev("nvmlDeviceGetTotalEnergyConsumption", h)["energy_mj"]

    def nvmlDeviceGetClockInfo(self, h: int, kind: int) -> int:
        return self._dev("nvmlDeviceGetClockInfo", h)["clocks"][kind]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: int) -> int:
        return self._dev("nvmlDeviceGetCurrentClocksEventReasons", h)["reasons"]

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: int) -> int:
        return self._dev("nvmlDeviceGetCurrentClocksThrottleReasons", h)["reasons"]

    def nvmlDeviceGetTemperature(self, h: int, sensor: int) -> int:
        assert sensor == real.NVML_TEMPERATURE_GPU
        return self._dev("nvmlDeviceGetTemperature", h)["temp"]

    def nvmlDeviceGetComputeRunningProcesses(self, h: int) -> list[Any]:
        return [SimpleNamespace(pid=pid, usedGpuMemory=mem)
                for pid, mem in self._dev("nvmlDeviceGetComputeRunningProcesses", h)["procs"]]

    # --- GPM -------------------------------------------------------------------------
    def nvmlGpmQueryDeviceSupport(self, h: int) -> Any:
        return SimpleNamespace(isSupportedDevice=self._dev("nvmlGpmQueryDeviceSupport", h)["gpm_supported"])

    def nvmlGpmSampleAlloc(self) -> Any:
        return SimpleNamespace(device=None, taken=0)

    def nvmlGpmSampleFree(self, sample: Any) -> None:
        self.freed += 1

    def nvmlGpmSampleGet(self, h: int, sample: Any) -> Any:
        self._dev("nvmlGpmSampleGet", h)
        sample.device, sample.taken = h, sample.taken + 1
        return sample

    class c_nvmlGpmMetricsGet_t:
        def __init__(self) -> None:
            self.version = self.numMetrics = 0
            self.sample1 = self.sample2 = None
            self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=0, value=0.0) for _ in range(8)]

    def nvmlGpmMetricsGet(self, mg: Any) -> Any:
        assert mg.version == real.NVML_GPM_METRICS_GET_VERSION
        assert mg.sample1 is not mg.sample2, "GPM needs two distinct samples"
        d = self._dev("nvmlGpmMetricsGet", mg.sample2.device)
        for m in mg.metrics[: mg.numMetrics]:
            m.value = d["gpm"][m.metricId]
        return mg
