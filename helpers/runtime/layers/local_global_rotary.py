"""Gemma 3's two kinds of attention layer on the kit's local builder: sliding-window layers with their
own rotary base (10 000 in the published models) and full layers with another (1e6, scaled
linearly), in Megatron-Bridge's fixed pattern (`interleaved_attn_pattern` (5, 1): every sixth layer
is full).

Megatron's GPTModel computes one rotary table and hands it to every layer, so Bridge brings two
Megatron subclasses of its own, both free of Transformer Engine, which the kit uses as they are:
`Gemma3RotaryEmbedding` (the model's rotary module: both tables, stacked [local, global]) and
`Gemma3SelfAttention` (each layer picks its table by its global layer number). What the kit replaces
is the rest of Bridge's Gemma 3 spec: its TE core attention, which windows the local layers, is the
kit's core attention with Megatron's `window_size` on the layers `window_attn_skip_freq` picks
(the same pattern, set here), and Bridge's `provide()`, which swaps the rotary module in, is
`use_in_model` below (the kit builds the GPTModel itself: helpers/runtime/build.py)."""
from __future__ import annotations


def pattern_size(config) -> int:
    """Layers per (local..., global) group: 6 for (5, 1)."""
    return sum(config.interleaved_attn_pattern)


def prepare_config(provider) -> None:
    """After Bridge's provider is finalized: the window in Megatron's (left, 0) form (Bridge's TE
    attention subtracts the query itself from HF's `sliding_window`, as here) on the local layers
    only, and a flag the layer spec and the builder read."""
    window = provider.window_size
    if isinstance(window, int):
        provider.window_size = (window - 1, 0)
    provider.window_attn_skip_freq = pattern_size(provider)  # layer_number % 6 != 0: local (windowed)
    provider.local_global_rotary = True


def global_rotary_base(config) -> float:
    """GPTModel's own rotary base for a provider whose `rotary_base` is (local, global)."""
    base = config.rotary_base
    return base[1] if isinstance(base, tuple) else base


def use_in(layer_spec) -> None:
    """A local layer spec's self-attention becomes Bridge's Gemma3SelfAttention (same submodules)."""
    from megatron.bridge.models.gemma.gemma3_provider import Gemma3SelfAttention

    layer_spec.submodules.self_attention.module = Gemma3SelfAttention


def use_in_model(chunk, config) -> None:
    """Replace a built GPTModel's rotary module with Bridge's two-table one, with the arguments
    Bridge's Gemma3ModelProvider.provide() passes."""
    from megatron.bridge.models.gemma.gemma3_provider import Gemma3RotaryEmbedding

    local, global_ = config.rotary_base
    chunk.rotary_pos_emb = Gemma3RotaryEmbedding(
        kv_channels=config.kv_channels, rotary_percent=1.0, rotary_interleaved=config.rotary_interleaved,
        seq_len_interpolation_factor=getattr(config, "seq_len_interpolation_factor", None), rotary_base=global_,
        rope_scaling=False, rope_scaling_factor=config.rope_scaling_factor,
        use_cpu_initialization=config.use_cpu_initialization, rotary_base_local=local)
