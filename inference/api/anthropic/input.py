"""An Anthropic Messages request in the terms of a GenerationJob (contract 2): OpenAI-form chat
messages, OpenAI-form tools and tool_choice, chat template kwargs and SamplingParams fields.

What is tolerated and what is refused:
- unknown content block types, server tools and other non-custom tools, ``cache_control`` and any
  unknown field are skipped;
- ``redacted_thinking`` blocks are dropped (their text is not readable);
- ``image`` blocks in user messages become image parts (base64 sources, and url sources: files in
  --image-dir, http(s) when allow_remote_images is on; inference.vision.parts); a model that does
  not read images answers 400. Images in system prompts and tool results, and PDF documents, are
  refused with a 400; documents with a plain-text source are read as text.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Union


from inference.api.common import caps
from inference.api.common.errors import ApiError
from inference.api.common.sampling import SPECULATIVE_NAMES, checked_params, speculative_fields

ROLES = ("user", "assistant", "system")


def _bad(message: str, param: str = "messages") -> ApiError:
    return ApiError(400, message, param=param)


def _block_type(block: Any, where: str) -> str:
    if not isinstance(block, dict) or not isinstance(block.get("type"), str):
        raise _bad(f"{where}: every content block must be an object with a string 'type'")
    return block["type"]


def _text_of(block: dict, where: str) -> str:
    text = block.get("text")
    if not isinstance(text, str):
        raise _bad(f"{where}: a text block needs a string 'text'")
    return text


def _document_text(block: dict, where: str) -> str:
    source = block.get("source")
    if isinstance(source, dict) and source.get("type") == "text" and isinstance(source.get("data"), str):
        return source["data"]
    if isinstance(source, dict) and source.get("type") == "content":
        return _texts(source.get("content"), f"{where}.source")
    raise _bad(f"{where}: only documents with a plain-text source are supported (the models read text only)")


def _texts(content: Any, where: str) -> str:
    """The text of a string or a list of text-like blocks (text, text documents); unknown kinds skipped."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if not isinstance(content, list):
        raise _bad(f"{where}: content must be a string or a list of content blocks")
    parts = []
    for i, block in enumerate(content):
        kind = _block_type(block, f"{where}[{i}]")
        if kind in ("text", "document", "image"):
            parts.append(_block_text(block, kind, f"{where}[{i}]"))
    return "\n".join(parts)


def _block_text(block: dict, kind: str, where: str) -> str:
    if kind == "text":
        return _text_of(block, where)
    if kind == "document":
        return _document_text(block, where)
    raise _bad(f"{where}: image blocks are read in user messages only")


def system_text(system: Union[str, List[dict], None]) -> Optional[str]:
    if system is None:
        return None
    return _texts(system, "system")


def chat_messages(system: Union[str, List[dict], None], messages: list) -> List[dict]:
    """OpenAI-form chat messages. The ``system`` field and any system messages that open
    ``messages`` become one leading system message; later system messages stay where they are."""
    text = system_text(system)
    head = [text] if text else []
    out: List[dict] = []
    for i, message in enumerate(messages):
        role, content, where = message.role, message.content, f"messages[{i}]"
        if role not in ROLES:
            raise _bad(f"{where}.role: must be one of {', '.join(ROLES)}, got {role!r}")
        if role == "system":
            text = _texts(content, f"{where}.content")
            if out:
                out.append({"role": "system", "content": text})
            elif text:
                head.append(text)
        elif role == "assistant":
            out.append(_assistant(content, f"{where}.content"))
        else:
            out.extend(_user(content, f"{where}.content"))
    if head:
        out.insert(0, {"role": "system", "content": "\n".join(head)})
    return out


