"""The host CPUs' energy from RAPL (Running Average Power Limit), through the kernel's powercap sysfs.

``/sys/class/powercap/intel-rapl:N`` is one CPU package's domain (AMD's Zen packages appear under the same
name); its ``energy_uj`` counts microjoules and wraps at ``max_energy_range_uj``. kvprof counts the package
domains: the cores, caches and memory controller of each socket. Not the DRAM subdomain some servers expose,
and not ``psys``, the platform domain, which would count the packages twice. The counter is unwrapped here,
so a sample's ``rapl_energy_j`` only ever grows.

Since Linux 5.10 ``energy_uj`` is readable by root only (CVE-2020-8694), and virtual machines rarely expose
RAPL at all: either is a reason in ``unavailable``, never a zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

POWERCAP = Path("/sys/class/powercap")


@dataclass
class RaplDomain:
    name: str  # package-0 …
    energy_file: Path
    range_uj: int  # the counter wraps here
    last_uj: int = -1
    total_uj: int = 0  # unwrapped since the first read


@dataclass
class Rapl:
    """The package domains under ``root`` and why there are none, if there are none."""

    root: Path = POWERCAP
    domains: list[RaplDomain] = field(default_factory=list)
    unavailable: str | None = None

    def __post_init__(self) -> None:
        tops = sorted(p for p in self.root.glob("intel-rapl:*") if p.name.count(":") == 1)
        if not tops:
            self.unavailable = (f"{self.root} has no intel-rapl domain (the kernel or the virtual machine does "
                                "not expose RAPL)")
            return
        for top in tops:
            try:
                name = (top / "name").read_text().strip()
            except OSError:
                continue
            if not name.startswith("package"):
                continue  # psys: the whole platform, the packages again
            try:
                rng = int((top / "max_energy_range_uj").read_text())
                first = int((top / "energy_uj").read_text())
            except PermissionError:
                self.unavailable = (f"{top / 'energy_uj'} is readable by root only (Linux 5.10 on, CVE-2020-8694): "
                                    "run kvprof as root or make it readable to measure the CPUs' energy")
                self.domains = []
                return
            except (OSError, ValueError) as exc:
                self.unavailable = f"{top}: {type(exc).__name__}: {exc}"
                self.domains = []
                return
            self.domains.append(RaplDomain(name, top / "energy_uj", rng, last_uj=first))
        if not self.domains:
            self.unavailable = f"{self.root} has RAPL domains but no package domain"

    def read_j(self) -> float | None:
        """Joules the package domains used since this reader opened (None: not available, or a read failed)."""
        if self.unavailable:
            return None
        for d in self.domains:
            try:
                raw = int(d.energy_file.read_text())
            except (OSError, ValueError):
                return None
            d.total_uj += raw - d.last_uj if raw >= d.last_uj else raw + d.range_uj - d.last_uj
            d.last_uj = raw
        return sum(d.total_uj for d in self.domains) / 1e6

    def describe(self) -> dict[str, object]:
        return {"rapl_domains": [d.name for d in self.domains]}
