"""The capstone's grading of a learner's command on the real reading and planner: Llama-3-8B on 16
H100 80GB with TP 1 and micro batch 1 fits only with activation recompute, so the command that omits
it fails the recompute part with its hint, and the same command asking for it passes that part; and
a 16-GPU command is shrunk to a few CPU processes with its layout kept (lesson 20 runs it)."""
import dataclasses

import pytest

from helpers.job.layout import Layout
from helpers.launch import from_megatron
from helpers.launch.shrink import shrink
from helpers.memory import GiB, Training, plan_memory
from helpers.views import exercises

GPU_GIB = 80
LLAMA3_8B = ("torchrun --nnodes 2 --nproc-per-node 8 pretrain_gpt.py --num-layers 32 --hidden-size 4096 "
             "--ffn-hidden-size 14336 --num-attention-heads 32 --group-query-attention --num-query-groups 8 "
             "--normalization RMSNorm --swiglu --disable-bias-linear --untie-embeddings-and-output-weights "
             "--position-embedding-type rope --seq-length 4096 --max-position-embeddings 8192 --vocab-size 128256 "
             "--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --global-batch-size 256 "
             "--bf16 --lr 3e-4 --min-lr 3e-5 --lr-decay-style cosine --lr-warmup-iters 2000 --train-iters 100000 "
             "--data-path /data/llama3/corpus_text_document --tokenizer-type NullTokenizer "
             "--save /checkpoints/llama3-8b --save-interval 1000")
NO_RECOMPUTE = LLAMA3_8B + " --tensor-model-parallel-size 1 --micro-batch-size 1"
FULL_RECOMPUTE = NO_RECOMPUTE + " --recompute-granularity full --recompute-method uniform --recompute-num-layers 1"


def plans(command: str) -> tuple[float, float]:
    """The lesson's two plans of a command on 16 GPUs: with its recompute, and without any (GiB per GPU)."""
    spec = from_megatron.read_megatron_args(command).spec(nproc=16, device="cuda")
    layout = Layout.of(spec, gpus_per_node=8, backend="te")
    bare = dataclasses.replace(spec, recompute_granularity=None, recompute_method=None, recompute_num_layers=None,
                               recompute_modules=None)
    return tuple(plan_memory(spec.model_preset(), layout, Training.of(s)).reserved_bytes / GiB for s in (spec, bare))


def grade(command: str) -> bool:
    plan_gib, bare_gib = plans(command)
    return exercises.check_megatron_command(command, refusal=None, plan_gib=plan_gib, gpu_gib=GPU_GIB, rank=1,
                                            ranked=4230, bare_plan_gib=bare_gib, dp=16)


def hint(said: str) -> str:
    return said.split(" is not it. ", 1)[1] if " is not it. " in said else ""


def test_a_command_that_omits_the_recompute_it_needs_fails_with_the_recompute_hint(capsys):
    plan_gib, bare_gib = plans(NO_RECOMPUTE)
    assert plan_gib == bare_gib > GPU_GIB  # every activation kept: over the GPU
    assert grade(NO_RECOMPUTE) is False
    said = capsys.readouterr().out
    assert f"(d) recompute: {bare_gib:.1f} GiB per GPU without it: needed, not asked for" in said, said
    assert "(d) Without activation recompute this layout needs" in hint(said), said
    assert "--recompute-granularity" in hint(said)


def test_the_same_command_with_recompute_passes_the_recompute_part(capsys):
    plan_gib, bare_gib = plans(FULL_RECOMPUTE)
    assert plan_gib < GPU_GIB < bare_gib  # full recompute keeps only each layer's input
    assert grade(FULL_RECOMPUTE) is True  # rank given as 1 here: every other part holds too
    said = capsys.readouterr().out
    assert "(d) recompute: " in said and "needed, asked for" in said and "correct: " in said, said


@pytest.mark.parametrize("tp, pp, processes", [(2, 1, 2), (2, 2, 4), (8, 1, 8)])
def test_a_16_gpu_command_shrinks_to_one_replica_with_its_layout(tp, pp, processes):
    command = (LLAMA3_8B + f" --tensor-model-parallel-size {tp} --sequence-parallel "
               f"--pipeline-model-parallel-size {pp} --micro-batch-size 1")
    full = from_megatron.read_megatron_args(command).spec(nproc=16, device="cuda")
    small, changes = shrink(full, iters=3)
    assert small.nproc == processes and "world_size 16 -> %d" % processes in changes  # lesson 20 runs up to 4
    assert (small.tp, small.pp, small.sp, small.dist_opt) == (tp, pp, True, True)
    assert small.data == "/data/llama3/corpus_text_document"  # the cluster's corpus: the lesson runs synthetic here
