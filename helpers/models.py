"""Model presets: plain descriptions of a GPT (dense or MoE) that the worker turns into a
Megatron-Core `TransformerConfig`. Pure data: safe to import on the notebook side."""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace


@dataclass(frozen=True)
class ModelPreset:
    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    ffn_hidden_size: int
    vocab_size: int
    num_query_groups: int | None = None  # None = multi-head attention (as many KV heads as heads)
    num_experts: int | None = None  # None = dense MLP
    moe_router_topk: int = 2
    moe_ffn_hidden_size: int | None = None
    moe_shared_expert_intermediate_size: int | None = None
    normalization: str = "LayerNorm"
    add_bias_linear: bool = False  # modern LLMs (Llama, Qwen, DeepSeek) have no linear biases
    max_seq_len: int = 4096
    source: str = "kit"  # where the numbers come from (a published config.json for public models)

    @property
    def is_moe(self) -> bool:
        return bool(self.num_experts)

    @property
    def kv_heads(self) -> int:
        return self.num_query_groups or self.num_attention_heads

    def with_(self, **changes) -> "ModelPreset":
        """A copy with some fields changed (e.g. fewer layers for a CPU run)."""
        return replace(self, **changes)

    def to_dict(self) -> dict:
        return asdict(self)


_PRESETS = {
    p.name: p
    for p in [
        # Teaching models: small enough that a 2-core CPU runs several iterations per second.
        ModelPreset("tiny-gpt", num_layers=4, hidden_size=64, num_attention_heads=4,
                    ffn_hidden_size=256, vocab_size=512, max_seq_len=256),
        ModelPreset("tiny-moe", num_layers=4, hidden_size=64, num_attention_heads=4,
                    num_query_groups=2, ffn_hidden_size=128, vocab_size=512, num_experts=8,
                    moe_router_topk=2, max_seq_len=256),
    ]
}


def names() -> list[str]:
    return sorted(_PRESETS)


def preset(name: str) -> ModelPreset:
    try:
        return _PRESETS[name]
    except KeyError:
        raise KeyError(f"unknown model preset {name!r}; known presets: {', '.join(names())}") from None


def from_dict(d: dict) -> ModelPreset:
    return ModelPreset(**d)
