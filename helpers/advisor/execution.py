"""How the training software runs a step, as far as its time goes: the choices that change the
time but not the layout (the layout, the distributed optimizer and recompute are the advisor's to
enumerate). `precision` is the GEMMs': bf16, or fp8 (Transformer Engine's FP8 GEMMs in the
transformer layers' linears, experts included; embedding, output layer, router and attention core
stay 16-bit: helpers/perf/gemm.py), or fp4 (Transformer Engine's NVFP4 recipe: the same linears as
FP4 GEMMs; the memory planner has no fp4 and is given fp8 for it). The memory planner reads the same
choice from Training.precision; advise() sets both. Three presets, each 16-bit (`with_(precision="fp8")` for FP8):

* MEGATRON_CORE: Megatron-LM / Megatron-Core with Transformer Engine as its examples run it: fused
  (flash) attention without dropout, the column-parallel linears' input-gradient collective
  overlapped with the weight-gradient GEMM, gradients reduced in fp32 and overlapped with the
  backward, the distributed optimizer's parameter all-gather overlapped with the next forward,
  weight gradients accumulated into the fp32 buffer by the GEMM itself;
* KIT_LOCAL: the kit's own worker on GPUs (helpers/runtime/build.py): the same terms. It overlaps
  the gradient reduction and the parameter all-gather (JobSpec's overlap_* auto), and its GEMMs
  accumulate the weight gradients (runtime/layers/wgrad_accumulation.py); the Transformer Engine
  kernels it runs without are no term of the model;
* MEGATRON_DEEPSPEED: Megatron-DeepSpeed as vTrain measured it (benchmarks/advisor/vtrain_check.py):
  fp16, the attention's s x s scores materialised with softmax and dropout, gradients all-reduced
  in fp16 after the backward, nothing overlapped but the input-gradient all-reduce; the weight
  gradients added into the parameters' fp16 `.grad` by a kernel of their own after each GEMM (its
  linear layers' backward adds the fresh product into `weight.grad`; DeepSpeed's engine holds no
  fp32 buffer for a fused accumulation and sets `.grad` to None after the step).

`ep_overlap` is off in every preset, on where a recipe sets it (`with_`): Megatron-Core's
overlap_moe_expert_parallel_comm (helpers/advisor/time/expert_parallel.py `exposed`)."""
from __future__ import annotations

from dataclasses import dataclass, replace

PRECISIONS = ("bf16", "fp8", "fp4")
GRAD_ACCUMULATION_BUFFERS = ("main_grad", "param_grad")


@dataclass(frozen=True)
class Execution:
    name: str
    attention: str = "flash"  # flash: fused, no s x s scores | materialised: scores, softmax (+ dropout) in memory
    attention_dropout: bool = False  # materialised only: a dropout on the probabilities
    tp_overlap_backward: bool = True  # column-parallel input-gradient collective under the weight-gradient GEMM
    overlap_grad_reduce: bool = True  # DP gradient reduction under the last microbatch's backward
    overlap_param_gather: bool = True  # distributed optimizer's parameter all-gather under the first forward
    grad_reduce_bytes: int = 4  # bytes per gradient element the DP collective moves (fp32 or 16-bit)
    grad_accumulation_fused: bool = True  # weight-gradient GEMMs write into the fp32 buffer (no extra pass)
    # where an unfused accumulation adds each microbatch's weight gradients: "main_grad" (Megatron's fp32
    # buffer, zeroed every step: every microbatch adds) | "param_grad" (the parameters' 16-bit .grad, None
    # after the step: the first microbatch's gradient is stored, each later one added)
    grad_accumulation_buffer: str = "main_grad"
    precision: str = "bf16"  # bf16 (16-bit GEMMs, fp16 too) | fp8 (the layers' linears in FP8) | fp4 (in NVFP4)
    ep_overlap: bool = False  # a MoE layer's all-to-all under the other microbatch's compute (combined 1F1B)

    def __post_init__(self):
        if self.attention not in ("flash", "materialised"):
            raise ValueError(f"attention must be 'flash' or 'materialised', not {self.attention!r}")
        if self.grad_reduce_bytes not in (2, 4):
            raise ValueError(f"grad_reduce_bytes must be 2 or 4, not {self.grad_reduce_bytes}")
        if self.grad_accumulation_buffer not in GRAD_ACCUMULATION_BUFFERS:
            raise ValueError(f"grad_accumulation_buffer must be {' or '.join(GRAD_ACCUMULATION_BUFFERS)}, "
                             f"not {self.grad_accumulation_buffer!r}")
        if self.precision not in PRECISIONS:
            raise ValueError(f"precision must be {' or '.join(PRECISIONS)}, not {self.precision!r}")

    def with_(self, **changes) -> "Execution":
        return replace(self, **changes)


MEGATRON_CORE = Execution("Megatron-Core with Transformer Engine")
KIT_LOCAL = Execution("the kit's local backend")
MEGATRON_DEEPSPEED = Execution("Megatron-DeepSpeed (vTrain's measurements)", attention="materialised",
                               attention_dropout=True, overlap_grad_reduce=False, overlap_param_gather=False,
                               grad_reduce_bytes=2, grad_accumulation_fused=False,
                               grad_accumulation_buffer="param_grad")
PRESETS = {"megatron-core": MEGATRON_CORE, "kit-local": KIT_LOCAL, "megatron-deepspeed": MEGATRON_DEEPSPEED}
