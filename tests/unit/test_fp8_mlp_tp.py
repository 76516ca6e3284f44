"""The fused FP8 GeLU MLP (helpers/runtime/layers/fp8_mlp.py) under tensor parallelism, with and without
sequence parallel: two CPU processes (gloo, the kit's CPU compatibility layer) build the same two-layer
GPT from the kit's own layer spec (helpers/runtime/layers/specs.py, delayed FP8 recipe) twice, once with
FP8GeluMLP and once with Megatron's MLP around the same FP8 linears, and train both three SGD steps.
On every rank the losses and every gradient must be bit-equal: the fused MLP does the column- and
row-parallel communication the two linears would (copy/gather before FC1, all-reduce/reduce-scatter
after FC2). FP8 jobs need a GPU, so this is the only place the TP path runs on the CPU."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = r'''
import json, sys
from functools import partial

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def rank_main(rank, store_path, out_path, sequence_parallel):
    from helpers.runtime.compat import cpu as cpu_compat
    cpu_compat.import_megatron_eagerly()
    cpu_compat.activate()
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel
    from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.mlp import MLP
    from megatron.core.transformer.module import Float16Module
    from tests.fp8_sgd import sgd_steps
    from helpers.runtime.layers import specs

    dist.init_process_group("gloo", store=dist.FileStore(store_path, 2), rank=rank, world_size=2)
    ps.initialize_model_parallel(tensor_model_parallel_size=2)

    def gpt(fused):
        model_parallel_cuda_manual_seed(0)
        torch.manual_seed(1)
        cfg = TransformerConfig(num_layers=2, hidden_size=64, num_attention_heads=4, use_cpu_initialization=True,
                                params_dtype=torch.bfloat16, bf16=True, gradient_accumulation_fusion=False,
                                add_bias_linear=False, hidden_dropout=0.0, attention_dropout=0.0,
                                tensor_model_parallel_size=2, sequence_parallel=sequence_parallel)
        block = specs.block_spec(cfg, None, "sdpa", "delayed")  # what the kit's worker builds
        if not fused:  # Megatron's own MLP around the same FP8 linears
            for layer in block.layer_specs:
                mlp = layer.submodules.mlp
                layer.submodules.mlp = partial(MLP.as_mlp_submodule, *mlp.args, **mlp.keywords)
        return Float16Module(cfg, GPTModel(config=cfg, transformer_layer_spec=block, vocab_size=96,
                                           max_sequence_length=16))

    tokens = torch.randint(0, 96, (2, 16), generator=torch.Generator().manual_seed(3))
    positions = torch.arange(16).expand(2, 16)
    runs = {}
    for fused in (True, False):
        model = gpt(fused)
        # each rank's shard of the vocabulary-parallel logits: the ranks' losses differ
        losses, grads = sgd_steps(model, tokens, positions)
        runs[fused] = {"class": type(model.module.decoder.layers[0].mlp).__name__, "losses": losses, "grads": grads}
    result = {"rank": rank, "classes": [runs[True]["class"], runs[False]["class"]],
              "losses": runs[True]["losses"], "same_losses": runs[True]["losses"] == runs[False]["losses"],
              "same_grads": all(torch.equal(a, b) for ga, gb in zip(runs[True]["grads"], runs[False]["grads"])
                                for a, b in zip(ga, gb))}
    with open(f"{out_path}.{rank}", "w") as f:
        json.dump(result, f)
    ps.destroy_model_parallel()
    dist.destroy_process_group()


if __name__ == "__main__":
    store, out, sp = sys.argv[1], sys.argv[2], sys.argv[3] == "sp"
    mp.spawn(rank_main, args=(store, out, sp), nprocs=2)
'''


@pytest.mark.parametrize("sequence_parallel", [False, True], ids=["tp2", "tp2-sp"])
def test_fused_mlp_equals_megatrons_mlp_at_tp2(tmp_path, sequence_parallel):
    script = tmp_path / "tp2.py"
    script.write_text(SCRIPT)
    root = str(Path(__file__).resolve().parents[2])
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "store"), str(tmp_path / "out"),
                           "sp" if sequence_parallel else "no-sp"], cwd=root, capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": root, "PYTHONWARNINGS": "ignore"})
    assert done.returncode == 0, done.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"out.{r}").read_text()) for r in range(2)]
    for res in ranks:
        assert res["classes"] == ["FP8GeluMLP", "MLP"], res
        assert res["same_losses"] and res["same_grads"], res
        assert len(set(res["losses"])) == 3  # three steps that trained
