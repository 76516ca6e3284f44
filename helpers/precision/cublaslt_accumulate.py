"""Replaces: Transformer Engine's `general_gemm(..., accumulate=True)` for the FP8 weight gradient,
the GEMM TE's linears run with `fuse_wgrad_accumulation` (Megatron's `gradient_accumulation_fusion`).

Why: Megatron's DDP keeps each weight's gradient in an fp32 `main_grad`. `torch._scaled_mm` can
only write a new output (cuBLASLt's beta = 0), so without this the FP8 weight gradient is written
as a bf16 tensor and DDP's hook adds it into `main_grad`: an extra pass over both per weight per
microbatch, and the gradient rounded to bf16 before the sum. cuBLASLt itself takes C = D = the fp32
`main_grad` with beta = 1 for FP8 operands (D = alpha * scale_a * scale_b * A B + C, summed in fp32),
which is what TE calls; torch exposes no such entry, so this module calls cuBLASLt through ctypes.

  main_grad [N, K] (fp32) += dequant(dy_t [N, M]) @ dequant(x_t [K, M])^T

with dy_t and x_t the FP8 operands the kit's wgrad already has (each the transpose of the
microbatch's [M tokens, features] matrix, row-major), and their fp32 per-tensor dequantisation
scales (device scalars). In cuBLASLt's column-major terms this is the "TN" layout FP8 requires:
x_t's memory is x (M x K, column-major), taken transposed; dy_t's is dy (M x N), taken as it is; and
main_grad's [N, K] row-major memory is D = x^T dy (K x N, column-major), with C = D.

CUDA only (the CPU path adds `_scaled_mm`'s fp32 product: helpers/precision/fp8_matmul.py). One
handle and one 32 MiB workspace per device; the descriptors and the algorithm chosen by cuBLASLt's
heuristic are cached per shape and operand formats, so a call costs two attribute writes (the
scale pointers) and the matmul launch on torch's current stream."""
from __future__ import annotations

import ctypes
import glob
import os
from functools import cache

import torch

# cuBLAS / cuBLASLt constants (cublasLt.h, cublas_api.h, library_types.h)
_CUDA_R_32F, _CUDA_R_8F_E4M3, _CUDA_R_8F_E5M2 = 0, 28, 29
_CUBLAS_COMPUTE_32F = 68
_OP_N, _OP_T = 0, 1
_DESC_TRANSA, _DESC_TRANSB = 3, 4
_DESC_A_SCALE_POINTER, _DESC_B_SCALE_POINTER = 17, 18
_PREF_MAX_WORKSPACE_BYTES = 1
_WORKSPACE_BYTES = 32 * 1024 * 1024
_FORMATS = {torch.float8_e4m3fn: _CUDA_R_8F_E4M3, torch.float8_e5m2: _CUDA_R_8F_E5M2}


class _HeuristicResult(ctypes.Structure):
    """cublasLtMatmulHeuristicResult_t: the algorithm (cublasLtMatmulAlgo_t, 8 x uint64), its
    workspace, status and waves."""
    _fields_ = [("algo", ctypes.c_uint64 * 8), ("workspace_size", ctypes.c_size_t), ("state", ctypes.c_int),
                ("waves_count", ctypes.c_float), ("reserved", ctypes.c_int * 4)]


class CublasLtError(RuntimeError):
    pass


@cache
def _library() -> ctypes.CDLL:
    """The libcublasLt that torch loaded (its soname resolves to the same library), else the one
    in the nvidia wheels beside torch."""
    names = ["libcublasLt.so.13", "libcublasLt.so.12"]
    site = os.path.dirname(os.path.dirname(torch.__file__))
    names += sorted(glob.glob(os.path.join(site, "nvidia", "**", "libcublasLt.so*"), recursive=True))
    for name in names:
        try:
            lib = ctypes.CDLL(name)
        except OSError:
            continue
        lib.cublasLtMatmul.argtypes = [ctypes.c_void_p] * 14 + [ctypes.c_size_t, ctypes.c_void_p]
        return lib
    raise CublasLtError("libcublasLt was not found (looked for libcublasLt.so.13/.12 and in the nvidia wheels "
                        "beside torch): the FP8 weight-gradient accumulation needs CUDA torch's cuBLASLt")


def _check(status: int, what: str) -> None:
    if status != 0:
        raise CublasLtError(f"cuBLASLt {what} returned status {status}")


def _void_p(value: int) -> ctypes.c_void_p:
    return ctypes.c_void_p(value)


@cache
def _device_state(device_index: int):
    """(handle, workspace tensor) of one device."""
    lib = _library()
    handle = ctypes.c_void_p()
    _check(lib.cublasLtCreate(ctypes.byref(handle)), "cublasLtCreate")
    workspace = torch.empty(_WORKSPACE_BYTES, dtype=torch.uint8, device=f"cuda:{device_index}")
    return handle, workspace


def _layout(lib, dtype: int, rows: int, cols: int, ld: int) -> ctypes.c_void_p:
    layout = ctypes.c_void_p()
    _check(lib.cublasLtMatrixLayoutCreate(ctypes.byref(layout), ctypes.c_int(dtype), ctypes.c_uint64(rows),
                                          ctypes.c_uint64(cols), ctypes.c_int64(ld)), "cublasLtMatrixLayoutCreate")
    return layout


