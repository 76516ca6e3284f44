"""Checkpoints Megatron-LM and Megatron-Bridge load, shown with their own code on CPU (gloo, fp32)
and a tiny Llama (helpers/launch/tiny_hf.py) imported from Hugging Face:

* the kit's checkpoints of it, trained 2 iterations at TP=2 and at PP=2, are read by Megatron-LM's
  `load_args_from_checkpoint` (its tracker, the common state's `args`, `checkpoint_version` 3.0) and
  by Bridge's readers (run_config.yaml instantiated as a ConfigContainer, latest_train_state.pt),
  and Bridge's `AutoBridge.export_ckpt` turns each into a Hugging Face folder equal, tensor for
  tensor and bit for bit, to the kit's own export_hf of it;
* a checkpoint Bridge's `AutoBridge.import_ckpt` wrote (weights only) starts a kit job at PP=2 with
  load_optimizer=False: the losses of the kit job that imports that HF folder itself at PP=2, to
  1e-5, not those of the folder the job's hf_model names (another seed: the weights come from the
  checkpoint). Asked for the optimizer too, the job stops before start with one error.
Bridge's conversion runs in its own process (tests/jobs/bridge_conversion.py). Unit tests of the
folder rules (trackers, a Bridge checkpoint's record): tests/unit/test_checkpoint_dir.py."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors.torch import load_file

from helpers import launch
from helpers.job import paths
from helpers.launch import tiny_hf
from tests.jobs import bridge_conversion

RTOL = 1e-5  # fp32 on CPU; the same weights and data give the same first loss (measured: equal)
ITERS = 2
JOB = dict(seq_len=32, micro_batch=2, global_batch=4, device="cpu", progress=False)
LAYOUTS = {"tp2": dict(tp=2, nproc=2), "pp2": dict(pp=2, nproc=2)}


@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    """The tiny Llama the jobs import, and one of the same shape with other weights (seed 1)."""
    root = tmp_path_factory.mktemp("hf")
    return {"llama": tiny_hf.make("llama", root / "llama"), "other": tiny_hf.make("llama", root / "other", seed=1)}


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    return tmp_path_factory.mktemp("bridge-checkpoints")


@pytest.fixture(scope="module")
def trained(hf, out, two_at_a_time):
    """The imported Llama trained ITERS iterations at TP=2 and at PP=2, saved at the end."""
    def job(name):
        return launch.run(hf_model=str(hf["llama"]), out=str(out / "runs"), iters=ITERS, save_interval=ITERS,
                          **JOB, **LAYOUTS[name])
    runs = two_at_a_time(job, LAYOUTS)
    for run in runs.values():
        if isinstance(run, Exception):
            raise run
    return runs


@pytest.fixture(scope="module")
def exports(hf, out, trained, two_at_a_time):
    """Per layout: (Bridge's export_ckpt of the checkpoint, the kit's export_hf of it at one process)."""
    def job(key):
        name, who = key
        checkpoints = trained[name].path / "checkpoints"
        folder = out / f"{who}-{name}"
        if who == "bridge":
            return bridge_conversion.export_ckpt(checkpoints, hf["llama"], folder)
        launch.run(hf_model=str(hf["llama"]), out=str(out / "runs"), **{**JOB, "iters": 0}, eval_only=True,
                   load_dir=str(checkpoints), export_hf=str(folder))
        return folder
    return two_at_a_time(job, [(name, who) for name in LAYOUTS for who in ("bridge", "kit")])


def test_megatron_lm_and_bridge_read_the_kit_checkpoints(trained, hf):
    roots = [str(trained[name].path / "checkpoints") for name in LAYOUTS]
    done = subprocess.run([sys.executable, str(Path(__file__).with_name("megatron_readers.py")), *roots],
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(paths.REPO_ROOT)})
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    for name, root in zip(LAYOUTS, roots):
        spec, lm, bridge = trained[name].spec, found[root]["megatron_lm"], found[root]["bridge"]
        assert lm == {"num_layers": 2, "hidden_size": 64, "ffn_hidden_size": 160, "num_attention_heads": 4,
                      "num_query_groups": 2, "swiglu": True, "normalization": "RMSNorm", "padded_vocab_size": 512,
                      "tokenizer_type": "HuggingFaceTokenizer", "tokenizer_model": os.path.abspath(hf["llama"]),
                      "position_embedding_type": "rope", "untie_embeddings_and_output_weights": True,
                      "tensor_model_parallel_size": spec.tp, "pipeline_model_parallel_size": spec.pp,
                      "iteration": ITERS, "checkpoint_version": 3.0, "no_save_rng": True,
                      "consumed_train_samples": ITERS * spec.global_batch_size}, (name, lm)
        assert bridge == {"container": "ConfigContainer", "provider": "GPTModelProvider",
                          "layer_spec": "local_layer_spec", "tensor_model_parallel_size": spec.tp,
                          "pipeline_model_parallel_size": spec.pp, "num_layers": 2, "vocab_size": 512,
                          "global_batch_size": spec.global_batch_size, "tokenizer_type": "HuggingFaceTokenizer",
                          "save_optim": True, "save_rng": False, "step": ITERS,
                          "consumed_train_samples": ITERS * spec.global_batch_size}, (name, bridge)


@pytest.mark.parametrize("name", LAYOUTS)
def test_bridge_export_of_a_kit_checkpoint_equals_the_kits_export(exports, hf, name):
    for who in ("bridge", "kit"):
        if isinstance(exports[(name, who)], Exception):
            raise exports[(name, who)]
    theirs = load_file(exports[(name, "bridge")] / "model.safetensors")
    ours = load_file(exports[(name, "kit")] / "model.safetensors")
    source = load_file(Path(hf["llama"]) / "model.safetensors")
    assert sorted(theirs) == sorted(ours) == sorted(source)
    unequal = [k for k in ours if theirs[k].dtype != ours[k].dtype or not bool((theirs[k] == ours[k]).all())]
    assert unequal == [], unequal
    assert all(not bool((ours[k] == source[k]).all()) for k in ours), "training changed every tensor"


def test_a_bridge_import_starts_a_kit_job_at_pp2_with_its_first_loss(hf, out, trained):
    checkpoint = bridge_conversion.import_ckpt(hf["other"], out / "bridge-import")
    assert (checkpoint / "latest_checkpointed_iteration.txt").read_text().strip() == "0"
    assert {p.name for p in (checkpoint / "iter_0000000").iterdir()} >= {"run_config.yaml", "train_state.pt",
                                                                         "tokenizer", "metadata.json"}
    job = dict(out=str(out / "runs"), iters=ITERS, **JOB, **LAYOUTS["pp2"])
    with pytest.raises(launch.InvalidJob, match=r"checkpoint_no_optimizer.*holds no optimizer state.*"
                                                r"load_optimizer=False"):
        launch.run(hf_model=str(hf["llama"]), load_dir=str(checkpoint), **job)
    loaded = launch.run(hf_model=str(hf["llama"]), load_dir=str(checkpoint), load_optimizer=False, **job)
    imported = launch.run(hf_model=str(hf["other"]), **job)  # the HF folder Bridge imported, imported by the kit
    assert abs(loaded.losses[0] - imported.losses[0]) <= RTOL * imported.losses[0], (loaded.losses, imported.losses)
    own = trained["pp2"].losses[0]  # the job's hf_model folder, same layout and data
    assert abs(loaded.losses[0] - own) > 100 * RTOL * own, (loaded.losses, own)
    resumed = json.loads((loaded.path / "resumed.json").read_text())
    assert resumed["written_by"] == "Megatron-Bridge" and resumed["iteration"] == 0
    assert resumed["optimizer_loaded"] is False and resumed["rng_restored"] is False
