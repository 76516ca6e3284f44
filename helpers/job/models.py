"""Model presets: plain descriptions of a GPT (dense, MoE, MLA or Mamba-hybrid) that the worker
turns into a Megatron-Core `TransformerConfig`. Pure data: safe to import on the notebook side.

Public models carry the numbers of their published `config.json` (the `source` field names it);
the HF name of each number is in the comment next to it. Fields the kit's worker does not build
yet (MLA, Mamba, SwiGLU, ...) are still recorded: layouts for these models can be planned and
validated, and `Layout.validate` names what stops a launch on the kit's local backend."""
from __future__ import annotations

from dataclasses import asdict, dataclass, replace


@dataclass(frozen=True)
class ModelPreset:
    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    ffn_hidden_size: int  # dense MLP width (HF intermediate_size)
    vocab_size: int
    num_query_groups: int | None = None  # None = multi-head attention (as many KV heads as heads)
    kv_channels: int | None = None  # head dim when it is not hidden/heads (HF head_dim); None = derived
    num_experts: int | None = None  # None = dense MLP
    moe_router_topk: int = 2
    moe_ffn_hidden_size: int | None = None  # one routed expert's width (HF moe_intermediate_size)
    moe_shared_expert_intermediate_size: int | None = None  # all shared experts together
    num_shared_experts: int = 0
    first_k_dense: int = 0  # leading layers with a dense MLP instead of experts (HF first_k_dense_replace)
    normalization: str = "LayerNorm"
    activation: str = "gelu"  # gelu | swiglu | geglu (tanh GeLU, gated: Gemma) | squared_relu
    qk_layernorm: bool = False
    qk_norm_full_width: bool = False  # the q/k norms span all heads, one weight of heads x head_dim (OLMoE)
    add_qkv_bias: bool = False  # biases on the Q, K, V projections only (Qwen2, GLM-4.5)
    attention_sinks: bool = False  # a learned softmax offset per head (GPT-OSS): Megatron's own attention
    attention_softcap: bool = False  # attention scores soft-capped (Gemma 2): the kit's soft-capped attention, cp=1
    sandwich_norms: bool = False  # a norm after attention and after the MLP too (Gemma 2)
    add_bias_linear: bool = False  # modern LLMs (Llama, Qwen, DeepSeek) have no linear biases
    max_seq_len: int = 4096
    tied_embeddings: bool = False  # the output layer reuses the input embedding (HF tie_word_embeddings)
    # Multi-latent attention (DeepSeek): queries/keys/values go through low-rank projections.
    multi_latent_attention: bool = False
    q_lora_rank: int | None = None  # None = queries are not compressed (DeepSeek-V2-Lite)
    kv_lora_rank: int | None = None
    qk_head_dim: int | None = None  # HF qk_nope_head_dim
    qk_pos_emb_head_dim: int | None = None  # HF qk_rope_head_dim
    v_head_dim: int | None = None
    # Mamba-Transformer hybrids (Nemotron-H): one character per layer, M=Mamba2 *=attention
    # -=MLP E=MoE (Megatron's hybrid_override_pattern). None = every layer is attention + MLP/MoE.
    hybrid_pattern: str | None = None
    mamba_num_heads: int | None = None
    mamba_head_dim: int | None = None
    mamba_state_dim: int | None = None  # HF ssm_state_size
    mamba_num_groups: int | None = None  # HF n_groups
    mamba_chunk_size: int = 128  # HF chunk_size: tokens per chunk of the SSD scan
    # Multi-token prediction (DeepSeek-V3): extra layers on the last pipeline stage, each predicting one
    # more token ahead through the shared output layer (Megatron's mtp_num_layers). Planned, not built.
    mtp_num_layers: int = 0
    # Read from a Hugging Face folder (helpers/job/hf_model.py): the worker builds it from
    # Megatron-Bridge's provider config, which carries what a preset cannot (e.g. a hybrid's routing).
    built_from_hf: bool = False
    source: str = "kit"  # where the numbers come from (a published config.json for public models)

    @property
    def gated(self) -> bool:
        """A gated MLP (two input projections): SwiGLU or GeGLU."""
        return self.activation in ("swiglu", "geglu")

    @property
    def is_moe(self) -> bool:
        return bool(self.num_experts)

    @property
    def is_hybrid(self) -> bool:
        return self.hybrid_pattern is not None

    @property
    def kv_heads(self) -> int:
        return self.num_query_groups or self.num_attention_heads

    @property
    def expert_ffn(self) -> int:
        return self.moe_ffn_hidden_size or self.ffn_hidden_size

    def layer_kinds(self) -> dict[str, int]:
        """How many layers of each kind: attention, mamba, mlp, moe (a hybrid layer is one of
        them; a GPT layer is attention plus an MLP or MoE)."""
        if self.is_hybrid:
            p = self.hybrid_pattern
            return {"attention": p.count("*"), "mamba": p.count("M"), "mlp": p.count("-"), "moe": p.count("E")}
        moe = self.num_layers - self.first_k_dense if self.is_moe else 0
        return {"attention": self.num_layers, "mamba": 0, "mlp": self.num_layers - moe, "moe": moe}

    def approx_params(self) -> int:
        """Rough parameter count (weights only, no norms), enough to tell a CPU-sized model from a
        GPU-sized one. Not the memory planner."""
        h, kinds = self.hidden_size, self.layer_kinds()
        head = self.kv_channels or h // self.num_attention_heads
        attn = h * head * (self.num_attention_heads * 2 + self.kv_heads * 2)
        glu = 3 if self.activation == "swiglu" else 2
        mlp = glu * h * self.ffn_hidden_size
        moe = glu * h * self.expert_ffn * (self.num_experts or 0) + glu * h * (
            self.moe_shared_expert_intermediate_size or 0)
        mamba = 0
        if kinds["mamba"]:
            inner = (self.mamba_num_heads or 0) * (self.mamba_head_dim or 0)
            mamba = h * (2 * inner + 2 * (self.mamba_num_groups or 1) * (self.mamba_state_dim or 0)) + inner * h
        embeddings = (1 if self.tied_embeddings else 2) * self.vocab_size * h  # input embedding (+ output layer)
        return (kinds["attention"] * attn + kinds["mlp"] * mlp + kinds["moe"] * moe
                + kinds["mamba"] * mamba + embeddings)

    def with_(self, **changes) -> "ModelPreset":
        """A copy with some fields changed (e.g. fewer layers for a CPU run)."""
        return replace(self, **changes)

    def to_dict(self) -> dict:
        return asdict(self)


