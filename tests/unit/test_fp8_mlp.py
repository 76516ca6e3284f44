"""The fused FP8 MLP inside Megatron (helpers/runtime/fp8_mlp.py) at tensor parallel 2, with and
without sequence parallelism, two gloo ranks on CPU: FusedGeluFP8MLP (FC1, GeLU, FC2 as one
Function; its own TP communication with Megatron's mappings) gives the same bytes as Megatron's
MLP with the kit's FP8 linears (whose communication is Megatron's linears' own) over two steps,
the first on current scaling and the second on the histories': output, input gradient and both
weights' gradients on every rank. Also: the delayed recipe's layer spec builds it, the other
recipes keep Megatron's MLP, and a configuration it does not fuse falls back to Megatron's forward."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

SCRIPT = """
import json, os, sys, torch, torch.distributed as dist
import megatron.core
from helpers.runtime import cpu_compat
cpu_compat.activate()
from megatron.core import parallel_state as ps
from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed
from megatron.core.transformer import TransformerConfig
from megatron.core.transformer.mlp import MLP, MLPSubmodules
from helpers.precision import fp8_matmul
from helpers.runtime import fp8_linear, fp8_mlp, layer_specs

def run(rank, port, out):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    ps.initialize_model_parallel(tensor_model_parallel_size=2)
    model_parallel_cuda_manual_seed(0)
    result = {}
    for sp in (False, True):
        config = TransformerConfig(num_layers=1, hidden_size=64, ffn_hidden_size=256, num_attention_heads=4,
                                   use_cpu_initialization=True, params_dtype=torch.bfloat16, bf16=True,
                                   gradient_accumulation_fusion=False, add_bias_linear=False,
                                   tensor_model_parallel_size=2, sequence_parallel=sp)
        column, row = fp8_linear.linears("delayed")
        sub = MLPSubmodules(linear_fc1=column, linear_fc2=row)
        plain = MLP(config, sub, ffn_hidden_size=256)
        fused = fp8_mlp.FusedGeluFP8MLP(config, sub, ffn_hidden_size=256)
        fused.load_state_dict(plain.state_dict())
        got = {"fused_path": fused.gelu_fused, "fc1_rows": fused.linear_fc1.weight.shape[0]}
        outs = {}
        for name, mlp in (("plain", plain), ("fused", fused)):
            values = []
            for step in range(2):
                torch.manual_seed(10 + step)  # the same full input on both ranks, then this rank's part
                x = (torch.randn(16, 2, 64) * (1 + step)).to(torch.bfloat16)
                dy = torch.randn(16, 2, 64).to(torch.bfloat16)
                if sp:
                    x, dy = x.chunk(2)[rank], dy.chunk(2)[rank]
                x = x.clone().requires_grad_()
                with fp8_matmul.training_step():
                    y, bias = mlp(x)
                    y.backward(dy)
                values += [y.detach(), x.grad]
            values += [mlp.linear_fc1.weight.grad, mlp.linear_fc2.weight.grad]
            outs[name] = values
        got["equal"] = [bool(torch.equal(a, b)) for a, b in zip(outs["plain"], outs["fused"])]
        got["y_shape"] = list(outs["fused"][0].shape)
        got["bias"] = bias is None
        result[f"sp={sp}"] = got
    # the spec: delayed builds the fused MLP, tensorwise keeps Megatron's; a gated MLP is not fused
    config = TransformerConfig(num_layers=1, hidden_size=64, num_attention_heads=4, use_cpu_initialization=True,
                               add_bias_linear=False, gradient_accumulation_fusion=False)
    specs = {r: layer_specs.layer_spec(config, moe=False, attention="sdpa", fp8_recipe=r).submodules.mlp
             for r in ("delayed", "tensorwise")}
    result["spec"] = {r: getattr(m.func, "__self__", m).__name__ for r, m in specs.items()}
    gated = TransformerConfig(num_layers=1, hidden_size=64, num_attention_heads=4, use_cpu_initialization=True,
                              add_bias_linear=False, gradient_accumulation_fusion=False, gated_linear_unit=True,
                              tensor_model_parallel_size=2)
    result["gated_fused"] = fp8_mlp.FusedGeluFP8MLP(gated, sub, ffn_hidden_size=256).gelu_fused
    if rank == 0:
        with open(out, "w") as f:
            json.dump(result, f)
    dist.destroy_process_group()

if __name__ == "__main__":
    torch.multiprocessing.spawn(run, args=(int(sys.argv[1]), sys.argv[2]), nprocs=2)
"""


def test_fused_mlp_equals_megatron_mlp_with_fp8_linears_at_tp2_with_and_without_sp(tmp_path):
    script, out = tmp_path / "tp2.py", tmp_path / "out.json"
    script.write_text(textwrap.dedent(SCRIPT))
    done = subprocess.run([sys.executable, str(script), "29547", str(out)], capture_output=True, text=True,
                          timeout=300, env={"PYTHONWARNINGS": "ignore", "CUDA_VISIBLE_DEVICES": "", "PATH": "",
                                            "PYTHONPATH": ":".join(sys.path)})
    assert done.returncode == 0, done.stderr[-3000:]
    got = json.loads(out.read_text())
    for sp, tokens in (("sp=False", 16), ("sp=True", 8)):
        res = got[sp]
        assert res["fused_path"] and res["fc1_rows"] == 128, res  # the fused forward ran, FC1 split over TP
        assert res["equal"] == [True] * 6, res  # y, dx (2 steps), dW1, dW2: same bytes
        assert res["y_shape"] == [tokens, 2, 64] and res["bias"], res  # SP: this rank's half of the sequence
    assert got["spec"] == {"delayed": "FusedGeluFP8MLP", "tensorwise": "MLP"}
    assert got["gated_fused"] is False
