"""The report's look in one place: short engine labels (E1, E2, …) with one colour per engine used by every
page, how far a prediction may miss before its cell is highlighted, and axes with plain tick labels.

Every page asks ``EngineStyle.of(results)`` for an engine's label and colour, so an engine has the same
label and colour on every page; a drawn series carries ``gid`` ``engine:<label>`` so tests can find it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import matplotlib as mpl
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.ticker import FixedLocator, FuncFormatter, MaxNLocator, NullLocator

# A prediction within ±10 % of its measurement is called in agreement; beyond, its cell is coloured by size.
TOLERANCE = 0.10
# (upper bound of |relative error| in tolerances, cell colour): amber past 1×, orange past 2.5×, red past 5×.
SEVERITY = ((2.5, "#fde9b3"), (5.0, "#f9c690"), (math.inf, "#f4a3a3"))
ENGINE_GID = "engine:"  # gid prefix of an artist drawn for one engine


def severity_color(rel_error: Any, tolerance: float = TOLERANCE) -> str | None:
    """The cell colour of a relative error: None within the tolerance, then amber, orange, red as it grows."""
    try:
        x = abs(float(rel_error))
    except (TypeError, ValueError):
        return None
    if math.isnan(x) or x <= tolerance:
        return None
    scale = x / tolerance if tolerance > 0 else math.inf
    return next(color for bound, color in SEVERITY if scale <= bound)


def _natural(s: str) -> list[Any]:
    """'len8192-bs16' before 'len32768-bs16': digit runs compare as numbers."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", s)]


@dataclass(frozen=True)
class EngineStyle:
    """Each engine configuration's short label and colour, fixed for a whole report."""

    labels: dict[str, str]
    colors: dict[str, str]

    @classmethod
    def of_ids(cls, ids: Iterable[Any]) -> EngineStyle:
        order = sorted({str(i) for i in ids if isinstance(i, str) and i}, key=_natural)
        cmap = mpl.colormaps["tab10" if len(order) <= 10 else "tab20"]
        return cls(labels={e: f"E{i + 1}" for i, e in enumerate(order)},
                   colors={e: mpl.colors.to_hex(cmap(i % cmap.N)) for i, e in enumerate(order)})

    @classmethod
    def of(cls, res: Any) -> EngineStyle:
        """The style of a loaded run: every engine id its engine, point and server records name."""
        ids: list[Any] = []
        for df in (res.engines, res.points, res.servers):
            if isinstance(df, pd.DataFrame) and "engine_id" in df:
                ids += df["engine_id"].dropna().tolist()
        return cls.of_ids(ids)

    def label(self, engine_id: Any) -> str:
        return self.labels.get(str(engine_id), str(engine_id))

    def color(self, engine_id: Any) -> str:
        return self.colors.get(str(engine_id), "#555555")

    def gid(self, engine_id: Any) -> str:
        return ENGINE_GID + self.label(engine_id)

    def relabel(self, text: Any) -> Any:
        """``text`` with every engine id replaced by its label (longest ids first); other values as they are."""
        if not isinstance(text, str) or not self.labels:
            return text
        return self._pattern().sub(lambda m: self.labels[m.group(0)], text)

    def _pattern(self) -> re.Pattern[str]:
        """An engine id standing alone: not inside a longer word or id (a point id's '--' may follow it)."""
        ids = "|".join(re.escape(e) for e in sorted(self.labels, key=len, reverse=True))
        return re.compile(rf"(?<![\w-])(?:{ids})(?=$|[^\w-]|--)")


# --- axes --------------------------------------------------------------------------------------------

def plain(x: float) -> str:
    """A tick label without exponents: 512, 2,048, 0.5, 12.5."""
    if not math.isfinite(x):
        return ""
    if abs(x) >= 100 or x == int(x):
        return f"{x:,.0f}"
    return f"{x:,.3g}"


def scale_axis(ax: Axes, which: str, values: Iterable[Any], wide: float = 8.0, nbins: int = 6) -> None:
    """Linear with plain ticks where the data's range is narrow (max/min below ``wide``), else log with plain
    ticks at powers of two (lengths, batches) or 1-2-5 steps; never '2×10¹'."""
    v = np.asarray([float(x) for x in values if x is not None and pd.notna(x)], dtype=float)
    v = v[np.isfinite(v) & (v > 0)]
    axis = ax.xaxis if which == "x" else ax.yaxis
    if len(v) and v.max() / v.min() >= wide:
        (ax.set_xscale if which == "x" else ax.set_yscale)("log")
        lo, hi = v.min(), v.max()
        twos = [2.0**k for k in range(math.floor(math.log2(lo)), math.ceil(math.log2(hi)) + 1)]
        twos = [t for t in twos if lo / 1.5 <= t <= hi * 1.5]
        if len(twos) > 6:
            twos = twos[::math.ceil(len(twos) / 6)]
        decades = [m * 10.0**k for k in range(math.floor(math.log10(lo)) - 1, math.ceil(math.log10(hi)) + 1)
                   for m in (1, 2, 5)]
        ticks = twos if _fits(twos, lo, hi) >= 3 else [t for t in decades if lo / 1.5 <= t <= hi * 1.5]
        axis.set_major_locator(FixedLocator(ticks))
        axis.set_minor_locator(NullLocator())
    else:
        axis.set_major_locator(MaxNLocator(nbins=nbins))
    axis.set_major_formatter(FuncFormatter(lambda x, _: plain(x)))


def _fits(ticks: list[float], lo: float, hi: float) -> int:
    return sum(lo / 1.5 <= t <= hi * 1.5 for t in ticks)
