import contextlib
import json
import os
import select
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

CHILD = Path(__file__).with_name("megatron_child.py")


class MegatronChild:
    """One interpreter running scripts against Megatron-Core on CPU (tests/unit/megatron_child.py)."""

    def __init__(self):
        self.log = tempfile.TemporaryFile("w+")  # the child's stderr: read back only when a script fails
        env = {"PYTHONWARNINGS": "ignore", "CUDA_VISIBLE_DEVICES": "", "PATH": "", "HF_HUB_OFFLINE": "1",
               "PYTHONPATH": os.pathsep.join(sys.path)}
        self.proc = subprocess.Popen([sys.executable, str(CHILD)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True, env=env)

    def run(self, script: str, timeout: float = 300) -> str:
        """What `script` printed; a traceback in the script, a dead child or no answer within
        `timeout` seconds fails the calling test."""
        try:
            self.proc.stdin.write(json.dumps(script) + "\n")
            self.proc.stdin.flush()
            ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
            line = self.proc.stdout.readline() if ready else ""
        except BrokenPipeError:
            line = ""
        if not line:
            log = self._log_tail()
            self.proc.kill()  # hung or dead: a later call starts a new child
            self.close()
            raise AssertionError(f"the Megatron child gave no answer within {timeout} s:\n{log}")
        answer = json.loads(line)
        assert answer["error"] is None, answer["error"][-3000:]
        return answer["stdout"]

    def _log_tail(self) -> str:
        self.log.seek(0)
        return self.log.read()[-3000:]

    def close(self):
        if self.proc.poll() is None:
            with contextlib.suppress(BrokenPipeError):
                self.proc.stdin.close()  # the child's loop ends at end of input
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


@pytest.fixture(scope="session")
def megatron_cpu():
    """`megatron_cpu(script)` -> what the script printed. Every script of the session runs in one
    child interpreter set up as the kit's CPU worker sets itself up: Megatron-Core imported without
    torch.compile, the CPU compatibility layer active, a gloo world of one process with
    `parallel_state.initialize_model_parallel()`; before each script, `model_parallel_cuda_manual_seed(0)`
    (megatron_child.py).

    A child, because the compatibility layer patches torch for the whole process and for good (the
    tests after these, in the same pytest process, must see torch as it is); one child, because
    each interpreter costs about 5 s to start and import Megatron-Core, more than most scripts run."""
    child = None

    def run(script, timeout=300):
        nonlocal child
        if child is None or child.proc.poll() is not None:
            child = MegatronChild()
        return child.run(script, timeout)

    yield run
    if child is not None:
        child.close()
