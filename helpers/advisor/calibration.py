"""The time model's assumed constants: typical values it takes without fitting them to anything.
The other constants live elsewhere, each with its source: measured on this kit's H200 (the GEMM and
attention size classes beside the terms that use them, time/gemm.py and time/attention.py; the
rates in helpers/roofline/hardware.py), read from datasheets (gpus.py), or fitted on measurements no
one here made: the A100's achieved fractions in its profile (gpus.py `gemm_fraction`,
`elementwise_fraction`), fitted on vTrain's published iterations (benchmarks/advisor/vtrain_check.py;
docs/results/advisor.md reports the fit and a leave-one-model-out check)."""
from __future__ import annotations

# ---- collectives (helpers/advisor/time/collectives.py) -------------------------------------------
# The fraction of a link's datasheet bandwidth an NCCL collective reaches on large messages.
# Assumed: nccl-tests' bus bandwidth on NVLink and InfiniBand systems is typically 80-90% of the link.
COLLECTIVE_EFFICIENCY = 0.85
# The fixed cost of one collective call (launch, synchronisation, the first bytes' travel).
# Assumed: NCCL's small-message latency, a few microseconds inside a node, tens across nodes.
COLLECTIVE_LATENCY_S = {"intra": 10e-6, "inter": 30e-6}
