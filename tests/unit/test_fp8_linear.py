"""The kit's FP8 linears inside Megatron's own ColumnParallelLinear/RowParallelLinear
(helpers/runtime/layers/fp8_linear.py) on CPU, one process: the local-GEMM override really computes the
FP8 GEMMs of helpers/precision/fp8_matmul.py (same bytes as calling them directly), through two
training steps (training_step: the per-step weight cache, the delayed recipe's histories), and
lands within FP8's error of Megatron's bf16 linear. On CPU `_scaled_mm` takes one scale per
tensor, so tensorwise and delayed run for real; the GPU runs are benchmarks/speed/precision.py."""
from __future__ import annotations

import json
import textwrap

import pytest

SCRIPT = """
import json, torch
from megatron.core.tensor_parallel.layers import ColumnParallelLinear, RowParallelLinear
from megatron.core.transformer import TransformerConfig
from helpers.precision import fp8_matmul
from helpers.runtime.layers import fp8_linear

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

# The output layer (JobSpec.fp8_output_layer): a tiny GPTModel's logits through the swapped class,
# untied and tied to the embedding, against the same model's bf16 logits
from megatron.core.models.gpt import GPTModel
from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
from megatron.core.transformer.module import Float16Module

def gpt(tied, post_process=True):
    torch.manual_seed(1)
    return Float16Module(config, GPTModel(  # as the kit's worker wraps it: bf16 throughout
        config=config, transformer_layer_spec=get_gpt_layer_local_spec(), vocab_size=96, max_sequence_length=16,
        share_embeddings_and_output_weights=tied, post_process=post_process))

seen = {}
def keep(module, args, output):
    seen["x"], seen["y"] = args[0].detach(), output[0].detach()

tokens = torch.randint(0, 96, (2, 16))
positions = torch.arange(16).expand(2, 16)
for tied in (False, True):
    model = gpt(tied)
    keys = sorted(model.state_dict())
    res = {"swapped": fp8_linear.use_in_output_layer(model.module, "tensorwise"),
           "class": type(model.module.output_layer).__name__, "same_state_dict": sorted(model.state_dict()) == keys}
    model.module.output_layer.register_forward_hook(keep)
    with fp8_matmul.training_step():
        logits = model(tokens, positions, None)
        logits.float().square().mean().backward()
    plain = gpt(tied)
    plain.load_state_dict(model.state_dict())  # the same weights (Megatron's init draws from its own RNG tracker)
    plain.eval(), model.eval()  # no dropout: the two forwards must see the same activations
    with torch.no_grad():
        want, again = plain(tokens, positions, None), model(tokens, positions, None)
    weight = model.module.shared_embedding_or_output_weight() if tied else model.module.output_layer.weight
    res["logits_vs_bf16"] = rel(again, want)
    res["equals_direct"] = torch.equal(seen["y"], fp8_matmul.fp8_matmul(seen["x"], weight, "tensorwise"))
    res["weight_grad"] = weight.grad is not None and bool(torch.isfinite(weight.grad).all())
    out[f"output_layer_tied_{tied}"] = res
out["output_layer_not_last_stage"] = fp8_linear.use_in_output_layer(gpt(False, post_process=False).module, "delayed")

# The dense GeLU MLP with the GeLU inside the FP8 casts (fp8_mlp.FP8GeluMLP, delayed recipe) against
# Megatron's MLP around the same FP8 linears: a two-layer GPT, three training steps, the same bytes
from helpers.runtime.layers import fp8_mlp
from tests.fp8_sgd import sgd_steps

def mlp_gpt(fused, bias=False):
    torch.manual_seed(1)
    cfg = TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4, use_cpu_initialization=True,
                            params_dtype=torch.bfloat16, bf16=True, gradient_accumulation_fusion=False,
                            add_bias_linear=bias, hidden_dropout=0.0, attention_dropout=0.0)
    spec = get_gpt_layer_local_spec()
    fp8_linear.use_in(spec, "delayed")
    swapped = fp8_mlp.use_in(spec, "delayed") if fused else False
    return swapped, Float16Module(cfg, GPTModel(config=cfg, transformer_layer_spec=spec, vocab_size=96,
                                                max_sequence_length=16))

runs = {}
for fused in (False, True):
    swapped, model = mlp_gpt(fused)
    mlp = model.module.decoder.layers[0].mlp
    seen_losses, grads = sgd_steps(model, tokens, positions)
    runs[fused] = {"swapped": swapped, "class": type(mlp).__name__, "fuses": mlp.fuses(None) if fused else None,
                   "losses": seen_losses, "grads": grads}
out["gelu_mlp"] = {"swapped": runs[True]["swapped"], "class": runs[True]["class"], "fuses": runs[True]["fuses"],
                   "unfused_class": runs[False]["class"], "losses": runs[True]["losses"],
                   "same_losses": runs[True]["losses"] == runs[False]["losses"],
                   "same_grads": all(torch.equal(a, b) for ga, gb in zip(runs[True]["grads"], runs[False]["grads"])
                                     for a, b in zip(ga, gb)),
                   "biased_fuses": mlp_gpt(True, bias=True)[1].module.decoder.layers[0].mlp.fuses(None),
                   "tensorwise_swapped": fp8_mlp.use_in(get_gpt_layer_local_spec(), "tensorwise")}
print(json.dumps(out))
"""