def _set(lib, desc, attribute: int, value) -> None:
    _check(lib.cublasLtMatmulDescSetAttribute(desc, ctypes.c_int(attribute), ctypes.byref(value),
                                              ctypes.c_size_t(ctypes.sizeof(value))),
           f"cublasLtMatmulDescSetAttribute({attribute})")


@cache
def _plan(device_index: int, m_tokens: int, n_out: int, k_in: int, a_format: int, b_format: int):
    """(matmul descriptor, A, B, C layouts, algorithm) for one shape: A = x_t's memory as M x K
    column-major (transposed by the op), B = dy_t's as M x N, C = D = main_grad's as K x N, fp32."""
    lib = _library()
    handle, _ = _device_state(device_index)
    desc = ctypes.c_void_p()
    _check(lib.cublasLtMatmulDescCreate(ctypes.byref(desc), ctypes.c_int(_CUBLAS_COMPUTE_32F), ctypes.c_int(_CUDA_R_32F)),
           "cublasLtMatmulDescCreate")
    _set(lib, desc, _DESC_TRANSA, ctypes.c_int(_OP_T))
    _set(lib, desc, _DESC_TRANSB, ctypes.c_int(_OP_N))
    a = _layout(lib, a_format, m_tokens, k_in, m_tokens)
    b = _layout(lib, b_format, m_tokens, n_out, m_tokens)
    c = _layout(lib, _CUDA_R_32F, k_in, n_out, k_in)
    preference = ctypes.c_void_p()
    _check(lib.cublasLtMatmulPreferenceCreate(ctypes.byref(preference)), "cublasLtMatmulPreferenceCreate")
    workspace_bytes = ctypes.c_uint64(_WORKSPACE_BYTES)
    _check(lib.cublasLtMatmulPreferenceSetAttribute(preference, ctypes.c_int(_PREF_MAX_WORKSPACE_BYTES),
                                                    ctypes.byref(workspace_bytes), ctypes.c_size_t(8)),
           "cublasLtMatmulPreferenceSetAttribute")
    result, found = _HeuristicResult(), ctypes.c_int(0)
    _check(lib.cublasLtMatmulAlgoGetHeuristic(handle, desc, a, b, c, c, preference, ctypes.c_int(1),
                                              ctypes.byref(result), ctypes.byref(found)),
           "cublasLtMatmulAlgoGetHeuristic")
    lib.cublasLtMatmulPreferenceDestroy(preference)
    if found.value < 1:
        raise CublasLtError(f"cuBLASLt has no FP8 algorithm accumulating into fp32 for M={m_tokens} N={n_out} "
                            f"K={k_in}")
    return desc, a, b, c, result


def wgrad_accumulate(dy_t: torch.Tensor, x_t: torch.Tensor, dy_scale: torch.Tensor, x_scale: torch.Tensor,
                     main_grad: torch.Tensor) -> None:
    """main_grad [N, K] (fp32, contiguous) += (dy_t [N, M] * dy_scale) @ (x_t [K, M] * x_scale)^T, in
    one cuBLASLt FP8 GEMM with beta = 1, on torch's current stream."""
    n_out, m_tokens = dy_t.shape
    k_in = x_t.shape[0]
    if (x_t.shape[1] != m_tokens or main_grad.shape != (n_out, k_in) or main_grad.dtype != torch.float32
            or not (dy_t.is_contiguous() and x_t.is_contiguous() and main_grad.is_contiguous())):
        raise ValueError(f"wgrad_accumulate: dy_t {tuple(dy_t.shape)}, x_t {tuple(x_t.shape)} and main_grad "
                         f"{tuple(main_grad.shape)} {main_grad.dtype} do not form [N,M] x [K,M]^T += [N,K] fp32, "
                         "all contiguous")
    device_index = main_grad.device.index if main_grad.device.index is not None else torch.cuda.current_device()
    lib = _library()
    handle, workspace = _device_state(device_index)
    desc, a, b, c, result = _plan(device_index, m_tokens, n_out, k_in, _FORMATS[x_t.dtype], _FORMATS[dy_t.dtype])
    _set(lib, desc, _DESC_A_SCALE_POINTER, ctypes.c_void_p(x_scale.data_ptr()))
    _set(lib, desc, _DESC_B_SCALE_POINTER, ctypes.c_void_p(dy_scale.data_ptr()))
    alpha, beta = ctypes.c_float(1.0), ctypes.c_float(1.0)
    stream = torch.cuda.current_stream(main_grad.device).cuda_stream
    _check(lib.cublasLtMatmul(handle, desc, ctypes.byref(alpha), _void_p(x_t.data_ptr()), a,
                              _void_p(dy_t.data_ptr()), b, ctypes.byref(beta), _void_p(main_grad.data_ptr()), c,
                              _void_p(main_grad.data_ptr()), c, ctypes.byref(result.algo),
                              _void_p(workspace.data_ptr()), _WORKSPACE_BYTES, _void_p(stream)),
           "cublasLtMatmul")
