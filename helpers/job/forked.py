"""One call in a forked child: what the kit uses to run Megatron-LM's and Megatron-Bridge's own checks
(argument parsing and validation, a recipe's config()) that change module-level state (global
arguments, environment, warnings already given, imported recipe modules), so that nothing one check
sets reaches the next or the caller. The parent imports the heavy modules once; every child
inherits them, so a check costs a fork, not an interpreter start.

    result = forked.call(function, *args)   # function's return value, pickled back
    # or {"error": "ExceptionName: message"} when it raised (its own message is the answer),
    # or {"error": "... died without an answer"} when the child died

A fork and a pipe rather than concurrent.futures.ProcessPoolExecutor: a fresh child per call needs
its max_tasks_per_child=1, which it refuses with the fork start method, and the fork is what lets
the child inherit the imported modules."""
from __future__ import annotations

import os
import pickle


def call(function, *args):
    """`function(*args)` in a forked child; its return value (picklable), or {"error": ...}."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer, then leave without running the parent's exit handlers
        os.close(read)
        try:
            result = function(*args)
        except BaseException as e:  # the checked code's own assertion or error is the answer
            result = {"error": f"{type(e).__name__}: {e}"}
        try:
            data = pickle.dumps(result)
        except Exception as e:  # an answer that does not pickle: say so rather than leave the parent waiting
            data = pickle.dumps({"error": f"the answer does not pickle: {e}"})
        with os.fdopen(write, "wb") as f:
            f.write(data)
        os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    return pickle.loads(data) if data else {"error": "the checking process died without an answer"}
