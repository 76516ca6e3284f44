"""The floating-point formats of mixed-precision training, described by their bits.

A format with E exponent bits and M mantissa bits spaces its values 2^-M apart relative to the
power of two they sit in, so rounding to nearest moves a normal value by at most half of that:
|x - q(x)| <= 2^-(M+1) |x|. Below the smallest normal value the spacing stops shrinking (the
subnormals are evenly spaced by `subnormal_step`), so there the bound is absolute: half a step.
Every number here is read from torch (`torch.finfo`, a cast), not typed in."""
from __future__ import annotations

from dataclasses import dataclass
from functools import cache


@dataclass(frozen=True)
class Format:
    name: str
    dtype_name: str  # attribute of torch
    exponent_bits: int
    mantissa_bits: int
    max: float  # largest finite value
    smallest_normal: float
    subnormal_step: float  # spacing of the subnormals (0 when the format has none, e.g. e8m0)

    @property
    def dtype(self):
        import torch
        return getattr(torch, self.dtype_name)

    @property
    def relative_spacing(self) -> float:
        """Distance between neighbouring normal values, relative to the power of two they sit in."""
        return 2.0 ** -self.mantissa_bits

    @property
    def rounding_bound(self) -> float:
        """Largest relative error of round-to-nearest for a normal value."""
        return 2.0 ** -(self.mantissa_bits + 1)

    @property
    def dynamic_range_bits(self) -> float:
        """log2(max / smallest normal): how many powers of two the normal values span."""
        import math
        return math.log2(self.max / self.smallest_normal)

    @property
    def max_exponent(self) -> int:
        """floor(log2(max)): the exponent of the format's largest power of two (e4m3: 8, e5m2: 15)."""
        import math
        return math.floor(math.log2(self.max))


# (name, torch dtype, exponent bits, mantissa bits)
_BITS = [("fp32", "float32", 8, 23), ("bf16", "bfloat16", 8, 7), ("fp16", "float16", 5, 10),
         ("e4m3", "float8_e4m3fn", 4, 3), ("e5m2", "float8_e5m2", 5, 2)]


@cache
def all_formats() -> dict[str, Format]:
    import torch
    out = {}
    for name, dtype_name, e, m in _BITS:
        fi = torch.finfo(getattr(torch, dtype_name))
        out[name] = Format(name, dtype_name, e, m, float(fi.max), float(fi.smallest_normal),
                           float(fi.smallest_normal) * 2.0 ** -m)
    return out


def get(name: str) -> Format:
    formats = all_formats()
    if name not in formats:
        raise KeyError(f"unknown format {name!r}; known: {', '.join(formats)}")
    return formats[name]


def representable(name: str):
    """Every finite non-negative value of an 8-bit format, sorted (for drawing its spacing)."""
    import torch
    fmt = get(name)
    if fmt.dtype.itemsize != 1:
        raise ValueError(f"{name} has {fmt.dtype.itemsize * 8} bits; only 8-bit formats are enumerated")
    values = torch.arange(128, dtype=torch.uint8).view(fmt.dtype).float()  # sign bit 0: the positive half
    return values[torch.isfinite(values)].unique().sort().values
