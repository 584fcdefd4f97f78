"""Rendering OpenAI-form chat messages with a model's own chat template (jinja, from its tokenizer).

Messages arrive in the form of contract 2 (``GenerationJob.messages``): roles system, developer,
user, assistant, tool; assistant messages may carry ``tool_calls`` whose ``arguments`` are JSON
text, and ``reasoning_content``; tool messages carry ``tool_call_id``. Chat templates of the Hub
expect arguments as objects and a ``name`` on tool results, and most know no ``developer`` role.
"""

from __future__ import annotations

import json
from typing import List, Optional

# Arguments of apply_chat_template that chat_template_kwargs may not set.
RESERVED_KWARGS = frozenset(
    {
        "conversation",
        "messages",
        "tools",
        "documents",
        "chat_template",
        "add_generation_prompt",
        "continue_final_message",
        "tokenize",
        "padding",
        "truncation",
        "max_length",
        "return_tensors",
        "return_dict",
        "return_assistant_tokens_mask",
        "tokenizer_kwargs",
    }
)


def check_template_kwargs(kwargs) -> dict:
    """``chat_template_kwargs`` as given, or ValueError."""
    if kwargs is None:
        return {}
    if not isinstance(kwargs, dict):
        raise ValueError("chat_template_kwargs: must be an object")
    reserved = sorted(set(kwargs) & RESERVED_KWARGS)
    if reserved:
        raise ValueError(f"chat_template_kwargs: may not set {', '.join(reserved)}")
    return dict(kwargs)


def template_messages(messages: List[dict]) -> List[dict]:
    """Copies of ``messages`` in the form chat templates expect; ValueError if a tool call's
    arguments are not a JSON object."""
    names = {}  # tool call id -> function name, for tool results
    converted = []
    for i, message in enumerate(messages):
        message = dict(message)
        if message.get("role") == "developer":
            message["role"] = "system"
        if message.get("content") is None:
            message["content"] = ""
        calls = message.get("tool_calls")
        if calls:
            message["tool_calls"] = [
                _template_call(call, f"messages[{i}].tool_calls[{j}]", names) for j, call in enumerate(calls)
            ]
        elif "tool_calls" in message:
            del message["tool_calls"]
        if message.get("role") == "tool" and "name" not in message and message.get("tool_call_id") in names:
            message["name"] = names[message["tool_call_id"]]
        converted.append(message)
    return converted


def _template_call(call, where: str, names: dict) -> dict:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        raise ValueError(f'{where}: a tool call is {{"id", "type": "function", "function": {{...}}}}')
    function = dict(call["function"])
    if not isinstance(function.get("name"), str):
        raise ValueError(f"{where}.function.name: must be a string")
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments) if arguments.strip() else {}
        except json.JSONDecodeError:
            raise ValueError(f"{where}.function.arguments: not valid JSON") from None
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, dict):
        raise ValueError(f"{where}.function.arguments: must be a JSON object")
    function["arguments"] = arguments
    call = dict(call, type="function", function=function)
    if call.get("id"):
        names[call["id"]] = function["name"]
    return call


def render_prompt(
    tokenizer,
    messages: List[dict],
    tools: Optional[List[dict]] = None,
    template_kwargs: Optional[dict] = None,
) -> str:
    """The prompt text of ``messages`` (with the generation prompt) by the tokenizer's template.

    ``tokenizer`` is mlx-lm's TokenizerWrapper (or a transformers tokenizer); it raises whatever
    the template raises for input it rejects.
    """
    text = tokenizer.apply_chat_template(
        template_messages(messages),
        tools=tools or None,
        add_generation_prompt=True,
        tokenize=False,
        **(template_kwargs or {}),
    )
    if not isinstance(text, str):
        raise ValueError("the chat template did not render text")
    return text
