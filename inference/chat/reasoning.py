"""Reasoning markers: a model whose vocabulary or chat template has ``<think>`` and ``</think>``
writes its reasoning between them (Qwen3, DeepSeek, GLM, Kimi); Gemma 4 writes it in
``<|channel>thought\\n...<channel|>``. A tool-call format may name its family's markers for a
model whose files show none. Some templates (Qwen3 thinking, DeepSeek V3.1) open the block in
the prompt, so the output is reasoning from its first token. (gpt-oss's Harmony channels are
read by ``inference.chat.harmony_output`` instead.)"""

from __future__ import annotations

from typing import Optional, Tuple

Markers = Tuple[str, str]
_KNOWN: Tuple[Tuple[Markers, Markers], ...] = (  # (what shows the markers in the files, markers)
    (("<think>", "</think>"), ("<think>", "</think>")),
    (("<|channel>", "<channel|>"), ("<|channel>thought\n", "<channel|>")),
)
REASONING_TOKENS = tuple(t for shown, _ in _KNOWN for t in shown)


def detect_reasoning(
    vocab, template: Optional[str] = None, fallback: Optional[Markers] = None
) -> Optional[Markers]:
    template = template if isinstance(template, str) else ""
    for (start, end), markers in _KNOWN:
        if (start in vocab and end in vocab) or (start in template and end in template):
            return markers
    return fallback


def prompt_opens_reasoning(prompt: str, markers: Optional[Markers]) -> bool:
    """Whether the rendered prompt leaves a reasoning block open for the output to continue."""
    if markers is None:
        return False
    start, end = markers
    return prompt.rfind(start) > prompt.rfind(end)
