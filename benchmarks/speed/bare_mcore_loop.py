"""A bare Megatron-Core training loop: the yardstick of benchmarks/speed/throughput.py.

Written for the benchmark in the style of Megatron-Core's QuickStart loop (one GPU, NCCL, world
size 1): Megatron's GPTModel on the local layer spec, wrapped as the kit's worker wraps it
(Float16Module, Megatron DDP with fp32 gradient buffers, Megatron's Adam optimizer with fp32 main
parameters and gradient clipping), Megatron's forward/backward schedule, synthetic tokens made on
the GPU. Nothing of the kit's runner, run directory or instrumentation: what the kit adds on top is
what the kit/bare ratio measures. The attention choice and the fusions are the same switches the
kit has (the kit's SDPA core attention, or Megatron's local DotProductAttention).

    python -m benchmarks.speed.bare_mcore_loop '{"model": {...ModelPreset fields}, "seq_len": 2048,
        "micro_batch": 4, "global_batch": 32, "iters": 10, "attention": "sdpa", "fusions": true, "fused_adam": true,
        "profile": null, "recompute": "none"}'

"recompute": none | selective (Megatron's recompute_granularity="selective": core attention) | full
(recompute_granularity="full", method "uniform", one layer per chunk: every layer's forward again).

Prints one JSON line: step times, tokens/s, peak allocated bytes, parameter count.
"""
import json
import os
import statistics
import sys
import time
from pathlib import Path


def build(cfg: dict):
    import torch
    from megatron.core.distributed import (
        DistributedDataParallel,
        DistributedDataParallelConfig,
    )
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.module import Float16Module

    m, fused = cfg["model"], cfg["fusions"]
    recompute = {"none": {}, "selective": dict(recompute_granularity="selective"),
                 "full": dict(recompute_granularity="full", recompute_method="uniform", recompute_num_layers=1),
                 }[cfg.get("recompute", "none")]
    gated = m.get("activation") == "swiglu"  # Llama's MLP: SiLU-gated (the presets' other dense MLPs: GeLU)
    moe = {}
    if m.get("num_experts"):
        moe = dict(num_moe_experts=m["num_experts"], moe_router_topk=m.get("moe_router_topk", 2),
                   moe_ffn_hidden_size=m.get("moe_ffn_hidden_size") or m["ffn_hidden_size"],
                   moe_token_dispatcher_type="alltoall", moe_router_load_balancing_type="aux_loss",
                   moe_aux_loss_coeff=1e-2, moe_grouped_gemm=False, moe_permute_fusion=False)
    config = TransformerConfig(
        num_layers=m["num_layers"], hidden_size=m["hidden_size"], num_attention_heads=m["num_attention_heads"],
        num_query_groups=m.get("num_query_groups"), ffn_hidden_size=m["ffn_hidden_size"],
        normalization=m.get("normalization", "LayerNorm"), add_bias_linear=m.get("add_bias_linear", False),
        hidden_dropout=0.0, attention_dropout=0.0, bf16=True, params_dtype=torch.bfloat16,
        pipeline_dtype=torch.bfloat16, gradient_accumulation_fusion=fused, masked_softmax_fusion=False,
        apply_rope_fusion=False, persist_layer_norm=False, init_method_std=0.02,
        bias_activation_fusion=fused and m.get("add_bias_linear", False), bias_dropout_fusion=fused,
        cross_entropy_loss_fusion=fused, cross_entropy_fusion_impl="native",
        gated_linear_unit=gated, activation_func=torch.nn.functional.silu if gated else torch.nn.functional.gelu,
        kv_channels=m.get("kv_channels"), **recompute, **moe)
    layer = get_gpt_layer_local_spec(num_experts=m.get("num_experts"), moe_grouped_gemm=False,
                                     normalization=config.normalization)
    if fused:  # the kit's compiled rotary and its weight-gradient accumulation, as the kit's worker uses on GPU
        from helpers.runtime.layers import rotary, wgrad_accumulation
        rotary.install()
        wgrad_accumulation.install()
    if cfg["attention"] == "sdpa":
        from helpers.runtime.layers.attention.core import SDPACoreAttention
        layer.submodules.self_attention.submodules.core_attention = SDPACoreAttention
    model = GPTModel(config=config, transformer_layer_spec=layer, vocab_size=m["vocab_size"],
                     max_sequence_length=cfg["seq_len"], position_embedding_type="rope",
                     share_embeddings_and_output_weights=False).cuda()
    params = sum(p.numel() for p in model.parameters())
    model = DistributedDataParallel(config, DistributedDataParallelConfig(grad_reduce_in_fp32=True),
                                    Float16Module(config, model))
    opt = get_megatron_optimizer(OptimizerConfig(optimizer="adam", lr=3e-4, weight_decay=0.01, clip_grad=1.0,
                                                 bf16=True, params_dtype=torch.bfloat16), [model])
    if cfg.get("fused_adam"):  # torch's fused Adam kernel on the fp32 main parameters (as the kit on GPU)
        from helpers.runtime.build import use_fused_adam
        use_fused_adam(opt)
    return config, model, opt, params