def _assistant(content, where: str) -> dict:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    texts, thoughts, calls = [], [], []
    for j, block in enumerate(content):
        kind = _block_type(block, f"{where}[{j}]")
        if kind == "text":
            texts.append(_text_of(block, f"{where}[{j}]"))
        elif kind == "thinking":
            if isinstance(block.get("thinking"), str):
                thoughts.append(block["thinking"])
        elif kind == "tool_use":
            calls.append(_tool_call(block, f"{where}[{j}]"))
        elif kind in ("tool_result", "image", "document"):
            raise _bad(f"{where}[{j}]: {kind} blocks belong in user messages")
        # redacted_thinking, server_tool_use, web_search_tool_result, unknown kinds: skipped
    message: Dict[str, Any] = {"role": "assistant", "content": "".join(texts)}
    if thoughts:
        message["reasoning_content"] = "\n".join(thoughts)
    if calls:
        message["tool_calls"] = calls
    return message


def _tool_call(block: dict, where: str) -> dict:
    if not isinstance(block.get("id"), str) or not isinstance(block.get("name"), str):
        raise _bad(f"{where}: a tool_use block needs a string 'id' and 'name'")
    arguments = block.get("input", {})
    if not isinstance(arguments, dict):
        raise _bad(f"{where}.input: must be an object")
    return {
        "id": block["id"],
        "type": "function",
        "function": {"name": block["name"], "arguments": json.dumps(arguments, ensure_ascii=False)},
    }


def _user(content, where: str) -> List[dict]:
    """Tool results first (as tool messages, in order), then the user's text, if any."""
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    results, texts, has_text, pictures = [], [], False, []
    for j, block in enumerate(content):
        kind = _block_type(block, f"{where}[{j}]")
        if kind == "tool_result":
            results.append(_tool_result(block, f"{where}[{j}]"))
        elif kind == "image":
            pictures.append((len(texts), _image(block, f"{where}[{j}]")))
            has_text = True
        elif kind in ("text", "document"):
            texts.append(_block_text(block, kind, f"{where}[{j}]"))
            has_text = True
        elif kind == "tool_use":
            raise _bad(f"{where}[{j}]: tool_use blocks belong in assistant messages")
    if pictures:  # a list of text and image parts, in the blocks' order (inference.vision.parts)
        parts, done = [], 0
        for at, picture in pictures:
            if at > done:
                parts.append({"type": "text", "text": "\n".join(texts[done:at])})
                done = at
            parts.append(picture)
        if done < len(texts):
            parts.append({"type": "text", "text": "\n".join(texts[done:])})
        results.append({"role": "user", "content": parts})
    elif has_text or not results:
        results.append({"role": "user", "content": "\n".join(texts)})
    return results


def _image(block: dict, where: str) -> dict:
    """An image block as an image part: a base64 source (or a url source) becomes its URL."""
    from inference.vision import images, parts

    source = block.get("source")
    if not isinstance(source, dict):
        raise _bad(f"{where}.source: an image block needs a source object")
    try:
        if source.get("type") == "base64":
            if not isinstance(source.get("data"), str) or not isinstance(source.get("media_type"), str):
                raise ValueError(f"{where}.source: a base64 source needs string 'media_type' and 'data'")
            return parts.image_part(images.data_url(source["media_type"], source["data"]), f"{where}.source")
        if source.get("type") == "url":
            return parts.image_part(source.get("url"), f"{where}.source.url")
    except ValueError as exc:
        raise _bad(str(exc)) from None
    raise _bad(f"{where}.source.type: an image source is 'base64' or 'url'")


def _tool_result(block: dict, where: str) -> dict:
    if not isinstance(block.get("tool_use_id"), str):
        raise _bad(f"{where}: a tool_result block needs a string 'tool_use_id'")
    text = _texts(block.get("content"), f"{where}.content")
    if block.get("is_error") is True:
        text = f"Error: {text}"
    return {"role": "tool", "tool_call_id": block["tool_use_id"], "content": text}


