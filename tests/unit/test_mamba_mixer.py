"""The kit's pure-torch Mamba-2 (helpers/runtime/layers/mamba/): the chunked SSD scan against the
recurrence it computes, one token at a time, in float64; and Megatron's MambaMixer with the kit's
torch path (TorchMambaMixer, built by Megatron's own constructor) against transformers' NemotronH
mixer on the same weights.

transformers' torch path (5.12.1) is right within one chunk only (between chunks it sums the
decays over the wrong axis; helpers/launch/tiny_hf.py), so its chunk is the whole sequence here,
while the kit's mixer runs several chunks of 8: the comparison covers the kit's inter-chunk path."""
import textwrap

import pytest
import torch
import torch.nn.functional as F

from helpers.runtime.layers.mamba import ssd


def inputs(length, heads=6, head_dim=5, groups=3, state=7, batch=2, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, length, heads, head_dim, generator=g, dtype=dtype)
    dt = F.softplus(torch.randn(batch, length, heads, generator=g, dtype=dtype) - 1)
    A = -torch.rand(heads, generator=g, dtype=dtype) * 3 - 0.1
    B, C = (torch.randn(batch, length, groups, state, generator=g, dtype=dtype) for _ in range(2))
    return x, dt, A, B, C


@pytest.mark.parametrize("chunk", [1, 3, 8, 16, 64])
@pytest.mark.parametrize("d_per", ["head", "channel", None])
def test_chunked_scan_equals_the_sequential_recurrence(chunk, d_per):
    x, dt, A, B, C = inputs(length=29)  # 29: no chunk size divides it, so the padding path runs
    D = {"head": torch.randn(6, dtype=torch.float64), "channel": torch.randn(30, dtype=torch.float64),
         None: None}[d_per]
    ref = ssd.sequential_scan(x, dt, A, B, C, D)
    y = ssd.ssd_scan(x, dt, A, B, C, chunk, D)
    assert y.dtype == torch.float64
    assert ((y - ref).abs().max() / ref.abs().max()).item() <= 1e-10


def test_scan_is_causal_and_keeps_the_input_dtype():
    x, dt, A, B, C = inputs(length=20, dtype=torch.float32)
    y = ssd.ssd_scan(x, dt, A, B, C, 8)
    x2 = x.clone()
    x2[:, 12:] += 1.0  # change the future only
    y2 = ssd.ssd_scan(x2, dt, A, B, C, 8)
    assert y.dtype == torch.float32
    assert torch.equal(y[:, :12], y2[:, :12]) and not torch.equal(y[:, 12:], y2[:, 12:])


def test_causal_conv_sees_only_the_last_width_positions():
    g = torch.Generator().manual_seed(1)
    x, w, b = (torch.randn(2, 9, 4, generator=g, dtype=torch.float64), torch.randn(4, 1, 3, generator=g,
               dtype=torch.float64), torch.randn(4, generator=g, dtype=torch.float64))
    out = ssd.causal_conv1d(x, w, b)
    padded = F.pad(x, (0, 0, 2, 0))  # two zeros before the first position
    by_hand = sum(padded[:, k:k + 9] * w[:, 0, k] for k in range(3)) + b
    assert torch.allclose(out, F.silu(by_hand), rtol=0, atol=1e-12)


