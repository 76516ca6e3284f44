"""A roofline model of one training iteration: a MODEL, not a measurement. Each rank's time is
split into a compute term (the model's FLOPs at the GEMM and attention rates measured on a named
GPU) and one communication term per parallel axis (the bytes that axis moves, over a named link's
bandwidth). It ignores overlap, latency, kernel launches, the optimizer step and every
memory-bound kernel, so it says which term dominates and roughly how long each is; the measured
step says the rest. hardware.py: GPUs and links; step.py: the terms."""
