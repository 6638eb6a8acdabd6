"""Build tests/fake_libnvml.c and put it under the real pynvml in place of libnvidia-ml.so.1.

pynvml loads its library once into ``pynvml.nvmlLib`` and caches function pointers;
``installed`` swaps both for the fake and restores them afterwards, so later tests
see a machine without NVML again.
"""

from __future__ import annotations

import contextlib
import ctypes
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pynvml

SOURCE = Path(__file__).with_name("fake_libnvml.c")


def build(out_dir: Path, old_driver: bool = False) -> Path:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:  # `make tools` installs gcc; a test machine without one is misconfigured
        raise RuntimeError("no C compiler (cc/gcc) to build the fake NVML library")
    out = out_dir / ("libnvml-old.so" if old_driver else "libnvml.so")
    cmd = [cc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", str(out), str(SOURCE), "-lpthread"]
    if old_driver:
        cmd.insert(1, "-DOLD_DRIVER")
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return out


class FakeDriver:
    """The fake library's controls (the fake_* functions), with Python types."""

    def __init__(self, lib: ctypes.CDLL):
        self.lib = lib
        for name, args, res in (
            ("fake_add_device", [ctypes.c_char_p] * 3 + [ctypes.c_uint] + [ctypes.c_ulonglong] * 3, ctypes.c_int),
            ("fake_set_memory_used", [ctypes.c_int, ctypes.c_ulonglong], None),
            ("fake_set_readings", [ctypes.c_int] + [ctypes.c_uint] * 6 + [ctypes.c_ulonglong], None),
            ("fake_set_mig", [ctypes.c_int, ctypes.c_uint, ctypes.c_uint], None),
            ("fake_set_gpm_supported", [ctypes.c_int, ctypes.c_uint], None),
            ("fake_add_process", [ctypes.c_int, ctypes.c_uint, ctypes.c_ulonglong], None),
            ("fake_set_load", [ctypes.c_int] + [ctypes.c_double] * 4, None),
            ("fake_fail", [ctypes.c_char_p, ctypes.c_int], None),
            ("fake_calls", [ctypes.c_char_p], ctypes.c_long),
            ("fake_live_samples", [], ctypes.c_int),
            ("fake_refcount", [], ctypes.c_int),
            ("fake_reset", [], None),
        ):
            fn = getattr(lib, name)
            fn.argtypes, fn.restype = args, res
        lib.fake_reset()

    def add_device(self, name: str, uuid: str, bus_id: str, arch: int, total: int, reserved: int, used: int) -> int:
        return self.lib.fake_add_device(name.encode(), uuid.encode(), bus_id.encode(), arch, total, reserved, used)

    def readings(self, i: int, *, util: tuple[int, int] = (0, 0), power_mw: int = 0, clocks: tuple[int, int] = (0, 0),
                 temp: int = 0, reasons: int = 0) -> None:
        self.lib.fake_set_readings(i, *util, power_mw, *clocks, temp, reasons)

    def fail(self, fn: str, code: int) -> None:
        self.lib.fake_fail(fn.encode(), code)

    def calls(self, fn: str) -> int:
        return self.lib.fake_calls(fn.encode())

    def __getattr__(self, name: str):  # the remaining controls keep their C names without the prefix
        return getattr(self.lib, f"fake_{name}")


def _clear_pynvml() -> None:
    pynvml.nvmlLib = None
    pynvml._nvmlGetFunctionPointer_cache.clear()


@contextlib.contextmanager
def installed(path: Path) -> Iterator[FakeDriver]:
    """pynvml talks to the fake library at `path` inside the block."""
    _clear_pynvml()
    pynvml.nvmlLib = ctypes.CDLL(str(path))
    try:
        yield FakeDriver(pynvml.nvmlLib)
    finally:
        _clear_pynvml()
