"""A torchrun command line read by torch's own parser (`torch.distributed.run.get_args_parser`), as
torchrun reads it on each node: the launcher's options (nodes, processes per node, rendezvous, node
rank) apart from the script and the script's own arguments. A line starts with `torchrun` or
`python -m torch.distributed.run`; anything the parser refuses is an InvalidJob with the parser's
own message."""
from __future__ import annotations

import contextlib
import io
import shlex
from argparse import Namespace

from helpers.errors import InvalidJob

LAUNCHERS = (["torchrun"], ["python", "-m", "torch.distributed.run"], ["python3", "-m", "torch.distributed.run"])


def parse(command: str) -> Namespace:
    """torchrun's namespace for `command` (one node's line; `\\` line breaks may stay)."""
    from torch.distributed.run import get_args_parser

    if not isinstance(command, str) or not command.strip():
        raise InvalidJob(f"a torchrun command is a string such as 'torchrun --nnodes 2 ... pretrain_gpt.py ...', "
                         f"not {command!r}")
    try:
        words = shlex.split(command.replace("\\\n", " "))
    except ValueError as e:
        raise InvalidJob(f"cannot split {command!r} into words ({e}): close the quote") from None
    launcher = next((w for w in LAUNCHERS if words[:len(w)] == w), None)
    if launcher is None:
        raise InvalidJob(f"{command[:60]!r} does not start with torchrun (or python -m torch.distributed.run): "
                         "the launcher comes first, then its options, then the script")
    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            args = get_args_parser().parse_args(words[len(launcher):])
    except SystemExit:
        said = errors.getvalue().strip().splitlines()
        raise InvalidJob(f"torchrun refuses {command[:80]!r}: {said[-1] if said else 'no script given'}") from None
    return args


def node_counts(args: Namespace) -> tuple[int, int]:
    """(nodes, processes per node) of a parsed command; a node range "MIN:MAX" counts MAX nodes."""
    try:
        nnodes = int(str(args.nnodes).split(":")[-1])
        nproc = int(args.nproc_per_node)
    except ValueError:
        raise InvalidJob(f"--nnodes {args.nnodes} --nproc-per-node {args.nproc_per_node}: whole numbers are "
                         "needed here (a node count, or MIN:MAX; a process count per node)") from None
    return nnodes, nproc
