"""Which tool-call format a model writes: the rule, stated once.

1. The model's ``tool_parser`` setting, when set, wins (a name of ``FORMATS``, or "none").
2. Else the first of these markers found in its chat template text:
   ``<|channel|>`` with ``<|message|>`` harmony; ``<|tool_calls_section_begin|>`` kimi_k2;
   ``<｜tool▁calls▁begin｜>`` deepseek_v3; ``<arg_key>`` glm45; ``<function=`` qwen3_xml;
   ``[TOOL_CALLS]`` mistral; ``<|tool_call>`` gemma4; ``<tool_call>`` hermes; ``tool_code``
   gemma3; ``<|python_tag|>`` (or Llama 3 headers with an ``ipython`` role) llama3_json.
3. Else its config.json ``model_type`` (``MODEL_TYPES``).
4. Else its vocabulary: ``[TOOL_CALLS]`` mistral; ``<tool_call>`` and ``</tool_call>`` hermes.
5. Else none: tool calls are not parsed (the output is text).

Step 1 is applied by the caller (``inference.chat.capabilities``); this module does 2 to 4.
"""

from __future__ import annotations

from typing import Optional

from .base import ToolFormat
from .registry import FORMATS

TEMPLATE_MARKERS = (  # (markers that must all be in the template, format), first match wins
    (("<|channel|>", "<|message|>"), "harmony"),
    (("<|tool_calls_section_begin|>",), "kimi_k2"),
    (("<｜tool▁calls▁begin｜>",), "deepseek_v3"),
    (("<arg_key>",), "glm45"),
    (("<function=",), "qwen3_xml"),
    (("[TOOL_CALLS]",), "mistral"),
    (("<|tool_call>",), "gemma4"),
    (("<tool_call>",), "hermes"),
    (("tool_code",), "gemma3"),
    (("<|python_tag|>",), "llama3_json"),
    (("<|start_header_id|>", "ipython"), "llama3_json"),
)
MODEL_TYPES = {
    "gpt_oss": "harmony",
    "kimi_k2": "kimi_k2",
    "deepseek_v3": "deepseek_v3",
    "deepseek_v32": "deepseek_v3",
    "glm4_moe": "glm45",
    "qwen3_coder": "qwen3_xml",
    "qwen3_5": "qwen3_xml",
    "qwen3_5_moe": "qwen3_xml",
    "gemma3": "gemma3",
    "gemma3_text": "gemma3",
    "gemma4": "gemma4",
    "gemma4_text": "gemma4",
}


def detect_tool_format(
    chat_template: Optional[str], vocab, model_type: Optional[str] = None
) -> Optional[ToolFormat]:
    """The tool-call format a model writes, by steps 2 to 4 of the rule, or None."""
    template = chat_template if isinstance(chat_template, str) else ""
    for markers, name in TEMPLATE_MARKERS:
        if all(m in template for m in markers):
            return FORMATS[name]
    if model_type in MODEL_TYPES:
        return FORMATS[MODEL_TYPES[model_type]]
    if "[TOOL_CALLS]" in vocab:
        return FORMATS["mistral"]
    if "<tool_call>" in vocab and "</tool_call>" in vocab:
        return FORMATS["hermes"]
    return None
