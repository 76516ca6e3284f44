"""TorchMambaMixer replaces: the `mamba_ssm` / `causal_conv1d` kernel calls of Megatron-Core
0.19.2's MambaMixer (`mamba_split_conv1d_scan_combined` and mamba_ssm's gated RMSNorm), which do
not exist without those CUDA/Triton packages. Everything else is Megatron's own, unchanged: the
parameters and their names (in_proj, conv1d_weight/bias, dt_bias, A_log, D, norm.weight,
out_proj), their TP split and the partition sizes of the packed in_proj/conv1d, the checkpoint
layout, the context-parallel all-to-all (MambaContextParallel) — so Megatron's TP/SP/CP logic
and Megatron-Bridge's Nemotron-H mappings apply as they are. The math is helpers/runtime/layers/mamba/ssd.py.

TP: in_proj is column-parallel, so each rank holds whole heads and whole groups (z, x, B, C, dt
of its heads); the scan and the grouped norm need nothing from other ranks; out_proj is
row-parallel. SP: in_proj all-gathers the sequence and out_proj reduce-scatters it (Megatron's
linears); the mixer in between always sees the full sequence.

Training and evaluation only: decoding with cached conv/SSM states (inference) stays with the
kernels."""
from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from megatron.core.ssm import mamba_mixer
from megatron.core.ssm.mamba_mixer import MambaMixer
from megatron.core.transformer.utils import make_sharded_tensors_for_checkpoint

from helpers.errors import KitError
from helpers.runtime.layers.mamba import ssd


class GroupedGatedRMSNorm(torch.nn.Module):
    """The mixer's output norm (mamba_ssm's RMSNormGated, norm after the gate): RMSNorm over
    groups of `group_size` channels of x * silu(z), or of x when it is already gated. Same
    constructor arguments and parameter name (`weight`) as the kernel's, so MambaMixer builds it."""

    def __init__(self, hidden_size, eps=1e-5, group_size=None, norm_before_gate=False, device=None, dtype=None):
        super().__init__()
        if norm_before_gate:
            raise KitError("GroupedGatedRMSNorm normalises after the gate only (Megatron's MambaMixer asserts the same)")
        self.eps, self.group_size = eps, group_size or hidden_size
        self.weight = torch.nn.Parameter(torch.ones(hidden_size, device=device, dtype=dtype))

    def forward(self, x, z=None):
        return ssd.gated_rmsnorm(x, z, self.weight, self.group_size, self.eps)

    def sharded_state_dict(self, prefix="", sharded_offsets=(), metadata=None):
        """As Megatron's ExtendedRMSNorm: the weight is split over TP along its only axis."""
        return make_sharded_tensors_for_checkpoint(self.state_dict(prefix="", keep_vars=True), prefix, {"weight": 0},
                                                   sharded_offsets, tp_group=self.tp_group,
                                                   dp_cp_group=metadata["dp_cp_group"])


@contextlib.contextmanager
def _kernels_not_needed():
    """MambaMixer.__init__ raises ImportError when mamba_ssm failed to import (its module flag
    HAVE_MAMBA_SSM) and builds its output norm from mamba_ssm's class (a MagicMock then). Neither is
    needed by this subclass, which calls no kernel: for the parent constructor only, the flag says
    so and the norm class is the kit's. Module globals are read at call time; both are restored."""
    saved = mamba_mixer.HAVE_MAMBA_SSM, mamba_mixer.ExtendedRMSNorm
    mamba_mixer.HAVE_MAMBA_SSM, mamba_mixer.ExtendedRMSNorm = True, GroupedGatedRMSNorm
    try:
        yield
    finally:
        mamba_mixer.HAVE_MAMBA_SSM, mamba_mixer.ExtendedRMSNorm = saved


class TorchMambaMixer(MambaMixer):
    """Megatron's MambaMixer with its training path (`_ssm_training`) in pure torch."""

    def __init__(self, *args, **kwargs):
        with _kernels_not_needed():
            super().__init__(*args, **kwargs)

    def _ssm_training(self, zxBCdt: torch.Tensor, packed_seq_params=None) -> torch.Tensor:
        """zxBCdt [l, b, d] (this TP rank's heads; under CP: the full sequence, this CP rank's
        heads) -> the normed, gated SSM output [l, b, d_inner_local_tp], as Megatron's kernel path."""
        if packed_seq_params is not None:
            raise KitError("packed sequences are not supported by the kit's torch Mamba mixer "
                           "(helpers/runtime/layers/mamba/mixer.py); train without packing or use mamba_ssm")
        cp, n = self.cp, self.d_state
        heads, groups, inner = cp.nheads_local_tpcp, cp.ngroups_local_tpcp, cp.d_inner_local_tpcp
        zxBCdt = zxBCdt.transpose(0, 1)  # [b, l, d]: batch first, as the scan works
        b, length, _ = zxBCdt.shape
        z, xBC, dt = torch.split(zxBCdt, [inner, inner + 2 * groups * n, heads], dim=-1)
        xBC = ssd.causal_conv1d(xBC, cp.get_conv1d_weight(), cp.get_conv1d_bias())
        x, B, C = torch.split(xBC, [inner, groups * n, groups * n], dim=-1)
        dt = F.softplus(dt.float() + cp.get_dt_bias().float())
        A = -torch.exp(cp.get_A_log().float())
        y = ssd.ssd_scan(x.reshape(b, length, heads, self.headdim), dt, A, B.reshape(b, length, groups, n),
                         C.reshape(b, length, groups, n), self.chunk_size, D=cp.get_D())
        # The gate now, the norm after CP's all-to-all (its groups are this TP rank's, all heads).
        y = (y.reshape(b, length, inner).float() * F.silu(z.float())).to(zxBCdt.dtype)
        y = cp.post_conv_ssm(y.transpose(0, 1).contiguous(), packed_seq_params)
        return self.norm(y) if self.rmsnorm else y

    def _ssm_prefill(self, zxBCdt, conv_state=None, ssm_state=None, **kwargs):
        """Megatron's non-memory-efficient path (use_mamba_mem_eff_path=False, or inference):
        the same computation when there is no cached state to read or write."""
        if conv_state is not None or ssm_state is not None or any(v is not None for v in kwargs.values()):
            raise KitError("decoding with cached Mamba states is not supported by the kit's torch Mamba mixer "
                           "(helpers/runtime/layers/mamba/mixer.py); it trains and evaluates whole sequences")
        return self._ssm_training(zxBCdt)
