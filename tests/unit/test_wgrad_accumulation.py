"""The kit's stand-in for apex's weight-gradient accumulation (helpers/runtime/layers/wgrad_accumulation.py):
which jobs turn Megatron's `gradient_accumulation_fusion` on, and that Megatron's own linear, once
the stand-in is installed, sums each backward's weight gradient into `main_grad` through it and
hands DDP no gradient to add again. Its CUDA kernel (torch's addmm with an fp32 out_dtype, CUDA
only) is checked against an fp64 reference on a GPU by benchmarks/speed/wgrad_accumulation.py
(docs/results/gpu_profile.md); here, on the CPU, the same call made in fp32 stands in for it."""
from __future__ import annotations

import dataclasses
import json
import textwrap

from helpers.job.spec import JobSpec

SCRIPT = """
import json, torch
from megatron.core.tensor_parallel import layers
from megatron.core.tensor_parallel.layers import ColumnParallelLinear
from megatron.core.transformer import TransformerConfig
from helpers.runtime.layers import wgrad_accumulation

def config(fused):
    return TransformerConfig(num_layers=1, hidden_size=32, num_attention_heads=4, use_cpu_initialization=True,
                             gradient_accumulation_fusion=fused)

try:
    ColumnParallelLinear(32, 48, config=config(True), init_method=torch.nn.init.xavier_normal_, bias=False)
    refused = None
except RuntimeError as e:
    refused = str(e)
wgrad_accumulation.install()
calls = []
real = wgrad_accumulation.wgrad_gemm_accum_fp32
def on_cpu(total_input, grad_output, main_grad):  # addmm's out_dtype form is CUDA-only: the same sum in fp32
    calls.append((tuple(total_input.shape), tuple(grad_output.shape), tuple(main_grad.shape)))
    main_grad.addmm_(grad_output.t(), total_input)
wgrad_accumulation.wgrad_gemm_accum_fp32 = on_cpu
try:
    torch.manual_seed(0)
    fused = ColumnParallelLinear(32, 48, config=config(True), init_method=torch.nn.init.xavier_normal_, bias=False)
    plain = ColumnParallelLinear(32, 48, config=config(False), init_method=torch.nn.init.xavier_normal_, bias=False)
    with torch.no_grad():
        plain.weight.copy_(fused.weight)
    fused.weight.main_grad = torch.zeros(48, 32)  # as Megatron's DDP gives every parameter
    fused.weight.grad_added_to_main_grad = False
    for step in range(2):  # two microbatches: accumulated, not overwritten
        x = torch.randn(5, 3, 32)
        fused(x)[0].square().sum().backward()
        plain(x)[0].square().sum().backward()
    rel = float((fused.weight.main_grad - plain.weight.grad).abs().max() / plain.weight.grad.abs().max())
    print(json.dumps({"refused_before_install": refused, "calls": calls, "rel": rel,
                      "flag": fused.weight.grad_added_to_main_grad}))
finally:
    wgrad_accumulation.wgrad_gemm_accum_fp32 = real
"""


def test_megatrons_linear_accumulates_main_grad_through_the_stand_in(megatron_cpu):
    got = json.loads(megatron_cpu(textwrap.dedent(SCRIPT)).strip().splitlines()[-1])
    assert "fused_weight_gradient_mlp_cuda" in got["refused_before_install"]  # what the stand-in replaces
    assert got["calls"] == [[[15, 32], [15, 48], [48, 32]]] * 2  # one GEMM per backward, tokens flattened
    assert got["rel"] <= 1e-6, got  # fp32 both ways: the same sum in another order
    assert got["flag"] is True  # Megatron told DDP the gradient is in main_grad already


TIED = """
import json, torch
from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.transformer import TransformerConfig
from helpers.runtime.layers import wgrad_accumulation

wgrad_accumulation.install()
real = wgrad_accumulation.wgrad_gemm_accum_fp32
def on_cpu(total_input, grad_output, main_grad):  # the same sum in fp32 (addmm's out_dtype form is CUDA-only)
    main_grad.addmm_(grad_output.t(), total_input)
wgrad_accumulation.wgrad_gemm_accum_fp32 = on_cpu
try:
    def model(fused):
        torch.manual_seed(0)
        config = TransformerConfig(num_layers=2, hidden_size=32, num_attention_heads=4, use_cpu_initialization=True,
                                   hidden_dropout=0.0, attention_dropout=0.0, gradient_accumulation_fusion=fused)
        gpt = GPTModel(config=config, transformer_layer_spec=get_gpt_layer_local_spec(), vocab_size=64,
                       max_sequence_length=16, share_embeddings_and_output_weights=True)
        return DistributedDataParallel(config, DistributedDataParallelConfig(grad_reduce_in_fp32=True), gpt)
    grads = {}
    for fused in (True, False):
        ddp = model(fused)
        ddp.zero_grad_buffer()
        g = torch.Generator().manual_seed(1)
        for _ in range(2):  # two microbatches
            tokens = torch.randint(0, 64, (2, 16), generator=g)
            positions = torch.arange(16).expand(2, 16)
            ddp(tokens, positions, None, labels=torch.roll(tokens, -1, 1)).sum().backward()
        grads[fused] = {n: p.main_grad.clone() for n, p in ddp.module.named_parameters()}
    rel = {n: float((grads[True][n] - grads[False][n]).abs().max() / grads[False][n].abs().max()) for n in grads[False]}
    print(json.dumps({"rel": rel}))
finally:
    wgrad_accumulation.wgrad_gemm_accum_fp32 = real
"""


def test_tied_embeddings_keep_both_gradients_through_ddp(megatron_cpu):
    """A model whose output layer reuses the embedding (SmolLM2, Llama 3.2, Gemma): the output layer's
    weight gradient goes into main_grad by the fused GEMM and the embedding's own arrives through DDP's
    hook; Megatron's `zero_out_wgrad` keeps the placeholder from hiding the second. Every parameter's
    main_grad after two microbatches equals the unfused model's."""
    got = json.loads(megatron_cpu(textwrap.dedent(TIED)).strip().splitlines()[-1])["rel"]
    assert "embedding.word_embeddings.weight" in got and "output_layer.weight" not in got  # one tensor, tied
    assert max(got.values()) <= 1e-5, got  # fp32 both ways; the same sums in another order


def test_gpu_jobs_take_the_fusion_and_cpu_jobs_do_not():
    from helpers.runtime import build

    gpu = JobSpec(device="cuda", precision="bf16")
    assert build.job_fields(gpu, on_cpu=False, bf16=True)["gradient_accumulation_fusion"] is True
    assert build.job_fields(gpu, on_cpu=True, bf16=True)["gradient_accumulation_fusion"] is False
    fp8 = dataclasses.replace(gpu, precision="fp8", backend="local")  # the kit's FP8 linears accumulate too
    assert build.job_fields(fp8, on_cpu=False, bf16=True)["gradient_accumulation_fusion"] is True
    te = dataclasses.replace(fp8, backend="te")  # TE's linears accumulate into main_grad themselves
    assert build.job_fields(te, on_cpu=False, bf16=True)["gradient_accumulation_fusion"] is True
