"""The time model's assumed constants: typical values it takes without fitting them to anything,
and the one fitted on published throughput. The other constants live elsewhere, each with its
source: measured on this kit's H200 (the GEMM and attention size classes beside the terms that use
them, gemm.py and helpers/advisor/time/attention.py; the rates in rates.py), read from datasheets
(gpus.py), or fitted on measurements no one here made: the A100's achieved fractions in its profile
(gpus.py `gemm_fraction`, `elementwise_fraction`), fitted on vTrain's published iterations
(benchmarks/advisor/vtrain_check.py; docs/results/advisor.md reports the fit and a
leave-one-model-out check)."""
from __future__ import annotations

# ---- collectives (collectives.py) ------------------------------------------------------------------
# The fraction of a link's datasheet bandwidth an NCCL collective reaches on large messages.
# Assumed: nccl-tests' bus bandwidth on NVLink and InfiniBand systems is typically 80-90% of the link.
COLLECTIVE_EFFICIENCY = 0.85
# The fixed cost of one collective call, as NCCL's own cost model takes it (src/graph/tuning.cc of
# NVIDIA/nccl, ring algorithm, Simple protocol): a base latency per call plus a hop latency per ring
# step, a step between two nodes costing the network's hop latency. Not fitted here.
RING_BASE_LATENCY_S = 8.4e-6
HOP_LATENCY_S = {"intra": 3.4e-6, "inter": 9.6e-6}  # NVLink hop, network hop

# ---- MoE layers (helpers/advisor/time/layer.py) -------------------------------------------------
# Host time a MoE layer adds per microbatch, forward and backward together, that the GPU cannot hide:
# Megatron's alltoall dispatcher copies the tokens-per-expert counts to the host before it can size the
# exchange and the grouped GEMMs, so the host launches the rest of the layer while the GPU waits (no
# run-ahead). Fitted on NVIDIA's published Megatron-Bridge throughput of MoE models (its micro-batch-1
# rows run up to 3x slower per token than micro batch 4 of the same layout): the value minimising the
# mean |error| of their tokens/s/GPU, checked leaving each model and each system out, in
# benchmarks/advisor/bridge_table.py (docs/results/advisor_bridge.md). The recipes whose whole iteration is
# one CUDA graph (no host wait) are fitted as well only with it, so it also stands for per-layer MoE time
# the other terms miss (small grouped GEMMs, the dispatcher's kernels), not the host alone.
MOE_HOST_S = 4.96e-3
