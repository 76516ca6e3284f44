"""Notebook side, prediction: bytes per GPU for a model, a layout and a training setup, before any
GPU hour. training.py (how a job trains), static.py (parameters, gradient buffers, optimizer
state: exact), activations.py (what autograd saves, microbatches in flight), plan.py (the per-stage
plan), fit.py (the runner's warning), vs_measured.py (plan vs a live job), vs_megatron.py (plan vs
Megatron's own estimator). Drawing lives in helpers/views/memory_bars.py.

    from helpers.memory import plan_memory, Training
    plan = plan_memory(preset("llama3-8b"), Layout(tp=2, pp=4, nproc=8, seq_len=4096), Training())
"""
from helpers.memory.plan import TERMS, MemoryPlan, StagePlan, plan_memory
from helpers.memory.static import (
           StaticMemory,
           rank_coordinates,
           stage_layers,
           static_for_rank,
           static_memory,
)
from helpers.memory.training import GiB, Training

__all__ = ["plan_memory", "Training", "MemoryPlan", "StagePlan", "TERMS", "GiB", "StaticMemory", "static_memory",
           "static_for_rank", "rank_coordinates", "stage_layers"]
