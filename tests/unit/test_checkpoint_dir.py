"""Checkpoint folders as files, without processes: consolidating node-local folders checks every
file against the manifest of the node that wrote it; Megatron-LM's tracker names the latest; a
checkpoint Megatron-Bridge wrote (no kit record) is accepted when complete, checked against the
job's model from its run_config.yaml, and loads without an optimizer only."""
import pytest

from helpers.errors import CheckpointError
from helpers.job import checkpoint_dir


def test_consolidate_refuses_a_file_that_changed_in_transit(tmp_path):
    """A copied shard that differs from what its node recorded is named, not loaded."""
    folders = []
    for node, files in enumerate([{"__0_0.distcp": b"zero", ".metadata": b"index"}, {"__1_0.distcp": b"one"}]):
        it = tmp_path / f"node{node}" / "iter_0000001"
        it.mkdir(parents=True)
        for name, data in files.items():
            (it / name).write_bytes(data)
        checkpoint_dir.node_manifest(it, node)
        folders.append(it.parent)
    (folders[0] / checkpoint_dir.TRACKER).write_text("1\n")
    (folders[1] / "iter_0000001" / "__1_0.distcp").write_bytes(b"One")
    with pytest.raises(CheckpointError, match=r"__1_0.distcp differs from what node 1 wrote"):
        checkpoint_dir.consolidate(folders)


LLAMA = {"name": "llama", "num_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "ffn_hidden_size": 160,
         "vocab_size": 512, "num_query_groups": 2, "num_experts": None}
RUN_CONFIG = """_target_: megatron.bridge.training.config.ConfigContainer
model:
  _target_: megatron.bridge.models.gpt_provider.GPTModelProvider
  num_layers: 2
  hidden_size: 64
  num_attention_heads: 4
  num_query_groups: 2
  ffn_hidden_size: 160
  vocab_size: 512
  num_moe_experts: null
  tensor_model_parallel_size: 1
  pipeline_model_parallel_size: 1
checkpoint:
  _target_: megatron.bridge.training.config.CheckpointConfig
  save_optim: false
  save_rng: false
optimizer:
  _target_: megatron.core.optimizer.optimizer_config.OptimizerConfig
  use_distributed_optimizer: false
"""


def _bridge_import(root, run_config=RUN_CONFIG, tracker=True):
    """The files AutoBridge.import_ckpt writes (the tensors' contents do not matter here)."""
    it = root / "iter_0000000"
    it.mkdir(parents=True)
    (it / "metadata.json").write_text('{"sharded_backend": "torch_dist", "sharded_backend_version": 1}')
    (it / ".metadata").write_bytes(b"index")
    (it / "__0_0.distcp").write_bytes(b"tensors")
    if run_config is not None:
        (it / "run_config.yaml").write_text(run_config)
    if tracker:
        (root / checkpoint_dir.TRACKER).write_text("0\n")
    return it


def test_megatron_lm_tracker_names_the_latest_iteration(tmp_path):
    (tmp_path / checkpoint_dir.TRACKER).write_text("12\n")
    assert checkpoint_dir.latest(tmp_path) == tmp_path / "iter_0000012"
    (tmp_path / checkpoint_dir.TRACKER).write_text("release\n")
    assert checkpoint_dir.latest(tmp_path) == tmp_path / "release"
    checkpoint_dir.write_tracker(tmp_path, 7)
    assert (tmp_path / checkpoint_dir.TRACKER).read_text() == "7\n"
    (tmp_path / checkpoint_dir.TRACKER).write_text("iter_0000007\n")
    with pytest.raises(CheckpointError, match="not an iteration number"):
        checkpoint_dir.latest(tmp_path)


def test_a_bridge_checkpoint_is_accepted_weights_only(tmp_path):
    it = _bridge_import(tmp_path)
    info = checkpoint_dir.verify(tmp_path, LLAMA)
    assert info["path"] == str(it) and info["iteration"] == 0 and info["written_by"] == "Megatron-Bridge"
    assert info["optimizer"] is None and info["layout"] is None
    checkpoint_dir.check_optimizer(info, dist_opt=False, loading_optimizer=False)
    with pytest.raises(CheckpointError, match=r"holds no optimizer state.*load_optimizer=False") as err:
        checkpoint_dir.check_optimizer(info, dist_opt=False, loading_optimizer=True)
    assert err.value.kind == "no-optimizer"


def test_a_bridge_checkpoint_of_another_model_is_refused(tmp_path):
    _bridge_import(tmp_path, RUN_CONFIG.replace("num_query_groups: 2", "num_query_groups: 4"))
    with pytest.raises(CheckpointError, match=r"different model.*num_query_groups: saved 4, this job 2") as err:
        checkpoint_dir.verify(tmp_path, LLAMA)
    assert err.value.kind == "model"


def test_an_untracked_folder_without_the_kit_record_or_run_config_is_partial(tmp_path):
    it = _bridge_import(tmp_path, run_config=None, tracker=False)
    with pytest.raises(CheckpointError, match="is partial") as err:
        checkpoint_dir.verify(it)
    assert err.value.kind == "partial"
    (tmp_path / checkpoint_dir.TRACKER).write_text("0\n")  # Megatron-LM's tracker, written after every shard
    assert checkpoint_dir.verify(it)["written_by"] == "Megatron-LM"
