"""The non-GEMM pieces both precisions share, timed alone on the GPU at the 1.4B GPT's shapes
(seq 2048, micro batch 16, 16 heads of 128, hidden 2048): rotary embedding of a query and a key
(views of one QKV projection's output, as Megatron's attention makes them) and a LayerNorm, each
forward + backward. FP8 makes the GEMMs ~2x faster, so these take a growing share of its step
(docs/results/precision.md); every ms saved here counts for both precisions.

  rotary: Megatron's unfused function | the kit's compiled rotary (helpers/runtime/layers/rotary.py) |
          the kit's Triton rotary (helpers/runtime/layers/rotary_triton.py), values and gradients checked
          against Megatron's; the bytes a fused kernel must move, as a floor
  norm:   torch.nn.LayerNorm | the same module under torch.compile

Results: docs/results/gpu_profile.md.

Usage: python -m benchmarks.speed.elementwise --out DIR  (writes DIR/elementwise.json)."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from benchmarks.common.cuda_timing import timed_ms


def rotary_cases(s=2048, b=16, heads=16, dim=128) -> dict:
    from megatron.core.models.common.embeddings import rope_utils
    from megatron.core.transformer import TransformerConfig

    from helpers.runtime.layers import rotary as compiled_rope
    from helpers.runtime.layers import rotary_triton as rope_triton

    cfg = TransformerConfig(num_layers=1, hidden_size=heads * dim, num_attention_heads=heads)
    mixed = torch.randn(s, b, heads, 3 * dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    freqs = torch.randn(s, 1, 1, dim, device="cuda", dtype=torch.float32)
    grad = torch.randn(s, b, heads, dim, device="cuda", dtype=torch.bfloat16)

    def run(apply):
        def step():
            q, k, _ = torch.split(mixed, dim, dim=-1)  # gradients up to the views only: no split backward
            torch.autograd.grad([apply(q), apply(k)], [q, k], [grad, grad])
        return step

    variants = {
        "megatron_unfused": lambda t: rope_utils.apply_rotary_pos_emb(t, freqs, cfg, cp_group=object()),
        "kit_compiled": lambda t: compiled_rope._compiled()(t, freqs, 1.0),
        "kit_triton": lambda t: rope_triton.rotary(t, freqs, 1.0),
    }
    q = torch.split(mixed, dim, dim=-1)[0]
    reference = rope_utils.apply_rotary_pos_emb(q, freqs, cfg, cp_group=object())
    (reference_grad,) = torch.autograd.grad(reference, mixed, grad)
    out = {"shape": [s, b, heads, dim], "ms_per_layer_fwd_bwd": {}, "max_abs_diff_vs_megatron": {},
           "max_abs_grad_diff_vs_megatron": {}}
    for name, apply in variants.items():
        out["ms_per_layer_fwd_bwd"][name] = timed_ms(run(apply))
        q = torch.split(mixed, dim, dim=-1)[0]
        y = apply(q)
        (g,) = torch.autograd.grad(y, mixed, grad)
        out["max_abs_diff_vs_megatron"][name] = (y.float() - reference.float()).abs().max().item()
        out["max_abs_grad_diff_vs_megatron"][name] = (g.float() - reference_grad.float()).abs().max().item()
    # bytes a fused kernel must move: q and k read and written, forward and backward (bf16)
    ideal_bytes = 2 * 2 * 2 * (s * b * heads * dim * 2)
    out["ideal_ms_at_3_tb_per_s"] = ideal_bytes / 3e12 * 1e3
    return out


def norm_cases(tokens=2048 * 16, hidden=2048) -> dict:
    norm = torch.nn.LayerNorm(hidden, device="cuda", dtype=torch.bfloat16)
    compiled = torch.compile(norm, dynamic=False)
    x = torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    grad = torch.randn_like(x)

    def run(module):  # gradients of x and of the norm's weight and bias, not accumulated into .grad
        return lambda: torch.autograd.grad(module(x), [x, norm.weight, norm.bias], grad)

    out = {"shape": [tokens, hidden], "ms_fwd_bwd": {"torch": timed_ms(run(norm)), "compiled": timed_ms(run(compiled))}}
    y_eager, y_compiled = norm(x), compiled(x)
    out["max_abs_diff_compiled_vs_torch"] = (y_eager.float() - y_compiled.float()).abs().max().item()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    result = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__}
    for name, cases in (("rotary", rotary_cases), ("layer_norm", norm_cases)):
        try:  # one failing section should not lose the others' numbers
            result[name] = cases()
        except Exception as e:
            result[name] = {"error": repr(e)[-2000:]}
        (args.out / "elementwise.json").write_text(json.dumps(result, indent=1))
    print(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
