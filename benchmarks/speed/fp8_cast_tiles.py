"""Tile size and warp count of the kit's Triton FP8 casts (helpers/precision/fp8_cast_gpu.py) on
the 1.4B GPT's real operand shapes: which (BLOCK_M, BLOCK_K, warps) moves the bytes fastest (the
kit's choice per kernel: SCALE_CAST_TILE, DELAYED_CAST_TILE).

Why: in the FP8 training step of benchmarks/speed/precision.py the casts are ~9% of the GPU time
on an H200 (~97 us per delayed cast at micro batch 8, ~2.8 TB/s), and they are pure memory
traffic (2 bytes read, 1 + 1 written per value), so the tile is the one knob. Each configuration's
output bytes are compared with the default's (they must be equal: the tile changes only which
program handles which values). Times: triton.testing.do_bench, median, CUDA events; one layer's
mix of shapes at micro batch 16 (x of QKV, projection and FC1 and dy of projection and FC2 are
[tokens, 2048], x of FC2 and dy of FC1 [tokens, 8192], dy of QKV [tokens, 6144]).

    python -m benchmarks.speed.fp8_cast_tiles --out DIR [--tokens 32768]   (DIR/cast_tiles.json)
"""
import argparse
import json
import sys
from pathlib import Path

CONFIGS = [(64, 128, 4), (64, 128, 8), (32, 128, 4), (128, 128, 4), (128, 128, 8), (64, 64, 4), (128, 64, 4),
           (64, 256, 4), (64, 256, 8), (128, 256, 8), (32, 256, 4), (256, 128, 8)]
LAYER_MIX = {2048: 5, 8192: 2, 6144: 1}  # columns -> how many of one layer's casts have them


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--tokens", type=int, default=32768)
    args = ap.parse_args()
    import torch
    from triton.testing import do_bench

    from helpers.precision import formats, fp8_cast_gpu
    args.out.mkdir(parents=True, exist_ok=True)
    f = formats.get("e4m3")
    inputs = {k: torch.randn(args.tokens, k, device="cuda", dtype=torch.bfloat16) for k in LAYER_MIX}
    scale = torch.tensor(8.0, device="cuda")
    amax_bits = torch.zeros((), dtype=torch.int32, device="cuda")  # (an atomic max: repeated calls leave it alone)
    default = (64, 128, 4)  # the first tile the kit used for both kernels: the reference bytes
    casts = {
        "delayed": lambda x: fp8_cast_gpu.delayed_cast(x, f.max, f.dtype, scale, amax_bits, True, True),
        "tensorwise": lambda x: fp8_cast_gpu.scale_cast(x, f.max, f.dtype, None, True, True)[:2]}
    reference, out = {}, {"gpu": torch.cuda.get_device_name(0), "tokens": args.tokens, "default": default,
                          "command": " ".join(sys.argv), "us": {}, "equal_to_default": {}}
    for config in [default] + [c for c in CONFIGS if c != default]:
        fp8_cast_gpu.SCALE_CAST_TILE = fp8_cast_gpu.DELAYED_CAST_TILE = config
        name = "x".join(map(str, config))
        try:
            row, equal = {}, True
            for kind, cast in casts.items():
                for k, x in inputs.items():
                    got = cast(x)
                    if config == default:
                        reference[kind, k] = got
                    equal &= all(torch.equal(a.view(torch.uint8), b.view(torch.uint8))
                                 for a, b in zip(got, reference[kind, k]))
                    row[f"{kind}_{k}"] = do_bench(lambda cast=cast, x=x: cast(x), warmup=10, rep=60,
                                                  return_mode="median") * 1e3
                row[f"{kind}_layer"] = sum(n * row[f"{kind}_{k}"] for k, n in LAYER_MIX.items())
            out["us"][name], out["equal_to_default"][name] = row, bool(equal)
            print(name, "equal" if equal else "DIFFERENT", {k: round(v, 1) for k, v in row.items()}, flush=True)
        except Exception as e:  # a tile too large for shared memory fails to compile: keep the others
            out["us"][name] = {"error": str(e)[-500:]}
            print(name, "FAILED", str(e)[-300:], flush=True)
    (args.out / "cast_tiles.json").write_text(json.dumps(out, indent=1))  # (kept if the summary fails)
    per_value = {"delayed": 4, "tensorwise": 6}  # bytes: 2 read + 1 + 1 written; tensorwise reads x for its amax too
    for kind in casts:
        ok = {n: r[f"{kind}_layer"] for n, r in out["us"].items()
              if "error" not in r and out["equal_to_default"].get(n)}
        if not ok:
            print(f"{kind}: no tile ran", flush=True)
            continue
        out[f"best_{kind}"] = min(ok, key=ok.get)
        bytes_layer = sum(n * args.tokens * k * per_value[kind] for k, n in LAYER_MIX.items())
        out[f"best_{kind}_tb_per_s"] = bytes_layer / (ok[out[f"best_{kind}"]] * 1e-6) / 1e12
        base = ok.get("x".join(map(str, default)))
        print(f"best {kind}: {out[f'best_{kind}']} ({ok[out[f'best_{kind}']]:.0f} us per layer, "
              f"{out[f'best_{kind}_tb_per_s']:.2f} TB/s; default {base or float('nan'):.0f} us)", flush=True)
    (args.out / "cast_tiles.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
