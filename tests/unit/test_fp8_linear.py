"""The kit's FP8 linears inside Megatron's own ColumnParallelLinear/RowParallelLinear
(helpers/runtime/fp8_linear.py) on CPU, one process: the local-GEMM override really computes the
FP8 GEMMs of helpers/precision/fp8_matmul.py (same bytes as calling them directly), through two
training steps (training_step: the per-step weight cache, the delayed recipe's histories), and
lands within FP8's error of Megatron's bf16 linear. On CPU `_scaled_mm` takes one scale per
tensor, so tensorwise and delayed run for real; the GPU runs are benchmarks/gpu_precision.py."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

SCRIPT = """
import json, torch, torch.distributed as dist
import megatron.core
from helpers.runtime import cpu_compat
cpu_compat.activate()
from megatron.core import parallel_state as ps
from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed
from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear
from megatron.core.transformer import TransformerConfig
from helpers.precision import fp8_matmul
from helpers.runtime import fp8_linear

dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29541", rank=0, world_size=1)
ps.initialize_model_parallel()
model_parallel_cuda_manual_seed(0)
config = TransformerConfig(num_layers=1, hidden_size=64, num_attention_heads=4, use_cpu_initialization=True,
                           params_dtype=torch.bfloat16, bf16=True, gradient_accumulation_fusion=False)
init = lambda w: torch.nn.init.normal_(w, std=0.05)

def pair(column, row):
    torch.manual_seed(0)
    c = column(64, 128, config=config, init_method=init, bias=False, gather_output=False)
    r = row(128, 64, config=config, init_method=init, bias=False, input_is_parallel=True, skip_bias_add=True)
    return c, r

def rel(a, b):
    return float((a.float() - b.float()).norm() / b.float().norm())

out = {}
plain_c, plain_r = pair(ColumnParallelLinear, RowParallelLinear)
for recipe in ("tensorwise", "delayed"):
    c, r = pair(*fp8_linear.linears(recipe))
    res = {"same_weights": torch.equal(c.weight, plain_c.weight) and torch.equal(r.weight, plain_r.weight)}
    for step in range(2):
        torch.manual_seed(10 + step)
        x = torch.randn(16, 2, 64, dtype=torch.bfloat16)
        xs = [x.clone().requires_grad_() for _ in range(2)]
        with fp8_matmul.training_step():
            h, _ = c(xs[0])
            y, _ = r(h)
            y.float().square().sum().backward()
        with torch.no_grad():
            want, _ = plain_r(plain_c(xs[1])[0])
        res[f"step{step}_vs_bf16"] = rel(y, want)
    if recipe == "tensorwise":  # the override is the kit's FP8 GEMM, byte for byte
        direct = fp8_matmul.fp8_matmul(fp8_matmul.fp8_matmul(x, c.weight, "tensorwise"), r.weight, "tensorwise")
        res["equals_direct"] = torch.equal(y.detach(), direct)
    else:
        s = fp8_linear.delayed_streams(c)
        res["histories"] = [bool(s.input.ready), float(s.input.history[1]) > 0, float(s.grad_output.history[0]) > 0]
    res["weight_grad"] = c.weight.grad is not None and bool(torch.isfinite(c.weight.grad).all())
    res["in_state_dict"] = sorted(k for k in c.state_dict() if "streams" in k)
    out[recipe] = res
print(json.dumps(out))
"""


def test_megatron_linears_with_the_kit_fp8_gemm_train_two_steps():
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(SCRIPT)], capture_output=True, text=True,
                          timeout=300, env={"PYTHONWARNINGS": "ignore", "CUDA_VISIBLE_DEVICES": "", "PATH": "",
                                            "PYTHONPATH": ":".join(sys.path)})
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    for recipe, res in got.items():
        assert res["same_weights"] and res["weight_grad"] and res["in_state_dict"] == [], (recipe, res)
        for step in ("step0_vs_bf16", "step1_vs_bf16"):  # e4m3 on both GEMM inputs, two linears: percent
            assert 4e-3 < res[step] < 8e-2, (recipe, step, res[step])
    assert got["tensorwise"]["equals_direct"]
    assert got["delayed"]["histories"] == [True, True, True]  # two steps recorded, gradients' too
