"""Live process groups without training: torchrun starts the layout's ranks, Megatron-Core's
`initialize_model_parallel` builds the groups, every rank reports them to groups.json, and the job
stops before any model exists (JobSpec.groups_only).

Why not `helpers.launch.run`: the runner refuses layouts the local backend cannot *train*, but
their process groups are still Megatron's to build and worth checking. Only the `backend`
category of violations is waived here; every other constraint of `Layout.validate` still applies.
It is also the cheap way to check a layout's groups: no model, no data, no seed checkpoint."""
from __future__ import annotations

from helpers.errors import InvalidLayout
from helpers.job import models, paths, rules
from helpers.job.layout import Layout
from helpers.launch import environment, runner
from helpers.rundir.reader import RunDir


def live_groups(layout: Layout, model: str = "tiny-gpt", out: str | None = None, timeout_s: float = 300) -> RunDir:
    """Start `layout` on CPU just long enough to record its process groups; return the RunDir
    (its `.groups` is {rank: {axis: ranks}})."""
    problems = [v for v in layout.validate(models.preset(model)) if v.category != "backend"]
    if problems:
        raise InvalidLayout(problems)
    spec = layout.job_spec(model, iters=0, device="cpu", groups_only=True, seed_checkpoint=False,
                           timeout_s=timeout_s, name=f"groups-{model}", out=out or str(paths.runs_dir()))
    resolved = rules.resolve(spec, environment.probe(spec.device))
    run_dir = runner.new_run_dir(resolved.spec, resolved.model)  # the runner's own steps: same env, logs, teardown
    runner.write_run_files(run_dir, resolved)
    return runner.execute(run_dir, resolved.spec)


def mismatches(layout: Layout, live: dict[int, dict]) -> list[str]:
    """Where a live job's groups (RunDir.groups) differ from Layout.rank_groups(); [] = identical.
    An axis the rank does not take part in (embedding on a middle pipeline stage) is absent on
    both sides."""
    out = []
    if sorted(live) != list(range(layout.world_size)):
        out.append(f"live ranks {sorted(live)} != 0..{layout.world_size - 1}")
    for rank, axes in sorted(live.items()):
        predicted = layout.groups_of(rank)
        for axis in sorted(set(predicted) | set(axes)):
            if predicted.get(axis) != axes.get(axis):
                out.append(f"rank {rank} {axis}: predicted {predicted.get(axis)}, live {axes.get(axis)}")
    return out
