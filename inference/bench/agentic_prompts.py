"""The prompts of the agentic scenario: a coding agent's system prompt with its tool list, each
conversation's own context, and the new text of every turn, sized in the target's tokens.

The system prompt is one shared text for the whole run: a run nonce first (so a run never reuses
the cache of an earlier one), a short instruction, the tool definitions as a JSON list (as many
of ``TOOLS`` as fit in about three quarters of the budget; none when the budget is tiny), then
notes of filler words up to the budget. The tools are text in the system message, not the
request's ``tools`` field: every OpenAI-compatible server accepts that, and every server sees the
same prompt. A conversation's first user message is its own context (a conversation nonce, then
words) and the first turn's new text; every later user message is a turn's new text (a turn
nonce, then words). Nonces make every conversation and turn unique, so the only reuse is the
reuse the load has: the shared system prompt and each conversation's own history.

``PromptBook.calibrate`` measures, with four prompts that start with a calibration nonce (so
they share no prefix with the run's prompts), the tokens of the chat template around an almost
empty conversation, of the instruction, of the whole tool list and per filler word; sizes are
then "about N tokens" of that target's tokenizer (within a few tokens). A system budget smaller
than the template and the instruction keeps the instruction's first words only.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from typing import Callable, List

INSTRUCTION = (
    "You are a coding agent working in a git repository. Use the tools below to read, "
    "search and change files and to run commands; answer with one tool call as a JSON "
    "object, or with a short final answer when the task is done."
)

_FILLER = (
    "read the failing test first then search for the function it calls and check how the "
    "cache keeps every block of tokens so that the next request starts where the last one "
    "ended while the server batches many streams together"
).split()

_CALIBRATION_WORDS = 128
_TOOLS_SHARE = 0.75  # at most this share of the system prompt's budget goes to tool definitions


def _tool(name: str, description: str, properties: dict, required: List[str]) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, "required": required},
        },
    }


def _param(kind: str, description: str) -> dict:
    return {"type": kind, "description": description}


TOOLS = [
    _tool(
        "read_file",
        "Read a text file of the repository, optionally a range of lines.",
        {
            "path": _param("string", "Path relative to the repository root."),
            "start_line": _param("integer", "First line to return (1-based)."),
            "end_line": _param("integer", "Last line to return (inclusive)."),
        },
        ["path"],
    ),
    _tool(
        "write_file",
        "Create a file or replace its whole content.",
        {
            "path": _param("string", "Path relative to the repository root."),
            "content": _param("string", "The new content of the file."),
        },
        ["path", "content"],
    ),
    _tool(
        "edit_file",
        "Replace one exact occurrence of a string in a file.",
        {
            "path": _param("string", "Path relative to the repository root."),
            "old": _param("string", "The text to replace; must occur exactly once."),
            "new": _param("string", "The replacement text."),
        },
        ["path", "old", "new"],
    ),
    _tool(
        "list_directory",
        "List the files and folders under a directory.",
        {
            "path": _param("string", "Directory relative to the repository root."),
            "depth": _param("integer", "How many levels to descend (default 1)."),
        },
        ["path"],
    ),
    _tool(
        "search_code",
        "Search the repository for a regular expression; returns matching lines.",
        {
            "pattern": _param("string", "A regular expression."),
            "glob": _param("string", "Only files matching this glob, e.g. '*.py'."),
            "max_results": _param("integer", "Stop after this many matches."),
        },
        ["pattern"],
    ),
    _tool(
        "run_command",
        "Run a shell command in the repository and return its output and exit code.",
        {
            "command": _param("string", "The command line."),
            "timeout_s": _param("integer", "Kill the command after this many seconds."),
        },
        ["command"],
    ),
    _tool(
        "run_tests",
        "Run the test suite or a part of it.",
        {
            "selector": _param("string", "A test file, a test name or a -k expression."),
            "verbose": _param("boolean", "Print every test's name."),
        },
        [],
    ),
    _tool(
        "git_diff",
        "Show the uncommitted changes, or the changes of a commit.",
        {
            "commit": _param("string", "A commit; omit for the working tree."),
            "path": _param("string", "Only changes under this path."),
        },
        [],
    ),
]


def _words(count: int, start: int = 0) -> str:
    return " ".join(_FILLER[(start + i) % len(_FILLER)] for i in range(max(0, count)))


@dataclass
class PromptSizes:
    """What calibration measured (tokens of the target's tokenizer) and what the run's prompts
    hold; kept with the results."""

    template_tokens: int  # the prompt of a system and a user message that are one nonce each
    instruction_tokens: int  # of the whole instruction
    tokens_per_word: float
    instruction_words: int = 0  # the instruction's words kept (all unless the budget is tiny)
    tools: int = 0  # tool definitions in the system prompt
    tools_tokens: int = 0  # their estimated tokens
    system_words: int = 0  # filler words after the tools
    context_words: int = 0
    new_words: int = 0


class PromptBook:
    """The texts of one run (see the module docstring). ``count(messages)`` is the target's
    ``count_chat_tokens``."""

    def __init__(self, sizes: PromptSizes, run_nonce: str):
        self.sizes = sizes
        self.nonce = run_nonce
        tools_json = json.dumps(TOOLS[: sizes.tools]) if sizes.tools else ""
        parts = [f"[session {run_nonce}] {' '.join(INSTRUCTION.split()[: sizes.instruction_words])}".strip()]
        if tools_json:
            parts.append("# Tools\n" + tools_json)
        if sizes.system_words:
            parts.append("# Notes\n" + _words(sizes.system_words))
        self.system = "\n\n".join(parts)

    @classmethod
    def calibrate(
        cls, count: Callable[[List[dict]], int], system_tokens: int, context_tokens: int, new_tokens: int
    ) -> "PromptBook":
        nonce = secrets.token_hex(4)

        def measure(system: str, user: str = "") -> int:
            return count(
                [
                    {"role": "system", "content": f"[calibration {nonce}] {system}".strip()},
                    {"role": "user", "content": f"{secrets.token_hex(4)} {user}".strip()},
                ]
            )

        empty = measure("")
        instruction = measure(INSTRUCTION) - empty
        all_tools = json.dumps(TOOLS)
        tools_all = measure(INSTRUCTION + "\n\n# Tools\n" + all_tools) - empty - instruction
        per_word = max(0.1, (measure("", _words(_CALIBRATION_WORDS)) - empty) / _CALIBRATION_WORDS)
        sizes = PromptSizes(template_tokens=empty, instruction_tokens=instruction, tokens_per_word=per_word)
        # the shared prefix: template + instruction + tools + notes = about system_tokens; a
        # budget too small for the whole instruction keeps its first words
        words = len(INSTRUCTION.split())
        sizes.instruction_words = min(
            words, max(0, int(words * (system_tokens - empty) / max(1, instruction)))
        )
        budget = system_tokens - empty - round(instruction * sizes.instruction_words / words)
        per_char = max(0.0, tools_all) / len(all_tools)
        for n in range(len(TOOLS), 0, -1):
            estimate = round(per_char * (len(json.dumps(TOOLS[:n])) + len("\n\n# Tools\n")))
            if estimate <= _TOOLS_SHARE * budget:
                sizes.tools, sizes.tools_tokens = n, estimate
                break
        sizes.system_words = max(0, round((budget - sizes.tools_tokens) / per_word))
        sizes.context_words = max(1, round(context_tokens / per_word))
        sizes.new_words = max(1, round(new_tokens / per_word))
        return cls(sizes, secrets.token_hex(4))

    def system_message(self) -> dict:
        return {"role": "system", "content": self.system}

    def user_message(self, conversation: int, turn: int) -> dict:
        """Turn ``turn`` (0-based) of ``conversation``: the first carries the conversation's
        context before the turn's new text."""
        new = f"[turn {secrets.token_hex(4)}] {_words(self.sizes.new_words, start=turn * 7 + conversation)}"
        if turn > 0:
            return {"role": "user", "content": new}
        context = (
            f"[conversation {secrets.token_hex(4)}] {_words(self.sizes.context_words, start=conversation)}"
        )
        return {"role": "user", "content": f"{context}\n\n{new}"}
