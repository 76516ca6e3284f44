"""The checking process behind helpers/rundir/bridge_recipe.check_bridge_recipes: Megatron-Bridge's
own code on a recipe the kit wrote, on CPU. It imports Megatron-Core and Bridge's training config
once (te_standin.training_config_imports: no Transformer Engine or megatron-energon needed), then
forks a child per recipe, which imports the file, calls its config(), runs Bridge's
`runtime_config_update` on it (what `pretrain` does before it initializes anything: the mixed
precision applied, the data-parallel size, `ConfigContainer.validate()` with the provider's own
checks) and reports what the ConfigContainer holds: the provider's class, layer spec, parallel sizes
and activation recompute, the batch sizes and data-parallel size, the dataset, tokenizer and
precision. A child per recipe: each recipe is a fresh module, and nothing one config() sets reaches
the next.

    python -m helpers.runtime.hf.recipe_check   # stdin: [{"path": "<run dir>/bridge_recipe.py", "world_size": 4}, ...]"""
from __future__ import annotations

import json
import os
import sys

SIZES = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "virtual_pipeline_model_parallel_size",
         "context_parallel_size", "expert_model_parallel_size", "expert_tensor_parallel_size", "sequence_parallel",
         "num_layers_in_first_pipeline_stage", "num_layers_in_last_pipeline_stage")
MODEL = ("num_layers", "hidden_size", "num_attention_heads", "num_query_groups", "ffn_hidden_size", "vocab_size",
         "seq_length", "num_moe_experts", "normalization", "gated_linear_unit", "recompute_granularity",
         "recompute_method", "recompute_num_layers", "recompute_modules")


def summary(cfg) -> dict:
    """What the ConfigContainer says about the job, as JSON."""
    model = cfg.model
    spec = getattr(model, "transformer_layer_spec", None)
    return {
        "model_class": type(model).__name__,
        "layer_spec": getattr(spec, "__name__", type(spec).__name__),
        **{k: getattr(model, k, None) for k in SIZES + MODEL},
        "micro_batch_size": cfg.train.micro_batch_size, "global_batch_size": cfg.train.global_batch_size,
        "train_iters": cfg.train.train_iters, "data_parallel_size": getattr(cfg, "data_parallel_size", None),
        "dataset_class": type(cfg.dataset).__name__,
        "blend": getattr(cfg.dataset, "blend", None), "blend_per_split": getattr(cfg.dataset, "blend_per_split", None),
        "tokenizer_type": cfg.tokenizer.tokenizer_type,
        "bf16": getattr(model, "bf16", None),
        "use_distributed_optimizer": cfg.ddp.use_distributed_optimizer,
        "lr": cfg.optimizer.lr, "lr_decay_style": cfg.scheduler.lr_decay_style,
        "save": cfg.checkpoint.save, "load": cfg.checkpoint.load,
    }


def _check_in_child(path: str, world_size: int) -> dict:
    import importlib.util

    from megatron.bridge.training.config import runtime_config_update

    os.environ.update(WORLD_SIZE=str(world_size), RANK="0", LOCAL_RANK="0")
    module_spec = importlib.util.spec_from_file_location("kit_bridge_recipe", path)
    recipe = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(recipe)
    cfg = recipe.config()
    runtime_config_update(cfg)
    return summary(cfg)


def _checked(path: str, world_size: int) -> dict:
    """In the forked child: the recipe checked with Bridge's training-config imports in place."""
    from helpers.runtime.hf import te_standin

    with te_standin.training_config_imports():
        return _check_in_child(path, world_size)


def main() -> None:
    import warnings

    from helpers.job import forked

    warnings.simplefilter("ignore")
    import megatron.core  # noqa: F401  (before Bridge: the TE stand-in relies on it)

    from helpers.runtime.hf import te_standin

    with te_standin.training_config_imports():  # once, inherited by every child
        import megatron.bridge.models.gpt_provider  # noqa: F401
        import megatron.bridge.training.config  # noqa: F401
    results = []
    for item in json.loads(sys.stdin.read()):
        result = forked.call(_checked, item["path"], item["world_size"])
        results.append(json.loads(json.dumps(result, default=str)))
    print(json.dumps(results))


if __name__ == "__main__":
    main()
