"""Scaling recipes: how a tensor is fitted into an 8-bit format and read back.

An FP8 format has few powers of two (e4m3: 448 down to 2^-6 normal, 2^-9 with subnormals), so
a tensor is multiplied by a scale first that puts its largest magnitude (amax) at the format's
max; dequantising divides it out. The recipes differ in how many values share one scale and
when the amax is measured:

  tensorwise  one scale per tensor, from this tensor's amax ("current scaling")
  delayed     one scale per tensor, from the amax *history* of earlier steps (Transformer Engine's
              DelayedScaling: no extra pass over the data before the GEMM; a new, larger amax
              saturates until the history catches up)
  rowwise     one scale per row (per token of an activation, per output channel of a weight)
  mxfp8       one power-of-two scale (E8M0: 8 exponent bits, no mantissa) per block of 32
              consecutive values along the last dimension (OCP Microscaling v1.0; Blackwell's
              tensor cores take these scales directly)

Every quantise here works in fp32, saturates at the format's max (a plain cast would give NaN
for e4m3, inf for e5m2) and returns a `Quantized` that dequantises itself."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from helpers.precision import formats

MX_BLOCK = 32  # OCP MX: values per shared scale
E8M0_MIN_EXP, E8M0_MAX_EXP = -127, 127  # exponents an E8M0 scale can hold (255 is NaN)


@dataclass
class Quantized:
    data: torch.Tensor  # the 8-bit values (or the low-precision cast)
    scale: torch.Tensor  # dequantisation multiplier (fp32), broadcast over data; mxfp8: one per block
    fmt: formats.Format
    recipe: str
    clipped: int = 0  # elements whose scaled magnitude exceeded the format's max (saturated)
    block: int | None = None

    def dequantize(self, dtype=torch.float32) -> torch.Tensor:
        values = self.data.to(torch.float32)
        if self.block:
            blocks = values.reshape(*values.shape[:-1], -1, self.block) * self.scale.unsqueeze(-1)
            return blocks.reshape(values.shape).to(dtype)
        return (values * self.scale).to(dtype)

    def element_scale(self) -> torch.Tensor:
        """The dequantisation multiplier of every element (data's shape)."""
        if self.block:
            return self.scale.repeat_interleave(self.block, dim=-1)
        return self.scale.expand(self.data.shape)


def saturating_cast(scaled: torch.Tensor, fmt: formats.Format) -> tuple[torch.Tensor, int]:
    """`scaled` (fp32) in `fmt`, clamped to +-max first; also how many elements were clamped."""
    # (a value scaled to exactly amax * max/amax may land an fp32 ulp above max: not a saturation)
    clipped = int((scaled.abs() > fmt.max * (1 + 2.0 ** -20)).sum())
    return scaled.clamp(-fmt.max, fmt.max).to(fmt.dtype), clipped


def cast(x: torch.Tensor, fmt: str = "bf16") -> Quantized:
    """No scaling at all: what bf16/fp16 training does (and what FP8 without scaling would do)."""
    f = formats.get(fmt)
    data, clipped = saturating_cast(x.to(torch.float32), f)
    return Quantized(data, torch.ones((), dtype=torch.float32), f, "cast", clipped)


def scale_and_cast(x: torch.Tensor, fmt: str, dim: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The current-scaling core, without host synchronisation (the FP8 linear's GEMMs call it on
    the GPU): (x scaled into `fmt` and cast, the fp32 dequantisation multiplier). dim=None: one
    scale for the tensor; dim=d: one per slice along d, kept as a size-1 dimension."""
    f = formats.get(fmt)
    return scale_and_cast_to(x, f.max, f.dtype, dim)


def scale_and_cast_to(x: torch.Tensor, fmax: float, dtype: torch.dtype, dim: int | None):
    """scale_and_cast with the format as plain numbers (what torch.compile traces on the GPU)."""
    x32 = x.to(torch.float32)
    amax = x32.abs().amax() if dim is None else x32.abs().amax(dim=dim, keepdim=True)
    scale = torch.where(amax > 0, fmax / amax, torch.ones_like(amax))
    return (x32 * scale).clamp(-fmax, fmax).to(dtype), 1.0 / scale


def _counted(x: torch.Tensor, fmt: str, dim: int | None, recipe: str) -> Quantized:
    f = formats.get(fmt)
    data, inverse = scale_and_cast(x, fmt, dim)
    _, clipped = saturating_cast(x.to(torch.float32) / inverse, f)
    return Quantized(data, inverse, f, recipe, clipped)


def tensorwise(x: torch.Tensor, fmt: str = "e4m3") -> Quantized:
    return _counted(x, fmt, None, "tensorwise")


def rowwise(x: torch.Tensor, fmt: str = "e4m3", dim: int = -1) -> Quantized:
    """One scale per slice along `dim` (dim=-1: per row of a [tokens, features] matrix)."""
    return _counted(x, fmt, dim, "rowwise")


def mxfp8(x: torch.Tensor, fmt: str = "e4m3", block: int = MX_BLOCK) -> Quantized:
    """Blocks of `block` values along the last dimension share a power-of-two scale 2^e (E8M0).
    e = ceil(log2(amax / max)) puts the block's amax at or just under the format's max, so nothing
    saturates (OCP's reference takes floor(log2 amax) - emax, which can clip the block's largest
    values; NVIDIA's MXFP8 recipe rounds the scale up, as here)."""
    f = formats.get(fmt)
    if x.shape[-1] % block:
        raise ValueError(f"mxfp8 needs the last dimension ({x.shape[-1]}) to be a multiple of the block ({block})")
    x32 = x.to(torch.float32)
    blocks = x32.reshape(*x32.shape[:-1], -1, block)
    amax = blocks.abs().amax(dim=-1)
    exponent = torch.ceil(torch.log2(torch.where(amax > 0, amax / f.max, torch.ones_like(amax))))
    exponent = exponent.clamp(E8M0_MIN_EXP, E8M0_MAX_EXP)
    # The scale as the hardware stores it: one E8M0 byte (exact for every power of two in range)
    scale = torch.exp2(exponent).to(torch.float8_e8m0fnu).to(torch.float32)
    data, clipped = saturating_cast(blocks / scale.unsqueeze(-1), f)
    return Quantized(data.reshape(x.shape), scale, f, "mxfp8", clipped, block)


@dataclass
class DelayedScaling:
    """Transformer Engine's delayed scaling for one tensor stream (e.g. one layer's input): the
    scale of step t comes from the largest amax of the last `history` steps before t; step t's own
    amax only joins the history afterwards. The first step has no history and uses scale 1, as TE
    starts."""
    fmt: str = "e4m3"
    history: int = 16
    amaxes: list = field(default_factory=list)

    def current_scale(self) -> float:
        if not self.amaxes:
            return 1.0
        amax = max(self.amaxes[-self.history:])
        return formats.get(self.fmt).max / amax if amax > 0 else 1.0

    def quantize(self, x: torch.Tensor) -> Quantized:
        f = formats.get(self.fmt)
        x32 = x.to(torch.float32)
        scale = self.current_scale()
        data, clipped = saturating_cast(x32 * scale, f)
        self.amaxes.append(float(x32.abs().amax()))
        del self.amaxes[:-self.history]
        return Quantized(data, torch.tensor(1.0 / scale), f, "delayed", clipped)


RECIPES = ("tensorwise", "delayed", "rowwise", "mxfp8")


def quantize(x: torch.Tensor, recipe: str, fmt: str = "e4m3") -> Quantized:
    """One call per recipe name (delayed: a fresh history warmed up on this tensor, i.e. the
    steady state of a stream whose amax does not change)."""
    if recipe == "tensorwise":
        return tensorwise(x, fmt)
    if recipe == "rowwise":
        return rowwise(x, fmt)
    if recipe == "mxfp8":
        return mxfp8(x, fmt)
    if recipe == "delayed":
        stream = DelayedScaling(fmt)
        stream.quantize(x)
        return stream.quantize(x)
    if recipe == "cast":
        return cast(x, fmt)
    raise ValueError(f"unknown recipe {recipe!r}; known: {', '.join(RECIPES + ('cast',))}")


# ---- measuring --------------------------------------------------------------------------------
def errors(x: torch.Tensor, q: Quantized) -> dict:
    """How far the round trip moved `x`: the mean relative error of the nonzero elements (what
    most values lose), the relative error of the whole tensor (||x - x'|| / ||x||, dominated by the
    largest values), the share of elements flushed to zero and the share saturated."""
    x32 = x.to(torch.float32)
    err = (q.dequantize() - x32).abs()
    nonzero = x32 != 0
    return {
        "mean_relative": float((err[nonzero] / x32.abs()[nonzero]).mean()) if nonzero.any() else 0.0,
        "norm_relative": float(err.norm() / x32.norm()) if x32.norm() > 0 else 0.0,
        "flushed_to_zero": float(((q.dequantize() == 0) & nonzero).float().mean()),
        "saturated": q.clipped / max(x32.numel(), 1),
    }


def bound_ratio(x: torch.Tensor, q: Quantized) -> float:
    """max over elements of |x - x'| / allowed, where allowed is the format's rounding bound:
    half a relative step for a value in the normal range, half a subnormal step (times the
    element's scale) below it, plus fp32's own rounding of the scaling multiply. <= 1 means
    every element round-tripped as well as the format can; saturated elements are left out
    (they are counted by `errors`)."""
    x32 = x.to(torch.float32)
    s = q.element_scale()
    err = (q.dequantize() - x32).abs()
    fp32_slack = 4 * 2.0 ** -24 * x32.abs()
    allowed = q.fmt.rounding_bound * x32.abs() + 0.5 * q.fmt.subnormal_step * s + fp32_slack
    inside = (x32.abs() / s) <= q.fmt.max * (1 + 2.0 ** -20)
    if not inside.any():
        return math.inf
    return float((err[inside] / allowed[inside]).max())