def microbatches(cfg, vocab, steps):
    import torch
    g = torch.Generator(device="cuda").manual_seed(1234)
    s, b = cfg["seq_len"], cfg["micro_batch"]
    pos = torch.arange(s, device="cuda").expand(b, s)
    for _ in range(steps):
        t = torch.randint(0, vocab, (b, s + 1), device="cuda", generator=g)
        yield {"tokens": t[:, :-1], "labels": t[:, 1:], "position_ids": pos,
               "loss_mask": torch.ones(b, s, device="cuda")}


def forward_step(data_iterator, model):
    import torch
    batch = next(data_iterator)
    out = model(batch["tokens"], batch["position_ids"], attention_mask=None, labels=batch["labels"])

    def loss_func(output_tensor):
        loss = torch.sum(output_tensor.float().view(-1) * batch["loss_mask"].view(-1)) / batch["loss_mask"].sum()
        return loss, {"lm loss": loss.detach()}
    return out, loss_func


def main(cfg: dict) -> dict:
    import torch
    import torch.distributed as dist
    from megatron.core import parallel_state as ps
    from megatron.core.distributed import finalize_model_grads
    from megatron.core.pipeline_parallel import get_forward_backward_func
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29533")
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", world_size=1, rank=0)
    ps.initialize_model_parallel(1, 1)
    torch.manual_seed(1234)
    model_parallel_cuda_manual_seed(1234)
    config, model, opt, params = build(cfg)
    config.finalize_model_grads_func = finalize_model_grads
    config.grad_scale_func = opt.scale_loss
    config.no_sync_func = model.no_sync
    micro = cfg["global_batch"] // cfg["micro_batch"]
    data = microbatches(cfg, cfg["model"]["vocab_size"], micro * cfg["iters"])
    step_times, losses = [], []

    def one_step():
        model.zero_grad_buffer()
        opt.zero_grad()
        out = get_forward_backward_func()(forward_step_func=forward_step, data_iterator=data, model=model,
                                          num_microbatches=micro, seq_length=cfg["seq_len"],
                                          micro_batch_size=cfg["micro_batch"], forward_only=False)
        opt.step()
        return out

    profile_at = cfg["iters"] - 2 if cfg.get("profile") else None
    for it in range(cfg["iters"]):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        if it == profile_at:  # two steps under the profiler, after the others (steady state)
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                out = one_step()
                out = one_step()
            torch.cuda.synchronize()
            Path(cfg["profile"]).write_text(prof.key_averages().table(sort_by="cuda_time_total", row_limit=40))
            break
        out = one_step()
        torch.cuda.synchronize()
        step_times.append(time.perf_counter() - t0)
        losses.append(float(torch.stack([d["lm loss"] for d in out]).mean()))
    steady = step_times[3:] or step_times
    step = statistics.median(steady)
    result = {"step_time_s": step, "tokens_per_s": cfg["global_batch"] * cfg["seq_len"] / step,
              "step_times_s": step_times, "losses": losses, "params": params,
              "max_allocated_bytes": torch.cuda.max_memory_allocated(),
              "max_reserved_bytes": torch.cuda.max_memory_reserved()}
    dist.destroy_process_group()
    return result


if __name__ == "__main__":
    print("BARE_RESULT " + json.dumps(main(json.loads(sys.argv[1]))), flush=True)