def openai_tools(tools: Optional[List[dict]]) -> Optional[List[dict]]:
    """Custom tools ({name, description, input_schema}) in OpenAI form; server tools and other
    typed tools (web_search_..., bash_..., mcp_toolset...) are skipped. None when none is left."""
    out = []
    for i, tool in enumerate(tools or ()):
        if tool.get("type") not in (None, "custom"):
            continue
        if not isinstance(tool.get("name"), str) or not tool["name"]:
            raise _bad(f"tools[{i}].name: must be a non-empty string", "tools")
        schema = tool.get("input_schema", {"type": "object", "properties": {}})
        if not isinstance(schema, dict):
            raise _bad(f"tools[{i}].input_schema: must be a JSON Schema object", "tools")
        function = {"name": tool["name"], "parameters": schema}
        if isinstance(tool.get("description"), str):
            function["description"] = tool["description"]
        out.append({"type": "function", "function": function})
    return out or None


def openai_tool_choice(choice: Optional[dict], tools: Optional[List[dict]]) -> Union[str, dict, None]:
    """auto -> "auto", any -> "required", tool -> named, none -> "none"; None when not given."""
    if choice is None:
        return None
    kind = choice.get("type")
    names = [t["function"]["name"] for t in tools or ()]
    if kind == "auto":
        return "auto"
    if kind == "none":
        return "none"
    if kind not in ("any", "tool"):
        raise _bad(f"tool_choice.type: must be auto, any, tool or none, got {kind!r}", "tool_choice")
    if not names:
        raise _bad(f"tool_choice {kind!r} needs at least one custom tool in 'tools'", "tool_choice")
    if kind == "any":
        return "required"
    name = choice.get("name")
    if name not in names:
        raise _bad(f"tool_choice.name: {name!r} is not one of the tools ({', '.join(names)})", "tool_choice")
    return {"type": "function", "function": {"name": name}}


def template_kwargs(thinking: Optional[dict]) -> dict:
    """thinking {type: enabled|adaptive} -> enable_thinking true, {type: disabled} -> false; absent:
    the template's default. budget_tokens is accepted but not enforced."""
    if thinking is None:
        return {}
    budget = thinking.get("budget_tokens")
    if budget is not None and (not isinstance(budget, int) or isinstance(budget, bool)):
        raise _bad("thinking.budget_tokens: must be an integer", "thinking")
    kind = thinking.get("type")
    if kind in ("enabled", "adaptive"):
        return {"enable_thinking": True}
    if kind == "disabled":
        return {"enable_thinking": False}
    raise _bad(f"thinking.type: must be enabled or disabled, got {kind!r}", "thinking")


_FIELD_NAMES = {"stop": "stop_sequences", "structured": "output_config", **SPECULATIVE_NAMES}


def output_format(body) -> Optional[dict]:
    """output_config.format (or the beta top-level output_format) as SamplingParams.structured."""
    config = body.output_config or {}
    fmt = config.get("format") if isinstance(config, dict) else None
    fmt = fmt if fmt is not None else body.output_format
    if fmt is None:
        return None
    if (
        not isinstance(fmt, dict)
        or fmt.get("type") != "json_schema"
        or not isinstance(fmt.get("schema"), dict)
    ):
        raise _bad('output_config.format: must be {"type": "json_schema", "schema": {...}}', "output_config")
    return {"type": "json_schema", "schema": fmt["schema"]}


def sampling_values(body) -> dict:
    """SamplingParams fields of a messages request, checked now so that bad values are a 400.
    Stop sequences are kept in the output by the engine, so the view can tell which matched
    (it removes it again)."""
    stop = body.stop_sequences or None
    return checked_params(
        {
            "max_tokens": body.max_tokens,
            "temperature": body.temperature,
            "top_p": body.top_p,
            "top_k": body.top_k,
            "stop": stop,
            "include_stop_str_in_output": stop is not None,
            "ignore_eos": body.ignore_eos,
            "structured": output_format(body),
            "priority": body.priority,
            **speculative_fields(body.speculative),
        },
        names=_FIELD_NAMES,
        max_stop=caps.MAX_STOP_SEQUENCES,
    )
