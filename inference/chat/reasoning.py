"""Reasoning markers: a model whose vocabulary has ``<think>`` and ``</think>`` writes its
reasoning between them; some templates (Qwen3 thinking, DeepSeek-R1) open ``<think>`` in the
prompt, so the output is reasoning from its first token."""
from __future__ import annotations

from typing import Optional, Tuple

Markers = Tuple[str, str]
_KNOWN: Tuple[Markers, ...] = (("<think>", "</think>"),)


def detect_reasoning(vocab) -> Optional[Markers]:
    for start, end in _KNOWN:
        if start in vocab and end in vocab:
            return start, end
    return None


def prompt_opens_reasoning(prompt: str, markers: Optional[Markers]) -> bool:
    """Whether the rendered prompt leaves a reasoning block open for the output to continue."""
    if markers is None:
        return False
    start, end = markers
    return prompt.rfind(start) > prompt.rfind(end)
