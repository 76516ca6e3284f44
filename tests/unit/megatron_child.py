"""The child interpreter behind the `megatron_cpu` fixture (tests/unit/conftest.py).

Sets Megatron-Core up once, as the kit's CPU worker does (helpers/runtime/setup.py): imported
without torch.compile, the CPU compatibility layer active, a gloo world of this one process with
`parallel_state.initialize_model_parallel()`. Then it reads scripts from stdin, one JSON string per
line, runs each in a namespace of its own and answers each with one JSON line on stdout:
{"stdout": what the script printed, "error": its traceback or null}.

Each script starts as the same script alone in a fresh interpreter would after those steps and
`model_parallel_cuda_manual_seed(0)`: the model-parallel groups initialised (again, if a script
destroyed them), the RNG tracker seeded with 0 and, through the compatibility layer's CUDA-seed
redirection, the CPU generator too."""
import contextlib
import io
import json
import sys
import traceback


def main() -> None:
    answers = sys.stdout
    with contextlib.redirect_stdout(sys.stderr):  # what the imports print stays off the answer channel
        import torch.distributed as dist

        from helpers.runtime.compat import cpu as cpu_compat

        cpu_compat.import_megatron_eagerly()
        cpu_compat.activate()
        from megatron.core import parallel_state as ps
        from megatron.core.tensor_parallel import model_parallel_cuda_manual_seed

        # one process: an in-memory store is the whole rendezvous (no port to collide on)
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    for line in sys.stdin:
        printed = io.StringIO()
        try:
            with contextlib.redirect_stdout(printed):
                if not ps.model_parallel_is_initialized():
                    ps.initialize_model_parallel()
                model_parallel_cuda_manual_seed(0)
                exec(compile(json.loads(line), "<script>", "exec"), {"__name__": "__script__"})
            error = None
        except BaseException:  # the script's failure is the test's to report; the child serves on
            error = traceback.format_exc()
        answers.write(json.dumps({"stdout": printed.getvalue(), "error": error}) + "\n")
        answers.flush()


if __name__ == "__main__":
    main()