@pytest.fixture(scope="module")
def got(megatron_cpu) -> dict:
    """One script for every check below, in the session's Megatron child (tests/unit/conftest.py)."""
    return json.loads(megatron_cpu(textwrap.dedent(SCRIPT)).strip().splitlines()[-1])


def test_megatron_linears_with_the_kit_fp8_gemm_train_two_steps(got):
    for recipe in ("tensorwise", "delayed"):
        res = got[recipe]
        assert res["same_weights"] and res["weight_grad"] and res["in_state_dict"] == [], (recipe, res)
        for step in ("step0_vs_bf16", "step1_vs_bf16"):  # e4m3 on both GEMM inputs, two linears: percent
            assert 4e-3 < res[step] < 8e-2, (recipe, step, res[step])
    assert got["tensorwise"]["equals_direct"]
    assert got["delayed"]["histories"] == [True, True, True]  # two steps recorded, gradients' too


def test_the_output_layer_takes_the_fp8_gemm_untied_and_tied(got):
    """fp8_output_layer: GPTModel's own output layer (not built from the layer spec) switched to the
    FP8 class keeps its state dict, computes exactly the kit's FP8 GEMM of its input and weight (the
    embedding's when tied), lands within FP8's error of the bf16 logits (one e4m3 GEMM: percent;
    0 would mean it never ran FP8), and gives the weight a finite gradient; a pipeline stage without
    an output layer is left alone."""
    for tied in (False, True):
        res = got[f"output_layer_tied_{tied}"]
        assert res["swapped"] == 1 and res["class"] == "FP8ColumnParallelLinear" and res["same_state_dict"], res
        assert res["equals_direct"] and res["weight_grad"], res
        assert 4e-3 < res["logits_vs_bf16"] < 8e-2, res
    assert got["output_layer_not_last_stage"] == 0


def test_the_gelu_mlp_with_fused_casts_trains_as_megatrons_mlp_on_the_same_fp8_linears(got):
    """Under the delayed recipe the layer spec's dense MLP is FP8GeluMLP (the GeLU inside the FP8 casts):
    a two-layer GPT trains three steps with the same losses and gradients, bit for bit, as Megatron's
    MLP around the same FP8 linears (on CPU the casts run the GeLU in torch; the GPU kernel's bytes:
    benchmarks/speed/fp8_gelu_mlp.py). Linear biases, or another recipe, keep Megatron's MLP."""
    res = got["gelu_mlp"]
    assert res["swapped"] and res["class"] == "FP8GeluMLP" and res["fuses"] and res["unfused_class"] == "MLP"
    assert res["same_losses"] and res["same_grads"], res
    assert len(set(res["losses"])) == 3  # the steps trained: three different losses
    assert res["biased_fuses"] is False and res["tensorwise_swapped"] is False
