"""Papermill runs every notebook in notebooks/ with its own (CI-sized) parameters; a notebook whose
cell raises (every claim is an assert) fails the suite, and so does any exercise whose check did
not say "correct" to the right answer passed below. New notebooks are picked up automatically.

Each notebook runs the way `python -m helpers.lessons run` runs it (helpers/lessons/runner.py): in its
own papermill process, whose kernel client waits in steps for messages it could otherwise miss under
load; on CPU, each cell within the runner's timeout. The executed copy shows no answer before its
exercise: no output of a cell before a check holds the answer (tests/exercise_answers.py; the
committed notebooks have no outputs, so this is where a printed answer would show)."""
import json
import shutil
import tempfile
from pathlib import Path

import nbformat
import pytest

from helpers.lessons.runner import run_lesson
from helpers.views.exercises import verdicts
from tests import exercise_answers

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
EXECUTED = ROOT / "tests" / ".executed"
# The exercises' right answers, passed as parameters (no notebook holds them; helpers/views/exercises.py).
ANSWERS = {
    "00_quickstart": {"microbatches_tp2": 8 // 2},  # TP ranks share their tokens (DP=1)
    "01_megatron_in_one_screen": {"qkv_rows_tp2": 3 * 4 * 16 // 2, "pp2_starts_equal": False},  # QKV x heads x dim / TP
    "02_memory": {"llama_dp8_fits": [False, True]},
    # your_*: the run the lessons build from 03 on; 05 and 06 start from 03's worked decision (SETTINGS)
    "03_data_parallel": {"dp_wire_formula": "(n - 1) / n * (grad + grad // 4 * elem)",
                         "dist_opt_flags": "--use-distributed-optimizer",
                         "your_dp4_flags": "--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather "
                                           "--micro-batch-size 2 --global-batch-size 16"},
    # 3 microbatches x (4 per layer x 8 layers + 2); TP=16 on InfiniBand vs TP=8 on NVLink: 2x the
    # microbatches per rank, a 9x slower link, ring 15/8 vs 7/4
    "04_tensor_parallel": {"tp_all_reduces": 3 * (4 * 8 + 2), "tp_time_ratio": 19.3,
                           "tp2_flags": "--tensor-model-parallel-size 2"},
    "05_sequence_parallel": {"sp_all_gathers": 6 * 8 + 1 + 2,  # 6 per layer x 8 layers, embedding 1, output 2
                             "sp_flags": "--sequence-parallel",
                             # micro batch 2 saves 1.42 MB, over the 70% budget; the MLP recomputed: 0.90 MB
                             "your_fit_flags": "--recompute-granularity selective --recompute-modules mlp"},
    "06_pipeline_parallel": {"vpp_isends": 4 * 3 + 4 * (3 - 1), "pp_bubble": 3 / 15,  # (p-1)/(m+p-1)
                             "vpp_flags": "--num-virtual-stages-per-pipeline-rank 2",
                             # global batch 16 at micro batch 2 on DP=2: m = 4, 2 chunks give (p-1)/(v*m+p-1) = 1/9 > 10%;
                             # micro batch 1: m = 8, 2 chunks give 1/17 (4 chunks would not divide 4 layers)
                             "your_pp_flags": "--micro-batch-size 1 --num-virtual-stages-per-pipeline-rank 2"},
    "07_context_parallel": {"kv_gather_bytes": 64 * 2 * (4 // 2) * 16 * 4,  # seq x mb x groups/TP x dim x fp32
                            "cp2_flags": "--context-parallel-size 2"},
    "08_expert_parallel": {"fewer_bytes_dispatcher": "alltoall", "ep2_flags": "--expert-model-parallel-size 2"},
    "09_process_groups_5d": {"ep_group_tp4": [0, 1, 2, 3]},
    "10_layout_lab": {"refused_layouts": {"A": None, "B": "world_divisible_expert", "C": None,
                                          "D": "microbatches_divisible_by_pp_for_vpp"}},
    # no TP collectives on PCIe, no pipeline bubble, the experts spread over all 8 GPUs: the advisor's fastest
    "11_choose_a_layout": {"my_layout": {"ep": 8, "micro_batch": 2, "dist_opt": True}},
    "12_checkpoints": {"checkpoint_bytes": 12 * 263_296},  # weights + Adam's two moments, fp32
    "13_failure_modes": {"ends_by_timeout": ["d", "e"]},  # the two hangs; a dead rank closes its sockets
    "14_smoke_test_cpt_sft": {"replica_groups": [[0, 1], [2, 3]]},  # DP varies faster than PP
    "15_hf_import": {"fc1_rows_tp2": 2 * 160 // 2},  # gate + up of ffn 160, split over TP=2
    "16_hybrid_models": {"ep8_full_recompute_fits": True},
    "17_precision": {"spike_steps": 4},  # the spike stays in a 4-step history for 4 steps
    # vocab matrices: the embedding on stage 0, its tied copy on the last stage; cpt_lr with the default
    # cpt_iters 4: held-out logs -57%, WikiText-2 +1.0% (the check asks at least -50%, at most +3%)
    "18_real_model": {"vocab_matrices_pp2": 2, "cpt_lr": 1.5e-4},
    "19_data_launch_logs": {
        "data_path": "0.7 wiki_valid 0.3 wiki_test",  # a weight before each prefix: shares of samples
        "node_commands": [  # one rendezvous for both nodes; c10d numbers the nodes itself
            "torchrun --nnodes 2 --nproc-per-node 2 --node-rank 0 --rdzv-backend c10d "
            "--rdzv-endpoint node0.cluster:29500 --rdzv-id tiny-gpt pretrain_gpt.py",
            "torchrun --nnodes 2 --nproc-per-node 2 --node-rank 1 --rdzv-backend c10d "
            "--rdzv-endpoint node0.cluster:29500 --rdzv-id tiny-gpt pretrain_gpt.py"],
        # the letters of helpers/rundir/log_symptoms.py (seed 19): the lettered logs of data/megatron_lm_logs/
        "log_diagnosis": {"A": "NaN", "B": "throughput drop", "C": "skipped iterations", "D": "loss spike"}},
    "20_capstone": {"megatron_command": (  # TP2+SP, DP8, micro batch 2, distributed optimizer: the advisor's rank 1;
        # it fits without recompute; DP8 overlaps its reduce and gather; warm-up, cosine decay, checkpoints, a corpus
        "torchrun --nnodes 2 --nproc-per-node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
        "--ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention --num-query-groups 8 "
        "--normalization RMSNorm --swiglu --disable-bias-linear --untie-embeddings-and-output-weights "
        "--position-embedding-type rope --rotary-base 500000 --seq-length 4096 --max-position-embeddings 8192 "
        "--vocab-size 128256 --tensor-model-parallel-size 2 --sequence-parallel --use-distributed-optimizer "
        "--overlap-grad-reduce --overlap-param-gather --micro-batch-size 2 --global-batch-size 256 --bf16 "
        "--lr 3e-4 --min-lr 3e-5 --lr-decay-style cosine --lr-warmup-iters 2000 --train-iters 100000 "
        "--weight-decay 0.1 --adam-beta1 0.9 --adam-beta2 0.95 --clip-grad 1.0 "
        "--data-path /data/llama3/corpus_text_document --split 99,1,0 --tokenizer-type NullTokenizer "
        "--save /checkpoints/llama3-8b --save-interval 1000")},
}

# Settings beside the answers: the chained lessons keep no run between them here (each starts from
# lesson 03's worked decision, whatever order the suite runs them in or a learner's saved run).
SETTINGS = {stem: {"your_run_file": None} for stem in ("03_data_parallel", "05_sequence_parallel", "06_pipeline_parallel")}


@pytest.mark.parametrize("notebook", NOTEBOOKS, ids=[n.stem for n in NOTEBOOKS])
def test_notebook_runs_and_asserts(notebook, monkeypatch):
    executed = EXECUTED / notebook.name
    # the system's temp folder as the lesson, its kernel and its jobs see it (a short path: sockets live there)
    temp = Path(tempfile.mkdtemp(prefix=f"lesson{notebook.stem[:2]}-"))
    monkeypatch.setenv("TMPDIR", str(temp))
    try:
        out = run_lesson(notebook, executed, {**ANSWERS.get(notebook.stem, {}), **SETTINGS.get(notebook.stem, {})},
                         device="cpu", capture=True)
        # A lesson cleans up after itself: its scratch folders go when its kernel stops (a real model's
        # checkpoints are gigabytes, and a learner runs a lesson many times).
        left = sorted(str(p.relative_to(temp)) for p in temp.rglob("*") if p.is_file())
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    assert out.returncode == 0, f"{notebook.name} failed (executed copy: {executed}):\n{out.stderr[-4000:]}"
    assert not left, f"{notebook.name} left {len(left)} files in the temp folder, e.g. {left[:5]}"
    said = verdicts(nbformat.read(executed, as_version=4))
    answered = ANSWERS.get(notebook.stem, {})
    not_correct = [f"{exercise} (cell {cell} of the executed copy): {verdict}" for cell, exercise, verdict in said if verdict != "correct"]
    assert not not_correct, f"{notebook.name}: the right answers were not accepted (executed copy: {executed}): " \
                            f"{'; '.join(not_correct)}"
    assert len(said) == len(answered), f"{notebook.name}: {len(said)} checks ran for {len(answered)} answers " \
                                       f"({sorted(answered)}); ANSWERS needs one answer per exercise"
    shown = exercise_answers.shown_before_asked(json.loads(executed.read_text())["cells"], answered)
    assert not shown, f"{notebook.name}: the executed copy shows an answer before its exercise: {shown}"


def test_every_notebook_has_a_parameters_cell():
    for nb_path in NOTEBOOKS:
        nb = nbformat.read(nb_path, as_version=4)
        tags = [c.metadata.get("tags", []) for c in nb.cells if c.cell_type == "code"]
        assert any("parameters" in t for t in tags), f"{nb_path.name} has no papermill parameters cell"
