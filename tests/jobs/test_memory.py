"""The memory planner (helpers/memory/) against live CPU jobs: its static terms equal what every
rank of 9 layouts of the tiny models holds, byte for byte (ranks.json). The checks without
processes (the committed GPU measurements within 10%, public presets, Megatron's estimator):
tests/unit/test_memory_plan.py. Imported HF models (tied embeddings: one tensor at PP=1, Megatron's
own copy of it on the last stage at PP=2; q/k norms, biases, experts): tests/jobs/test_hf_import.py
checks the same static terms on every rank of each family's one-process run and of its layout
(Gemma 3, tied, at PP=1 and PP=2)."""
from concurrent.futures import ThreadPoolExecutor

from helpers.memory.vs_measured import static_mismatches

# 9 layouts of the tiny models: every axis, dense and expert parameters, with and without the
# distributed optimizer (whose shards depend on padding and on each rank's DP/EDP position); each
# covers the simpler ones it contains (pp2-vpp2-dp2-distopt covers pp2, vpp and the optimizer sharded
# over DP=2 on each stage, tp2-sp-distopt covers tp2 and one rank's distributed optimizer, pp3-uneven
# covers uneven first/last stages, the MoE pp2-vpp2-ep2-distopt covers MoE pipeline stages with the
# distributed optimizer, ...).
LAYOUTS = {
    "gpt-tp2-sp-distopt": dict(model="tiny-gpt", tp=2, sp=True, dist_opt=True),
    "gpt-pp3-uneven": dict(model="tiny-gpt", pp=3, first_stage_layers=1, last_stage_layers=1),
    "gpt-pp2-vpp2-dp2-distopt": dict(model="tiny-gpt", pp=2, vpp=2, nproc=4, global_batch=4, dist_opt=True),
    # (MoE EP=2 with the distributed optimizer alone: lesson 02 holds its ranks to the plan)
    "moe-dp2-distopt": dict(model="tiny-moe", nproc=2, dist_opt=True),
    "moe-tp2-sp": dict(model="tiny-moe", tp=2, sp=True),
    "moe-tp2-sp-etp1-ep2": dict(model="tiny-moe", tp=2, sp=True, etp=1, ep=2),
    "moe-pp2-vpp2-ep2-distopt": dict(model="tiny-moe", pp=2, vpp=2, ep=2, nproc=4, global_batch=4,
                                     dist_opt=True),
    # overlap_grad_reduce cuts the first stage's first chunk into buckets, each padded and sharded
    # on its own: dense and expert buffers (MoE at DP=2), a bucketed and an unbucketed stage (PP=2)
    "moe-dp2-distopt-buckets": dict(model="tiny-moe", nproc=2, dist_opt=True, overlap_grad_reduce="on",
                                    ddp_bucket_size=5_000),
    "gpt-pp2-dp2-distopt-buckets": dict(model="tiny-gpt", pp=2, nproc=4, dist_opt=True, overlap_grad_reduce="on",
                                        ddp_bucket_size=5_000),
}


def test_static_terms_equal_live_jobs(runs):
    """For every layout and rank: parameter count and parameter, gradient-buffer, Adam-state and
    main-parameter bytes as planned == as recorded by the live job (ranks.json)."""
    from helpers import launch

    def one(item):
        name, fields = item
        run = launch.run(**runs, iters=1, seq_len=32, micro_batch=1, seed_checkpoint=False, name=name, **fields)
        return name, run.spec, run.ranks

    with ThreadPoolExecutor(max_workers=2) as pool:  # 1-2 process jobs side by side on 2 cores
        results = list(pool.map(one, LAYOUTS.items()))
    problems, checked = [], 0
    for name, spec, ranks in results:
        assert len(ranks) == spec.world_size, name
        problems += [f"{name}: {p}" for p in static_mismatches(spec, ranks)]
        checked += len(ranks)
    assert not problems, "\n".join(problems)
    assert checked == 25  # ranks compared (the 9 layouts' world sizes), each on every static key