_HF = "https://huggingface.co/{}/blob/main/config.json"
_NEMOTRON_PATTERN = "MEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEM*EMEMEMEM*EMEMEMEME"  # 23 M, 23 E, 6 *

_PRESETS = {
    p.name: p
    for p in [
        # Teaching models: small enough that a 2-core CPU runs several iterations per second.
        ModelPreset("tiny-gpt", num_layers=4, hidden_size=64, num_attention_heads=4,
                    ffn_hidden_size=256, vocab_size=512, max_seq_len=256),
        ModelPreset("tiny-moe", num_layers=4, hidden_size=64, num_attention_heads=4,
                    num_query_groups=2, ffn_hidden_size=128, vocab_size=512, num_experts=8,
                    moe_router_topk=2, max_seq_len=256),
        # The seed cluster's control model. The issue gives layers, widths, heads, groups and
        # experts; it does not give top-k or vocabulary. Top-k 8 is chosen to match Qwen3-30B-A3B
        # (also 128 experts), so the control routes like the model it stands in for; the vocabulary
        # is the Qwen3 tokenizer's (the tokenizer the kit ships in the shared data).
        ModelPreset("control-moe", num_layers=4, hidden_size=256, num_attention_heads=8,
                    num_query_groups=2, ffn_hidden_size=512, vocab_size=151936, num_experts=128,
                    moe_router_topk=8, normalization="RMSNorm", max_seq_len=4096,
                    source="the seed's control model; top-k 8 and vocabulary chosen by the kit"),
        # control-moe scaled for CPU runs: hidden 256->64, FFN 512->128 (same 1:2 ratio), experts
        # 128->16 (EP up to 16 still divides), vocabulary 151936->512. Kept: 4 layers, 8 heads,
        # 2 query groups (so the TP limits of the control model hold here too), top-8 routing
        # (each token still reaches 8 experts, so the all-to-all fan-out matches).
        ModelPreset("control-moe-cpu", num_layers=4, hidden_size=64, num_attention_heads=8,
                    num_query_groups=2, ffn_hidden_size=128, vocab_size=512, num_experts=16,
                    moe_router_topk=8, normalization="RMSNorm", max_seq_len=256,
                    source="control-moe scaled down for CPU (see the comment in helpers/job/models.py)"),
        ModelPreset("llama3-8b", num_layers=32, hidden_size=4096, num_attention_heads=32,
                    num_query_groups=8,  # num_key_value_heads
                    ffn_hidden_size=14336, vocab_size=128256, normalization="RMSNorm",
                    activation="swiglu", max_seq_len=8192,  # max_position_embeddings
                    source=_HF.format("meta-llama/Meta-Llama-3-8B")),
        ModelPreset("llama3-70b", num_layers=80, hidden_size=8192, num_attention_heads=64,
                    num_query_groups=8,  # num_key_value_heads
                    ffn_hidden_size=28672, vocab_size=128256, normalization="RMSNorm",
                    activation="swiglu", max_seq_len=8192, source=_HF.format("meta-llama/Meta-Llama-3-70B")),
        ModelPreset("llama3.1-405b", num_layers=126, hidden_size=16384, num_attention_heads=128,
                    num_query_groups=8,  # num_key_value_heads
                    ffn_hidden_size=53248, vocab_size=128256, normalization="RMSNorm",
                    activation="swiglu", max_seq_len=131072, source=_HF.format("meta-llama/Llama-3.1-405B")),
        ModelPreset("qwen3-235b-a22b", num_layers=94, hidden_size=4096, num_attention_heads=64,
                    num_query_groups=4,  # num_key_value_heads
                    kv_channels=128,  # head_dim
                    ffn_hidden_size=12288,  # intermediate_size (unused: every layer is MoE)
                    vocab_size=151936, num_experts=128, moe_router_topk=8,
                    moe_ffn_hidden_size=1536, qk_layernorm=True,
                    normalization="RMSNorm", activation="swiglu", max_seq_len=40960,
                    source=_HF.format("Qwen/Qwen3-235B-A22B")),
        ModelPreset("deepseek-v3", num_layers=61, hidden_size=7168, num_attention_heads=128,
                    ffn_hidden_size=18432,  # intermediate_size: the three dense layers
                    vocab_size=129280, num_experts=256,  # n_routed_experts
                    moe_router_topk=8, moe_ffn_hidden_size=2048,  # moe_intermediate_size
                    num_shared_experts=1, moe_shared_expert_intermediate_size=2048,
                    first_k_dense=3,  # first_k_dense_replace
                    multi_latent_attention=True, q_lora_rank=1536, kv_lora_rank=512,
                    qk_head_dim=128, qk_pos_emb_head_dim=64, v_head_dim=128,
                    mtp_num_layers=1,  # num_nextn_predict_layers
                    normalization="RMSNorm", activation="swiglu", max_seq_len=163840,
                    source=_HF.format("deepseek-ai/DeepSeek-V3")
                    + " (transformers 5.12.1's DeepseekV3Config defaults hold the same numbers)"),
        ModelPreset("kimi-k2", num_layers=61, hidden_size=7168, num_attention_heads=64,
                    ffn_hidden_size=18432,  # intermediate_size: the one dense layer
                    vocab_size=163840, num_experts=384,  # n_routed_experts
                    moe_router_topk=8, moe_ffn_hidden_size=2048,  # moe_intermediate_size
                    num_shared_experts=1, moe_shared_expert_intermediate_size=2048,
                    first_k_dense=1,  # first_k_dense_replace
                    multi_latent_attention=True, q_lora_rank=1536, kv_lora_rank=512,
                    qk_head_dim=128, qk_pos_emb_head_dim=64, v_head_dim=128,
                    normalization="RMSNorm", activation="swiglu", max_seq_len=131072,
                    source=_HF.format("moonshotai/Kimi-K2-Instruct")),
        ModelPreset("gpt-oss-120b", num_layers=36, hidden_size=2880, num_attention_heads=64,
                    num_query_groups=8,  # num_key_value_heads
                    kv_channels=64,  # head_dim
                    ffn_hidden_size=2880,  # intermediate_size (every layer is MoE)
                    vocab_size=201088, num_experts=128,  # num_local_experts
                    moe_router_topk=4,  # num_experts_per_tok
                    attention_sinks=True, add_bias_linear=True,
                    normalization="RMSNorm", activation="swiglu", max_seq_len=131072,
                    source=_HF.format("openai/gpt-oss-120b")
                    + " (transformers 5.12.1's GptOssConfig defaults hold the same numbers); every other layer's "
                      "128-token sliding window is not modelled"),
        ModelPreset("deepseek-v2-lite", num_layers=27, hidden_size=2048, num_attention_heads=16,
                    ffn_hidden_size=10944,  # intermediate_size: the one dense layer
                    vocab_size=102400, num_experts=64,  # n_routed_experts
                    moe_router_topk=6,  # num_experts_per_tok
                    moe_ffn_hidden_size=1408,  # moe_intermediate_size
                    num_shared_experts=2, moe_shared_expert_intermediate_size=2 * 1408,
                    first_k_dense=1,  # first_k_dense_replace
                    multi_latent_attention=True, q_lora_rank=None, kv_lora_rank=512,
                    qk_head_dim=128, qk_pos_emb_head_dim=64, v_head_dim=128,
                    normalization="RMSNorm", activation="swiglu",
                    max_seq_len=163840,  # max_position_embeddings
                    source=_HF.format("deepseek-ai/DeepSeek-V2-Lite")),
        ModelPreset("qwen3-30b-a3b", num_layers=48, hidden_size=2048, num_attention_heads=32,
                    num_query_groups=4,  # num_key_value_heads
                    kv_channels=128,  # head_dim (32 heads x 128 = 4096 != hidden 2048)
                    ffn_hidden_size=6144,  # intermediate_size (unused: every layer is MoE)
                    vocab_size=151936, num_experts=128, moe_router_topk=8,
                    moe_ffn_hidden_size=768, qk_layernorm=True,
                    normalization="RMSNorm", activation="swiglu", max_seq_len=40960,
                    source=_HF.format("Qwen/Qwen3-30B-A3B")),
        # DeepSeek-V4-Flash, for the planner only (lesson 10's memory wall): transformers 5.12.1's
        # DeepseekV4Config defaults are its published config.json (43 layers, 256 routed experts of
        # width 2048 + 1 shared, top-6, 64 heads, q-LoRA 1024, 129280 tokens). Its attention (one
        # 512-wide KV head, a grouped low-rank output, a compressor/indexer) and hyper-connections
        # have no ModelPreset fields: MLA widths stand in, with the same query (q_lora 1024 ->
        # 64 x 512), KV (4096 -> 448 + 64) and output (64 x 256 -> 4096) sizes; the latent up
        # projection it adds is about the compressor's size. Parameters: 284.7B planned against
        # transformers' 284.3B (tests/unit/test_smallest_fit.py). Refused for training (helpers/job/architectures.py).
        ModelPreset("deepseek-v4-flash", num_layers=43, hidden_size=4096, num_attention_heads=64,
                    ffn_hidden_size=2048,  # no dense layer: every layer is MoE
                    vocab_size=129280, num_experts=256, moe_router_topk=6, moe_ffn_hidden_size=2048,
                    num_shared_experts=1, moe_shared_expert_intermediate_size=2048,
                    multi_latent_attention=True, q_lora_rank=1024, kv_lora_rank=448,
                    qk_head_dim=448, qk_pos_emb_head_dim=64, v_head_dim=256,
                    normalization="RMSNorm", activation="swiglu", max_seq_len=1048576,
                    source="transformers 5.12.1 DeepseekV4Config defaults (= deepseek-ai/DeepSeek-V4-Flash "
                           "config.json); attention approximated by MLA widths (see helpers/job/models.py)"),
        ModelPreset("nemotron-3-nano-30b-a3b", num_layers=len(_NEMOTRON_PATTERN), hidden_size=2688,
                    num_attention_heads=32, num_query_groups=2,  # num_key_value_heads
                    kv_channels=128,  # head_dim
                    ffn_hidden_size=1856,  # intermediate_size
                    vocab_size=131072, num_experts=128,  # n_routed_experts
                    moe_router_topk=6,  # num_experts_per_tok (the model card's prose says 5; config says 6)
                    moe_ffn_hidden_size=1856,  # moe_intermediate_size
                    num_shared_experts=1, moe_shared_expert_intermediate_size=3712,
                    hybrid_pattern=_NEMOTRON_PATTERN,  # hybrid_override_pattern
                    mamba_num_heads=64, mamba_head_dim=64, mamba_state_dim=128, mamba_num_groups=8,
                    normalization="RMSNorm", activation="squared_relu",
                    max_seq_len=262144,  # max_position_embeddings
                    source=_HF.format("nvidia/NVIDIA-Nemotron-3-Nano-30B-A3B-BF16")
                    + " (same numbers in Megatron-LM examples/post_training/modelopt/conf/nvidia/)"),
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
