"""What a token costs (issue #29): dollars per million output tokens and the deployment's kilowatts.

A GPU-hour's price is the catalog's (one cloud list price per GPU with its provider, URL and date:
``price_source``), or the user's ``--price GPU=USD_PER_HOUR``. Electricity is added only where the user
gives its price (``--power-price`` USD per kWh): a cloud price already includes it. For one GPU of a
replica decoding at its predicted tokens/s per GPU and board power P,

    $/M output tokens = (price per GPU-hour + P/1000 · price per kWh) / (tokens/s per GPU · 3600) · 10⁶

and the deployment draws GPUs needed · P (the boards only: not the hosts, the network or cooling).
Intervals carry the latency model's and the power model's: the low cost is the fast step at the low power.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from analysis import catalog
from analysis.catalog import GPU

MAX_PRICE = 1e6  # USD per GPU-hour or per kWh: anything above is a typo


class Pricing(BaseModel):
    """The prices a plan uses: per-GPU overrides of the catalog's, and electricity."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    gpu_usd_per_hour: dict[str, float] = Field(default_factory=dict, description="catalog GPU name → USD per hour")
    power_usd_per_kwh: float | None = Field(None, ge=0, le=MAX_PRICE)

    def price(self, gpu: GPU) -> tuple[float | None, str | None]:
        """(USD per GPU-hour, where it comes from) for one GPU; (None, None) where none is known."""
        if gpu.name in self.gpu_usd_per_hour:
            return self.gpu_usd_per_hour[gpu.name], "--price"
        return gpu.price_usd_per_hour, gpu.price_source


def _number(option: str, text: str, value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise ValueError(f"{option} {text!r}: {value!r} is not a number (USD)") from None
    if not 0 < x <= MAX_PRICE:
        raise ValueError(f"{option} {text!r}: {value} must be positive and at most {MAX_PRICE:,.0f} USD")
    return x


def parse_prices(text: str) -> dict[str, float]:
    """``h100-sxm=2.99,h200=3.8`` → {catalog name: USD per GPU-hour}; GPU names as ``--gpu`` takes them."""
    out: dict[str, float] = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"--price {text!r}: give GPU=USD_PER_HOUR pairs separated by commas "
                             "(h100-sxm=2.99,h200=3.80)")
        gpu, _ = catalog.resolve_gpu(name.strip())
        if gpu.name in out:
            raise ValueError(f"--price {text!r}: {gpu.name} is priced twice (give each GPU once)")
        out[gpu.name] = _number("--price", text, value.strip())
    return out


def parse_power_price(text: str) -> float:
    return _number("--power-price", text, text.strip())


def usd_per_million_tokens(usd_per_gpu_hour: float, tokens_per_s_per_gpu: float, power_w: float | None,
                           power_usd_per_kwh: float | None) -> float:
    """The module docstring's formula (electricity only where its price is given and the power is known)."""
    hourly = usd_per_gpu_hour + (power_w / 1000 * power_usd_per_kwh if power_w and power_usd_per_kwh else 0.0)
    return hourly / (tokens_per_s_per_gpu * 3600) * 1e6
