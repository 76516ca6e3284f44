"""Activation recompute's extra work, run in the backward of each layer: `full` runs the layer's
whole forward again (its GEMMs, attention, elementwise kernels and its forward collectives: TP, CP,
EP), `selective` the forward of the modules it names (Megatron's recompute_modules; by default the
attention core, core_attn), `none` nothing. Memory saved is the planner's
(helpers/memory/activations.py).

A module's forward is what layer.py times for it: `core_attn` the attention core, `layernorm` the
layer's norms, `mla_up_proj` MLA's up projections (q_up, kv_up), `mlp` a dense MLP's two linears
and its activation, `moe_act` the experts' activation, `moe` the whole MoE layer (router, experts,
token permutations, the expert all-to-all). A module a layer does not have costs it nothing."""
from __future__ import annotations

MODULES = ("core_attn", "layernorm", "mla_up_proj", "mlp", "moe_act", "moe")


def extra_seconds(recompute: str, layer_forward_s: float, attention_forward_s: float,
                  modules: tuple[str, ...] = ("core_attn",), module_forward_s: dict[str, float] | None = None) -> float:
    """`modules`: what selective recompute runs again; `module_forward_s`: each module's forward seconds
    in this layer (MODULES; core_attn defaults to `attention_forward_s`)."""
    if recompute == "full":
        return layer_forward_s
    if recompute == "selective":
        unknown = set(modules) - set(MODULES)
        if unknown:
            raise ValueError(f"recompute modules {sorted(unknown)} are not timed; known: {', '.join(MODULES)}")
        seconds = {"core_attn": attention_forward_s, **(module_forward_s or {})}
        return sum(seconds.get(m, 0.0) for m in modules)
    if recompute == "none":
        return 0.0
    raise ValueError(f"recompute must be none, selective or full, not {recompute!r}")
