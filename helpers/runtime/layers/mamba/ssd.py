"""The three computations of a Mamba-2 mixer that Megatron-Core 0.19.2 takes from `mamba_ssm` /
`causal_conv1d` kernels, in plain torch (autograd gives the backward), written from the Mamba-2
paper (Dao & Gu 2024, "Transformers are SSMs", section 6: the SSD algorithm):

  causal_conv1d   depthwise convolution over time, each channel its own width-w filter, left
                  padding only (position t sees t-w+1 .. t), then SiLU;
  ssd_scan        the selective state-space recurrence, per head h with state S [n, p]:
                      S_t = exp(dt_t A_h) S_{t-1} + dt_t B_t x_t^T,   y_t = C_t^T S_t + D_h x_t
                  computed chunk by chunk: inside a chunk as a masked "attention" with decays
                  (the quadratic form), between chunks as the recurrence on chunk-final states;
  gated_rmsnorm   RMSNorm of y * silu(z) over groups of channels (norm after the gate).

`sequential_scan` is the recurrence itself, one step per token: the reference the tests hold the
chunked scan to (fp64, 1e-10). Shapes follow the kernels': batch first, [b, l, heads, head_dim]."""
from __future__ import annotations

import torch
import torch.nn.functional as F


def causal_conv1d(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [b, l, c], weight [c, 1, w] (Megatron's conv1d_weight), bias [c] -> silu(conv) [b, l, c]."""
    width = weight.shape[-1]
    out = F.conv1d(F.pad(x.transpose(1, 2), (width - 1, 0)), weight, bias, groups=x.shape[-1])
    return F.silu(out).transpose(1, 2)


def _segment_sums(a: torch.Tensor) -> torch.Tensor:
    """a [..., q] log-decays of q steps -> [..., q, q]: entry (i, j) = a_{j+1} + ... + a_i for
    j <= i (the log of how much step j's contribution has decayed by step i), -inf above the
    diagonal (the future), so exp() gives the causal decay matrix without overflowing."""
    q = a.shape[-1]
    cum = torch.cumsum(a, dim=-1)
    sums = cum[..., :, None] - cum[..., None, :]
    causal = torch.ones(q, q, dtype=torch.bool, device=a.device).tril()
    return sums.masked_fill(~causal, float("-inf"))


def ssd_scan(x, dt, A, B, C, chunk_size: int, D=None) -> torch.Tensor:
    """x [b, l, h, p], dt [b, l, h] (after softplus), A [h] (negative), B, C [b, l, g, n] with
    h divisible by g (head i reads group i // (h/g)), D [h] or [h*p] or None -> y [b, l, h, p].
    Computes in fp32 at least (fp64 stays fp64); returns x's dtype."""
    dtype = x.dtype
    work = torch.promote_types(dtype, torch.float32)
    b, length, h, p = x.shape
    heads_per_group = h // B.shape[2]
    x, dt, A = x.to(work), dt.to(work), A.to(work)
    B, C = (t.to(work).repeat_interleave(heads_per_group, dim=2) for t in (B, C))  # [b, l, h, n]
    pad = -length % chunk_size  # zero steps at the end: dt = 0 leaves the state alone
    if pad:
        x, dt, B, C = (F.pad(t, (0,) * (2 * (t.dim() - 2)) + (0, pad)) for t in (x, dt, B, C))
    chunks = x.shape[1] // chunk_size

    def by_chunk(t):  # [b, l, ...] -> [b, chunks, q, ...]
        return t.reshape(b, chunks, chunk_size, *t.shape[2:])

    x, dt, B, C = map(by_chunk, (x, dt, B, C))
    a = (dt * A).permute(0, 3, 1, 2)  # [b, h, chunks, q]: log-decay of each step
    a_cum = torch.cumsum(a, dim=-1)
    xdt = x * dt[..., None]  # the input each step writes, scaled by its step size

    # 1. Inside each chunk: y_i += sum_{j<=i} (C_i . B_j) exp(a_{j+1..i}) dt_j x_j.
    decay = torch.exp(_segment_sums(a))  # [b, h, chunks, q, q]
    y = torch.einsum("bcihn,bcjhn,bhcij,bcjhp->bcihp", C, B, decay, xdt)

    # 2. What each chunk alone leaves in the state at its end: sum_j exp(a_{j+1..end}) B_j dt_j x_j^T.
    to_end = torch.exp(a_cum[..., -1:] - a_cum)  # [b, h, chunks, q]
    chunk_states = torch.einsum("bcjhn,bhcj,bcjhp->bchnp", B, to_end, xdt)

    # 3. Between chunks, the recurrence on chunk-final states: S_c enters chunk c.
    chunk_decay = torch.exp(a_cum[..., -1])  # [b, h, chunks]: decay over one whole chunk
    state = torch.zeros(b, h, B.shape[-1], p, dtype=work, device=x.device)
    entering = []
    for c in range(chunks):
        entering.append(state)
        state = chunk_decay[:, :, c, None, None] * state + chunk_states[:, c]
    entering = torch.stack(entering, dim=1)  # [b, chunks, h, n, p]

    # 4. The entering state, decayed to step i and read out by C_i.
    y = y + torch.einsum("bcihn,bhci,bchnp->bcihp", C, torch.exp(a_cum), entering)
    y = y.reshape(b, chunks * chunk_size, h, p)[:, :length]
    if D is not None:
        y = y + x.reshape(b, -1, h, p)[:, :length] * D.to(work).reshape(h, -1)  # D per head or per channel
    return y.to(dtype)


def sequential_scan(x, dt, A, B, C, D=None) -> torch.Tensor:
    """The recurrence one token at a time (the reference for ssd_scan; same arguments)."""
    b, length, h, p = x.shape
    heads_per_group = h // B.shape[2]
    B, C = (t.repeat_interleave(heads_per_group, dim=2) for t in (B, C))
    state = torch.zeros(b, h, B.shape[-1], p, dtype=x.dtype, device=x.device)
    ys = []
    for t in range(length):
        keep = torch.exp(dt[:, t] * A)[..., None, None]  # [b, h, 1, 1]
        state = keep * state + torch.einsum("bhn,bh,bhp->bhnp", B[:, t], dt[:, t], x[:, t])
        ys.append(torch.einsum("bhn,bhnp->bhp", C[:, t], state))
    y = torch.stack(ys, dim=1)
    return y if D is None else y + x * D.reshape(h, -1)


def gated_rmsnorm(y: torch.Tensor, z: torch.Tensor | None, weight: torch.Tensor, group_size: int,
                  eps: float) -> torch.Tensor:
    """RMSNorm of y * silu(z) (of y when z is None: gated already) within each group of
    `group_size` channels, times weight (per channel); computed in fp32 at least, returned in y's dtype."""
    work = torch.promote_types(y.dtype, torch.float32)
    gated = y.to(work) if z is None else y.to(work) * F.silu(z.to(work))
    groups = gated.reshape(*gated.shape[:-1], -1, group_size)
    normed = groups * torch.rsqrt(groups.pow(2).mean(-1, keepdim=True) + eps)
    return (normed.reshape(gated.shape) * weight.to(work)).to(y.dtype)
