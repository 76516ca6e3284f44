"""The weight-gradient accumulation into an fp32 main_grad, fused (helpers/runtime/layers/wgrad_accumulation.py:
one GEMM with an fp32 C) against Megatron's unfused path (a bf16 weight-gradient GEMM, then DDP's
main_grad.add_), on one GPU: time per call and the error of each against an fp64 reference. The
same for the kit's FP8 weight gradient (per-tensor e5m2 gradient x e4m3 input): cuBLASLt
accumulating into main_grad (helpers/precision/cublaslt_accumulate.py) against `_scaled_mm`'s bf16
product added by DDP; its reference is the fp64 product of the dequantised FP8 operands.

    python -m benchmarks.speed.wgrad_accumulation --out OUT

Shapes: the 1.4B GPT's linears at micro batch 4, seq 2048 (8192 tokens; hidden 2048, FFN 8192).
Prints a table and writes OUT/wgrad_accumulation.json."""
import argparse
import json
from pathlib import Path

import torch

from helpers.precision import cublaslt_accumulate, fp8_matmul
from helpers.runtime.layers import wgrad_accumulation

TOKENS = 8192
SHAPES = {"qkv (2048 -> 6144)": (2048, 6144), "attention out (2048 -> 2048)": (2048, 2048),
          "fc1 (2048 -> 8192)": (2048, 8192), "fc2 (8192 -> 2048)": (8192, 2048)}


def unfused(total_input, grad_output, main_grad):
    main_grad.add_(grad_output.t().matmul(total_input))


def fp8_unfused(dy_t, x_t, dy_scale, x_scale, main_grad):
    main_grad.add_(torch._scaled_mm(dy_t, x_t.t(), scale_a=dy_scale, scale_b=x_scale, out_dtype=torch.bfloat16))


def fp8_operands(x, g):
    """(dy_t, x_t, their dequantisation scales, the fp64 product of the dequantised operands)."""
    _, x_t, x_scale = fp8_matmul.quantize(x, "e4m3", plain=False, transposed=True)
    _, dy_t, dy_scale = fp8_matmul.quantize(g, "e5m2", plain=False, transposed=True)
    exact = (dy_t.double() * dy_scale.double()) @ (x_t.double() * x_scale.double()).t()
    return dy_t, x_t, dy_scale, x_scale, exact


def timed(fn, *args, repeats: int = 50) -> float:
    for _ in range(5):
        fn(*args)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(repeats):
        fn(*args)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / repeats


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(0)
    rows = []
    for name, (fan_in, fan_out) in SHAPES.items():
        x = torch.randn(TOKENS, fan_in, device="cuda", dtype=torch.bfloat16)
        g = torch.randn(TOKENS, fan_out, device="cuda", dtype=torch.bfloat16)
        start = torch.randn(fan_out, fan_in, device="cuda", dtype=torch.float32)
        reference = start.double() + g.double().t() @ x.double()
        errors = {}
        for label, fn in (("fused", wgrad_accumulation.wgrad_gemm_accum_fp32), ("unfused", unfused)):
            main_grad = start.clone()
            fn(x, g, main_grad)
            errors[label] = float((main_grad.double() - reference).abs().max() / reference.abs().max())
        scratch = start.clone()
        rows.append({"linear": name, "precision": "bf16",
                     "fused_ms": timed(wgrad_accumulation.wgrad_gemm_accum_fp32, x, g, scratch),
                     "unfused_ms": timed(unfused, x, g, scratch),
                     "fused_max_rel_error": errors["fused"], "unfused_max_rel_error": errors["unfused"]})
        dy_t, x_t, dy_scale, x_scale, exact = fp8_operands(x, g)
        reference = start.double() + exact
        for label, fn in (("fused", cublaslt_accumulate.wgrad_accumulate), ("unfused", fp8_unfused)):
            main_grad = start.clone()
            fn(dy_t, x_t, dy_scale, x_scale, main_grad)
            errors[label] = float((main_grad.double() - reference).abs().max() / reference.abs().max())
        rows.append({"linear": name, "precision": "fp8",
                     "fused_ms": timed(cublaslt_accumulate.wgrad_accumulate, dy_t, x_t, dy_scale, x_scale, scratch),
                     "unfused_ms": timed(fp8_unfused, dy_t, x_t, dy_scale, x_scale, scratch),
                     "fused_max_rel_error": errors["fused"], "unfused_max_rel_error": errors["unfused"]})
    result = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "tokens": TOKENS, "rows": rows}
    (args.out / "wgrad_accumulation.json").write_text(json.dumps(result, indent=1))
    print("| linear | precision | fused ms | unfused ms | fused max rel. error | unfused max rel. error |\n"
          "|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['linear']} | {r['precision']} | {r['fused_ms']:.3f} | {r['unfused_ms']:.3f} | {r['fused_max_rel_error']:.1e} | "
              f"{r['unfused_max_rel_error']:.1e} |")


if __name__ == "__main__":
    main()
