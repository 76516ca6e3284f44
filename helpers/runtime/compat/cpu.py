"""Lets Megatron-Core 0.19 train on CPU with gloo.

Megatron-Core assumes CUDA in a few dozen places (`device="cuda"` literals, `.cuda()`, the CUDA
RNG tracker, streams and events, CUDA type strings, CUDA-only helpers). On CPU this module
redirects each of them to its CPU equivalent. It is activated only for CPU jobs, before the
model is built, and changes nothing on GPU. Every patch is one idea, explained in one line.

The patches last for the life of the process that activates them, so only a rank process (train.py,
user_script.py: the children torchrun starts) ever does; the notebook's and the launcher's processes
never import this module (tests/unit/test_from_megatron.py checks that reading a recipe leaves torch
and Bridge as they were).
"""
from __future__ import annotations

import contextlib

import torch
from torch.overrides import TorchFunctionMode

_ACTIVE = False
_CPU = torch.device("cpu")


def _is_cuda(device) -> bool:
    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device.startswith("cuda")
    return isinstance(device, int)  # a bare int device means a CUDA ordinal in torch


class _CudaToCpu(TorchFunctionMode):
    """Rewrites `device="cuda"` literals (schedules, optimizer, clip_grads, MoE) to the CPU, and
    drops `pin_memory=True` (page-locked buffers exist only for host-to-GPU copies; CP's RoPE)."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if "device" in kwargs and _is_cuda(kwargs["device"]):
            kwargs["device"] = _CPU
        if kwargs.get("pin_memory"):
            kwargs["pin_memory"] = False
        return func(*args, **kwargs)


class _NoStream:
    """Stand-in for torch.cuda.Stream/Event: CPU ops run in program order, so waits are no-ops."""

    def __init__(self, *args, **kwargs): ...
    def wait_stream(self, *args): ...
    def wait_event(self, *args): ...
    def record_event(self, *args): return _NoStream()
    def record(self, *args): ...
    def synchronize(self): ...
    def query(self): return True
    def current_stream_wait(self): ...


def _get_rng_state(*args, **kwargs):
    return torch.get_rng_state()


def _set_rng_state(new_state, *args, **kwargs):
    torch.set_rng_state(new_state)


_ORIGINAL_ENGINE_RUN = torch.autograd._engine_run_backward


def _engine_run_backward(*args, **kwargs):
    """`loss.backward()` and `torch.autograd.backward/grad` are overridable calls: torch hands them
    to the function mode below and pops that mode while it runs them, so the whole backward would
    run without the redirections. Activation recompute runs forward code there (Megatron's
    checkpoint re-runs a layer, and the local attention builds its causal mask with a `cuda`
    literal), so the mode goes back on for the autograd engine."""
    with _CudaToCpu():
        return _ORIGINAL_ENGINE_RUN(*args, **kwargs)


_ORIGINAL_TYPE = torch.Tensor.type
_CUDA_TYPE_NAMES = {torch.float32: "torch.cuda.FloatTensor", torch.float16: "torch.cuda.HalfTensor",
                    torch.bfloat16: "torch.cuda.BFloat16Tensor"}


def _tensor_type(self, dtype=None, *args, **kwargs):
    # Megatron checks fp32 params/grads with `x.type() == 'torch.cuda.FloatTensor'`.
    if dtype is None and not args and not kwargs and self.dtype in _CUDA_TYPE_NAMES:
        return _CUDA_TYPE_NAMES[self.dtype]
    return _ORIGINAL_TYPE(self, dtype, *args, **kwargs)


_ORIGINAL_ALL_GATHER = torch.distributed.all_gather


def _all_gather_uneven(tensor_list, tensor, group=None, async_op=False):
    """gloo's all_gather needs equal shapes, but Megatron gathers uneven token counts along dim 0
    (MoE with ETP > 1: each rank routed a different number of tokens). Pad, gather, cut back."""
    rows = [t.shape[0] for t in tensor_list]
    if len(set(rows)) <= 1:
        return _ORIGINAL_ALL_GATHER(tensor_list, tensor, group=group, async_op=async_op)
    padded = tensor.new_zeros((max(rows), *tensor.shape[1:]))
    padded[: tensor.shape[0]] = tensor
    buffers = [torch.empty_like(padded) for _ in rows]
    _ORIGINAL_ALL_GATHER(buffers, padded, group=group)
    for out, buf, n in zip(tensor_list, buffers, rows):
        out.copy_(buf[:n])
    return None


def activate() -> None:
    """Install the CPU redirections (idempotent). Call after `import megatron.core`."""
    global _ACTIVE
    if _ACTIVE:
        return
    from megatron.core.tensor_parallel import random as tp_random
    from megatron.core.transformer.moe import moe_utils, token_dispatcher

    # Buffers and tensors are created on "the current CUDA device": make that the CPU.
    torch.cuda.current_device = lambda: _CPU
    # `.cuda()` / `.pin_memory()` calls (optimizer state, CP RoPE indices) become no-ops.
    torch.Tensor.cuda = lambda self, *a, **k: self
    torch.Tensor.pin_memory = lambda self, *a, **k: self
    # The model-parallel RNG tracker forks "the CUDA generator": use the CPU generator instead.
    torch.cuda.get_rng_state = _get_rng_state
    torch.cuda.set_rng_state = _set_rng_state
    torch.cuda.manual_seed = torch.manual_seed
    tp_random._get_cuda_rng_state = _get_rng_state
    tp_random._set_cuda_rng_state = _set_rng_state
    # Streams and events (DDP overlap, MoE dispatcher) have nothing to order on a CPU.
    torch.cuda.Stream = _NoStream
    torch.cuda.Event = _NoStream
    torch.cuda.current_stream = lambda *a, **k: _NoStream()
    torch.cuda.stream = lambda *a, **k: contextlib.nullcontext()
    torch.cuda.synchronize = lambda *a, **k: None
    # Type-string checks for fp32 CUDA tensors accept fp32 CPU tensors.
    torch.Tensor.type = _tensor_type
    # The alltoall dispatcher needs split sizes as numpy; its helper only converts CUDA tensors.
    original_move = moe_utils.maybe_move_tensor_to_cpu

    def move_to_cpu(tensor, as_numpy=False, record_stream=False):
        if torch.is_tensor(tensor) and not tensor.is_cuda:
            return tensor.numpy() if as_numpy else tensor
        return original_move(tensor, as_numpy=as_numpy, record_stream=record_stream)

    moe_utils.maybe_move_tensor_to_cpu = move_to_cpu
    token_dispatcher.maybe_move_tensor_to_cpu = move_to_cpu
    # Uneven all_gather (MoE token gather across ETP ranks) is padded to equal shapes for gloo.
    torch.distributed.all_gather = _all_gather_uneven
    # `device="cuda"` literals: one global function mode maps them to the CPU, in the backward too.
    _CudaToCpu().__enter__()
    torch.autograd._engine_run_backward = _engine_run_backward
    _ACTIVE = True


def _no_compile(fn=None, *args, **kwargs):
    return fn if fn is not None else (lambda f: f)


def import_megatron_eagerly() -> None:
    """Import megatron.core with its JIT fuser as a no-op decorator. Megatron-Core 0.19 binds
    `jit_fuser = torch.compile` (megatron/core/jit.py) and decorates its fused bias/activation
    helpers at import, which loads torch._dynamo and torch._inductor: about 2 s of each process's
    ~4.5 s start on the 2-core CPU machine. The kit turns those fusions off on CPU, so the helpers
    run eagerly either way; on GPU this is not called and Megatron keeps torch.compile."""
    real = torch.compile
    torch.compile = _no_compile
    try:
        import megatron.core  # noqa: F401  (binds megatron.core.jit.jit_fuser to the no-op)
    finally:
        torch.compile = real
