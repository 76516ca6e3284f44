"""How long from `launch.run` to the first finished iteration of a 2-process CPU job?
(torchrun start, `import megatron.core` in each rank, process groups, model, DDP, optimizer,
seed-checkpoint load, first forward/backward/step). Prints one line per trial and the median.

    python -m benchmarks.speed.startup [--trials 3]
"""
import argparse
import statistics
import tempfile
import time

from helpers import launch


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--tp", type=int, default=2)
    args = ap.parse_args()
    job = dict(tp=args.tp, iters=1, device="cpu", progress=False)
    with tempfile.TemporaryDirectory() as out:
        launch.run(out=out, **job)  # warm the seed-checkpoint cache (built once per model and seed)
        times = []
        for i in range(args.trials):
            t0 = time.time()
            run = launch.run(out=out, **job)
            first = run.metrics[0]["time"] - t0
            times.append(first)
            print(f"trial {i + 1}: first iteration done {first:.2f} s after launch "
                  f"(job total {time.time() - t0:.2f} s)")
    print(f"median: {statistics.median(times):.2f} s to the first iteration ({args.tp} processes, CPU)")


if __name__ == "__main__":
    main()
