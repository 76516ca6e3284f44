"""A child process of tests/jobs/test_bridge_checkpoints.py: reads checkpoint roots with Megatron-LM's
and Megatron-Bridge's own readers on CPU and prints what they found, one JSON object per root:

* Megatron-LM: `parse_args` with `--load ROOT --use-checkpoint-args --use-mp-args-from-checkpoint-args`,
  then `load_args_from_checkpoint` (megatron/training/checkpointing.py): the tracker, the common
  state's `args`, `iteration` and `checkpoint_version`;
* Megatron-Bridge: `read_run_config` + `instantiate` of the latest iteration's run_config.yaml (a
  ConfigContainer), `read_train_state` of `latest_train_state.pt` (torch's weights_only rules).

    python tests/jobs/megatron_readers.py ROOT [ROOT ...]"""
import json
import os
import sys
import warnings
from pathlib import Path


def megatron_lm(root: str) -> dict:
    from megatron.training import checkpointing
    from megatron.training.arguments import parse_args

    sys.argv = ["pretrain_gpt.py", "--load", root, "--use-checkpoint-args", "--use-mp-args-from-checkpoint-args"]
    args, saved = checkpointing.load_args_from_checkpoint(parse_args())
    state, _, _, _ = checkpointing._load_base_checkpoint(root, args, rank0=True)
    names = ("num_layers", "hidden_size", "ffn_hidden_size", "num_attention_heads", "num_query_groups", "swiglu",
             "normalization", "padded_vocab_size", "tokenizer_type", "tokenizer_model", "position_embedding_type",
             "untie_embeddings_and_output_weights", "tensor_model_parallel_size", "pipeline_model_parallel_size",
             "iteration")
    return {**{n: getattr(args, n) for n in names}, "checkpoint_version": state["checkpoint_version"],
            "no_save_rng": saved.no_save_rng, "consumed_train_samples": saved.consumed_train_samples}


def bridge(root: str) -> dict:
    from megatron.bridge.training.utils.checkpoint_utils import read_run_config, read_train_state
    from megatron.bridge.utils.instantiate_utils import instantiate

    latest = max(Path(root).glob("iter_*"))
    cfg = instantiate(read_run_config(str(latest / "run_config.yaml")))
    state = read_train_state(str(Path(root) / "latest_train_state.pt"))
    return {"container": type(cfg).__name__, "provider": type(cfg.model).__name__,
            "layer_spec": cfg.model.transformer_layer_spec.__name__,
            "tensor_model_parallel_size": cfg.model.tensor_model_parallel_size,
            "pipeline_model_parallel_size": cfg.model.pipeline_model_parallel_size,
            "num_layers": cfg.model.num_layers, "vocab_size": cfg.model.vocab_size,
            "global_batch_size": cfg.train.global_batch_size, "tokenizer_type": cfg.tokenizer.tokenizer_type,
            "save_optim": cfg.checkpoint.save_optim, "save_rng": cfg.checkpoint.save_rng,
            "step": state.step, "consumed_train_samples": state.consumed_train_samples}


def main() -> None:
    warnings.simplefilter("ignore")
    os.environ["WORLD_SIZE"] = "1"  # what Megatron-LM's parse_args reads
    import megatron.core  # noqa: F401  (before Bridge: the TE stand-in relies on it)

    from helpers.runtime.hf import te_standin

    with te_standin.training_config_imports():
        import megatron.bridge.training.config  # noqa: F401  (Bridge's readers below import it)
    roots = sys.argv[1:]
    print(json.dumps({root: {"megatron_lm": megatron_lm(root), "bridge": bridge(root)} for root in roots}))


if __name__ == "__main__":
    main()