MIXER_VS_HF = """
import weakref
import torch
from megatron.core.process_groups_config import ProcessGroupCollection
from megatron.core.ssm.mamba_mixer import MambaMixerSubmodules
from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear
from megatron.core.transformer import TransformerConfig
from transformers.models.nemotron_h.modeling_nemotron_h import NemotronHMamba2Mixer
from helpers.launch import tiny_hf
from helpers.runtime.layers.mamba.mixer import TorchMambaMixer

torch.manual_seed(0)
hf_config = tiny_hf.hf_config("nemotronh", layers_block_type=["mamba"], chunk_size=64)
hf = NemotronHMamba2Mixer(hf_config, layer_idx=0)
with torch.no_grad():  # every parameter random (HF's own init leaves norm and D at 1.0)
    for name, p in hf.named_parameters():
        p.copy_({"dt_bias": torch.log(torch.expm1(torch.empty_like(p).uniform_(0.01, 0.1))),
                 "A_log": torch.log(torch.empty_like(p).uniform_(1, 16))}.get(name, 1 + 0.3 * torch.randn_like(p))
               if name in ("dt_bias", "A_log", "norm.weight", "D") else 0.2 * torch.randn_like(p))
    hf.in_proj.weight[-8:] *= 0.1  # the dt rows: steps stay above time_step_min, which only HF's torch path clamps to
config = TransformerConfig(num_layers=1, hidden_size=64, num_attention_heads=4, use_cpu_initialization=True,
                           mamba_num_heads=8, mamba_head_dim=16, mamba_num_groups=2, mamba_state_dim=16)
kit = TorchMambaMixer(config, MambaMixerSubmodules(in_proj=ColumnParallelLinear, out_proj=RowParallelLinear),
                      d_model=64, chunk_size=8, layer_number=1, pg_collection=ProcessGroupCollection.use_mpu_process_groups())
names = {"in_proj.weight": "in_proj.weight", "conv1d_weight": "conv1d.weight", "conv1d_bias": "conv1d.bias",
         "dt_bias": "dt_bias", "A_log": "A_log", "D": "D", "norm.weight": "norm.weight", "out_proj.weight": "out_proj.weight"}
theirs = dict(hf.named_parameters())
assert sorted(n for n, _ in kit.named_parameters()) == sorted(names), [n for n, _ in kit.named_parameters()]
with torch.no_grad():
    for mine, hf_name in names.items():
        dict(kit.named_parameters())[mine].copy_(theirs[hf_name])
x = torch.randn(2, 40, 64)  # [b, s, h] for transformers; Megatron takes [s, b, h]
with torch.no_grad():
    ref = hf.torch_forward(x)
    out, bias = kit(x.transpose(0, 1).contiguous())
print(type(kit.norm).__name__, bias is None, ((out.transpose(0, 1) - ref).abs().max() / ref.abs().max()).item())

# What autograd keeps for the backward of a bf16 mixer (40 tokens x 3 sequences, chunks of 8): every
# saved tensor's storage once, without the parameters and the mixer's input (the layer's term).
# Counted once the forward is done, with its output held: a tensor saved by a step whose result
# nothing reads (the scan's state after the last chunk) is freed with that step during the forward,
# so it is not kept; weak references tell which saved tensors are still alive, and storages alive
# together cannot share an address (keying by the address of every storage ever saved, one freed
# during the forward let a later one take its address and its entry: the count then depended on
# where the allocator put things).
config = TransformerConfig(num_layers=1, hidden_size=64, num_attention_heads=4, use_cpu_initialization=True,
                           mamba_num_heads=6, mamba_head_dim=4, mamba_num_groups=3, mamba_state_dim=16,
                           params_dtype=torch.bfloat16, bf16=True)
kit = TorchMambaMixer(config, MambaMixerSubmodules(in_proj=ColumnParallelLinear, out_proj=RowParallelLinear),
                      d_model=64, chunk_size=8, layer_number=1, pg_collection=ProcessGroupCollection.use_mpu_process_groups())
x = torch.randn(40, 3, 64, dtype=torch.bfloat16, requires_grad=True)
skip = {p.untyped_storage().data_ptr() for p in kit.parameters()} | {x.untyped_storage().data_ptr()}
saved = []
with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(weakref.ref(t)) or t, lambda t: t):
    out = kit(x)
kept = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in (r() for r in saved) if t is not None}
print(sum(n for ptr, n in kept.items() if ptr not in skip) - 6 * 4 * 4)  # less the fp32 copy of the norm weight (per layer, not per token)
"""


def test_megatron_mixer_with_the_kit_path_equals_transformers_nemotron_h(megatron_cpu):
    """MambaMixer's own constructor builds it (parameter names and shapes as Megatron's; the
    kernel-less ImportError sidestepped), and 40 tokens in 5 chunks of 8 give transformers'
    output to fp32 rounding (measured 1.6e-7). In the session's Megatron child (tests/unit/conftest.py)."""
    norm, no_bias, diff, saved = megatron_cpu(textwrap.dedent(MIXER_VS_HF)).split()[-4:]
    assert norm == "GroupedGatedRMSNorm" and no_bias == "True"
    assert float(diff) <= 1e-5, diff
    # The memory planner's term for the mixer (local backend) counts the same bytes.
    from helpers.job.layout import Layout
    from helpers.job.models import ModelPreset
    from helpers.memory.activations import torch_mamba_mixer
    from helpers.memory.training import Training
    model = ModelPreset("mixer", num_layers=1, hidden_size=64, num_attention_heads=4, ffn_hidden_size=64,
                        vocab_size=64, hybrid_pattern="M", mamba_num_heads=6, mamba_head_dim=4, mamba_num_groups=3,
                        mamba_state_dim=16, mamba_chunk_size=8)
    planned = torch_mamba_mixer(model, Layout(seq_len=40, micro_batch=3), Training(precision="bf16"), T=120)
    assert planned == int(saved), (planned, saved)
