"""Megatron-Bridge's own Llama 3 8B pretraining recipe run from the shell, shrunk onto this CPU in
the recipe's layout (TP1 PP1 CP2, distributed optimizer, gradient and parameter overlap): 2 ranks,
4 layers of width 64, 64 tokens, 2 iterations (helpers/launch/from_megatron.py). The same command
plans the full-size job on 8 H100s first."""
import json
import math
import subprocess
import sys
from pathlib import Path

from helpers import launch
from helpers.job import paths

RECIPE = "megatron.bridge.recipes.llama.llama3:llama3_8b_pretrain_config"


def test_bridge_llama3_8b_recipe_shrunk_runs_on_cpu(tmp_path):
    out = subprocess.run([sys.executable, "-m", "helpers", "--bridge-recipe", RECIPE, "--shrink", "--iters", "2",
                          "--nproc", "8", "--plan-on", "h100-80gb", "--out", str(tmp_path / "runs")],
                         capture_output=True, text=True, cwd=paths.REPO_ROOT, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    text = out.stdout
    assert "read megatron.bridge.recipes.llama.llama3:llama3_8b_pretrain_config: model 32 layers, hidden 4096" in text
    assert "model.rotary_base=500000.0" in text  # what the kit does not model is named
    assert "shrunk for cpu (cp2-dp4-distopt -> cp2-distopt): " in text and "hidden_size 4096 -> 64" in text
    assert "memory plan on 8 x NVIDIA H100 SXM 80GB (8 ranks on 1 node(s): dense TP1 CP2 DP4 PP1" in text
    run = launch.RunDir(text.strip().splitlines()[-1])
    spec = json.loads((Path(run.path) / "spec.json").read_text())
    assert (spec["tp"], spec["pp"], spec["cp"], spec["dist_opt"], spec["nproc"], spec["seq_len"], spec["iters"]) == \
        (1, 1, 2, True, 2, 64, 2)
    assert (spec["overlap_grad_reduce"], spec["overlap_param_gather"], spec["device"]) == ("on", "on", "cpu")
    model = spec["model_overrides"]
    assert (model["num_layers"], model["hidden_size"], model["num_attention_heads"], model["num_query_groups"],
            model["activation"], model["normalization"]) == (4, 64, 4, 1, "swiglu", "RMSNorm")
    assert len(run.losses) == 2 and all(math.isfinite(x) for x in run.losses)
    assert run.losses[0] > 5.0  # a fresh 512-token model starts near ln(512) = 6.2
