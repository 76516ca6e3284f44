"""The chained decisions of lessons 03, 05 and 06 (helpers/views/exercise_chain.py) grade what a job
built from the learner's flags does: the flags go through Megatron-LM's parser and the kit's rules
here (helpers/launch/from_megatron.py), and only the training is stood in for: losses that follow
the global batch, activations that follow the micro batch and the recompute. The run itself, as a
lesson runs it, is tests/notebooks/test_notebooks.py's."""
import json
import shlex
from types import SimpleNamespace

import pytest

from helpers.launch import from_megatron
from helpers.launch.runner import validate
from helpers.views import exercise_chain, exercises, schedule, your_run

ONE_PROCESS = ["--num-layers", "4", "--hidden-size", "64", "--ffn-hidden-size", "256", "--num-attention-heads", "4",
               "--seq-length", "32", "--max-position-embeddings", "32", "--vocab-size", "512", "--train-iters", "3",
               "--lr", "1e-3", "--micro-batch-size", "2", "--global-batch-size", "16"]
SAVED = {"none": 1_400_000, "selective": 900_000, "full": 240_000}  # bytes per microbatch at micro batch 2


def fake_run(megatron_args, nproc, device, precision, progress, instruments="off"):
    """Stands in for launch.run: the spec Megatron-LM's flags describe; losses that depend only on
    the global batch (as the real ones do, to fp32 rounding); activations that scale with the micro
    batch and drop with recompute."""
    _, spec, _ = from_megatron.job(megatron_args, nproc=nproc, device=device, precision=precision)
    spec = validate(spec)  # the kit's rules, as launch.run applies them before any process starts
    batch = spec.micro_batch * spec.dp * spec.num_microbatches
    saved = SAVED[spec.recompute_granularity or "none"] * spec.micro_batch // 2
    return SimpleNamespace(spec=spec, losses=[6.2, 6.0 - batch / 1000, 5.8 - batch / 1000],
                           ranks={0: {"saved_activation_bytes_per_microbatch": saved}})


@pytest.fixture
def reference():
    _, spec, _ = from_megatron.job(shlex.join(ONE_PROCESS), nproc=1, device="cpu", precision="fp32")
    return SimpleNamespace(spec=spec, losses=[6.2, 6.0 - 16 / 1000, 5.8 - 16 / 1000])


def test_lesson_03_keeps_the_global_batch_shards_and_overlaps(reference, tmp_path, capsys):
    file = tmp_path / "run.json"
    check = dict(base_flags=ONE_PROCESS, reference=reference, nproc=4, rtol=1e-5, run_file=file, run=fake_run)
    assert exercises.check_run_on_more_gpus(None, **check) is False and not file.exists()
    # the batch flags of the one-process job are dropped: micro batch alone gives 2 x DP 4 = 8
    assert exercises.check_run_on_more_gpus("--micro-batch-size 2 --use-distributed-optimizer --overlap-grad-reduce "
                                            "--overlap-param-gather", **check) is False
    assert "a global batch of 8 samples" in capsys.readouterr().out and not file.exists()
    assert exercises.check_run_on_more_gpus("--micro-batch-size 2 --global-batch-size 16 --overlap-grad-reduce",
                                            **check) is False
    said = capsys.readouterr().out
    assert "Adam's two moments" in said and "Both DP collectives" in said
    right = "--use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --micro-batch-size 4"
    assert exercises.check_run_on_more_gpus(right, **check) is True  # 4 x DP 4: the 16 samples, no accumulation
    saved = json.loads(file.read_text())
    assert saved["lesson"] == "03" and your_run.value(saved["flags"], "--global-batch-size") == "16"
    assert "--num-layers" not in saved["flags"]  # the layout and model stay each lesson's own


def test_lesson_05_fits_the_budget_with_no_more_recompute_than_needed(reference, capsys):
    tp2_sp = [*ONE_PROCESS, "--tensor-model-parallel-size", "2", "--sequence-parallel"]
    check = dict(base_flags=tp2_sp, reference=reference, nproc=4, budget=1_000_000, rtol=1e-5, run=fake_run)
    assert exercises.check_recompute_budget("--recompute-granularity selective --recompute-modules core_attn",
                                            **{**check, "budget": 500_000}) is False  # 900 kB: over
    assert "over the budget" in capsys.readouterr().out
    assert exercises.check_recompute_budget("--recompute-granularity selective --recompute-modules mlp", **check) is True
    assert exercises.check_recompute_budget("--micro-batch-size 1", **check) is True  # 700 kB, no recompute
    # at micro batch 1 the run fits without recompute: recomputing only repeats forward work
    assert exercises.check_recompute_budget("--micro-batch-size 1 --recompute-granularity full --recompute-method "
                                            "uniform --recompute-num-layers 1", **check) is False
    assert "already within the budget" in capsys.readouterr().out
    assert exercises.check_recompute_budget("--micro-batch-size 1 --global-batch-size 8", **check) is False
    assert "a different run" in capsys.readouterr().out


def test_lesson_06_reaches_the_bubble_target_with_the_fewest_chunks(reference, capsys):
    pp2 = [*ONE_PROCESS, "--pipeline-model-parallel-size", "2"]
    check = dict(base_flags=pp2, reference=reference, nproc=4, target=0.10, rtol=1e-5, run=fake_run)
    vpp = "--num-virtual-stages-per-pipeline-rank"
    assert exercises.check_bubble_target(f"{vpp} 2", **check) is False  # m = 16 / (2 x 2) = 4: 1/9
    assert "11.1%" in capsys.readouterr().out
    assert exercises.check_bubble_target(f"{vpp} 4", **check) is False  # 2 x 4 chunks of a 4-layer model
    assert "refused" in capsys.readouterr().out
    assert exercises.check_bubble_target(f"--micro-batch-size 1 {vpp} 2", **check) is True  # 1/17
    assert exercises.check_bubble_target("--micro-batch-size 1", **check) is False  # 1/9 without chunks
    for p, v, m in ((2, 2, 8), (4, None, 12), (4, 2, 8), (2, 1, 4)):  # the formula is the drawn schedule's count
        drawn = schedule.ideal_bubble(schedule.ideal(p, m, v or 1))
        assert exercise_chain.bubble_fraction(p, v, m) == pytest.approx(max(drawn.values()), abs=1e-12), (p, v, m)
    assert exercises.check_bubble_target(f"--micro-batch-size 1 --global-batch-size 32 {vpp} 2", **check) is False
    assert "not the run's" in capsys.readouterr().out


def test_the_record_keeps_only_training_flags_and_refuses_a_broken_file(tmp_path):
    words = ["--num-layers", "4", "--micro-batch-size", "2", "--recompute-modules", "core_attn", "mlp",
             "--micro-batch-size", "1", "--use-distributed-optimizer"]
    assert your_run.only(words, your_run.TRAINING_OPTIONS) == \
        ["--micro-batch-size", "1", "--recompute-modules", "core_attn", "mlp", "--use-distributed-optimizer"]
    assert your_run.without(words, ("--recompute-modules",)) == \
        ["--num-layers", "4", "--micro-batch-size", "2", "--micro-batch-size", "1", "--use-distributed-optimizer"]
    assert your_run.value(words, "--recompute-modules") == ["core_attn", "mlp"]
    assert your_run.value(words, "--use-distributed-optimizer") is True and your_run.value(words, "--lr") is None
    assert your_run.load(None)[0] == your_run.STARTING_POINT and your_run.save(None, words, "03") is None
    file = tmp_path / "run.json"
    file.write_text("{not json")
    with pytest.raises(ValueError, match="is not a saved run .* delete it"):
        your_run.load(file)
