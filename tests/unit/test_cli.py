"""The command line is generated from JobSpec: every field a user sets has a flag with its one-line
doc, flags parse into the same JobSpec the Python API builds, and both entry points answer."""
import dataclasses
import subprocess
import sys

import pytest

from helpers.job.spec import JobSpec
from helpers.launch.cli import parser, spec_from_args



def test_help_lists_every_user_field_with_its_doc():
    text = " ".join(parser().format_help().split())  # argparse wraps lines
    for f in dataclasses.fields(JobSpec):
        if f.metadata.get("cli", True) is False:  # set by the kit (probe, hf_check, the rules), not by users
            continue
        flag = ("--no-" if f.type == "bool" and f.default is True else "--") + f.name.replace("_", "-")
        assert flag in text, flag
        assert f.metadata["doc"].split(";")[0][:30] in text, f.name


@pytest.mark.parametrize("argv, expected", [
    (["--tp", "2", "--nproc", "4"], dict(tp=2, nproc=4)),
    (["--save-interval", "5", "--save-dir", "/tmp/c", "--load-dir", "/tmp/a"], dict(save_interval=5, save_dir="/tmp/c",
                                                                                    load_dir="/tmp/a")),
    (["--eval-only", "--load-dir", "/a", "/b"], dict(eval_only=True, load_dir=["/a", "/b"])),
    (["--no-load-optimizer", "--no-seed-checkpoint"], dict(load_optimizer=False, seed_checkpoint=False)),
    (["--data", "wikitext", "--tokenizer", "gpt2", "--data-dir", "generated"],
     dict(data="wikitext", tokenizer="gpt2", data_dir="generated")),
    (["--env", "NCCL_DEBUG=INFO", "--model-overrides", "num_layers=2"],
     dict(env={"NCCL_DEBUG": "INFO"}, model_overrides={"num_layers": 2})),
    (["--timeout", "30"], dict(timeout_s=30.0)),
    (["--faults", "nan@2"], dict(faults=["nan@2"])),  # a list even with one
    (["--faults", "raise@2:rank1", "hang_during_save@3", "--log-interval", "5", "--instruments", "off",
      "--capture-tensors-at", "3", "--torch-profile", "p.txt", "--torch-profile-mode", "device"],
     dict(faults=["raise@2:rank1", "hang_during_save@3"], log_interval=5, instruments="off", capture_tensors_at=3,
          torch_profile="p.txt", torch_profile_mode="device")),
    ([], {}),
], ids=["layout", "checkpoints", "eval-only-several", "turn-off", "data", "key-value", "alias", "one-fault",
        "recording-and-faults", "defaults"])
def test_flags_build_the_same_jobspec_as_the_api(argv, expected):
    assert spec_from_args(parser().parse_args(argv)) == JobSpec(**expected)


def test_a_wrong_choice_is_refused_by_name():
    with pytest.raises(SystemExit):
        parser().parse_args(["--precision", "fp64"])


@pytest.mark.parametrize("module", ["helpers", "helpers.launch"])
def test_both_entry_points_answer(module):
    out = subprocess.run([sys.executable, "-m", module, "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and "--save-interval" in out.stdout and "--hf-model" in out.stdout
