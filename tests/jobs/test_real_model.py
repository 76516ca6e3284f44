"""A real pretrained model (SmolLM2-135M-Instruct, helpers/launch/pretrained.py) with its own
tokenizer on real text, at a layout other than lesson 18's (PP=2): tensor parallel over its 3 KV
heads, started from the shell. Its validation and test losses before any step must equal one
process's (fp32 on CPU), and the validation loss must be the pretrained model's (transformers'
on the same samples: lesson 18 checks that at PP=2), not the ln(49152) = 10.8 of a model that
knows nothing."""
import math
import subprocess
import sys

import pytest

from helpers import launch
from helpers.job import paths
from helpers.launch import pretrained
from helpers.rundir.reader import RunDir

RTOL = 1e-5  # fp32 on CPU: the layouts differ only in the order of reductions (tests/jobs/test_layouts.py)
JOB = dict(data="wikitext", iters=0, seq_len=128, micro_batch=1, global_batch=2, eval_iters=1)


@pytest.fixture(scope="module")
def folder():
    return pretrained.smollm2()


def test_the_real_model_validates_alike_at_tp3_from_the_shell(folder, tmp_path):
    if paths.data_dir() is None:
        pytest.skip("KIT_DATA_DIR with WikiText-2 is not set (CI sets it)")
    one = launch.run(hf_model=str(folder), device="cpu", progress=False, out=str(tmp_path / "one"), **JOB)
    shell = subprocess.run([sys.executable, "-m", "helpers", "--hf-model", str(folder), "--data", "wikitext",
                            "--tp", "3", "--iters", "0", "--seq-len", "128", "--micro-batch", "1", "--global-batch",
                            "2", "--eval-iters", "1", "--device", "cpu", "--out", str(tmp_path / "tp3")],
                           capture_output=True, text=True, timeout=600)
    assert shell.returncode == 0, shell.stderr[-3000:]
    tp3 = RunDir(shell.stdout.strip().splitlines()[-1])  # the command line's last line: the run directory
    assert tp3.spec.tp == 3 and tp3.spec.tokenizer == one.spec.tokenizer == "hf"
    for a, b in zip(one.evaluations, tp3.evaluations, strict=True):
        assert a["split"] == b["split"] and abs(a["loss"] - b["loss"]) / a["loss"] <= RTOL, (a, b)
    assert one.evaluations[0]["loss"] < 5 < math.log(49152)
