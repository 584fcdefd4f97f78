"""The request side of the Responses API: ``input`` items, ``tools``, ``tool_choice`` and
``text.format`` translated into what a ``GenerationJob`` takes (OpenAI chat messages, chat-form
tools, a ``structured`` sampling constraint). Bad input raises ``ApiError(400)`` naming the field."""

from __future__ import annotations

import uuid
from typing import Any, Dict, List, Optional, Tuple, Union

from inference.api.common.errors import ApiError

_ROLES = {"user", "assistant", "system", "developer"}
_TEXT_PARTS = {"input_text", "output_text", "text", "summary_text", "reasoning_text"}


def _bad(param: str, why: str) -> ApiError:
    return ApiError(400, f"{param}: {why}", param=param)


def _text(content: Any, param: str) -> str:
    """Text of a content string or a list of text parts (input_text / output_text / refusal)."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _bad(param, "must be a string or a list of content parts")
    texts = []
    for i, part in enumerate(content):
        where = f"{param}[{i}]"
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise _bad(where, "a content part must be an object with a 'type'")
        if part["type"] == "refusal":
            value = part.get("refusal")
        elif part["type"] in _TEXT_PARTS:
            value = part.get("text")
        else:
            raise _bad(
                f"{where}.type", f"content parts of type '{part['type']}' are not supported (text only)"
            )
        if not isinstance(value, str):
            raise _bad(
                where,
                f"a '{part['type']}' part needs a string "
                f"'{'refusal' if part['type'] == 'refusal' else 'text'}'",
            )
        texts.append(value)
    return "".join(texts)


def _has_images(content: Any) -> bool:
    return isinstance(content, list) and any(
        isinstance(p, dict) and p.get("type") == "input_image" for p in content
    )


def _content(content: Any, param: str, role: str):
    """A message's content: its text, or with ``input_image`` parts (user messages) a list of
    text and image parts (inference.vision.parts)."""
    if not _has_images(content):
        return _text(content, param)
    if role != "user":
        raise _bad(param, "input_image parts are read in user messages only")
    from inference.vision import parts

    out = []
    for i, part in enumerate(content):
        if part.get("type") != "input_image":
            out.append(parts.text_part(_text([part], param)))
            continue
        url = part.get("image_url")
        if url is None and part.get("file_id") is not None:
            raise _bad(f"{param}[{i}].file_id", "file ids are not supported: send image_url (a data: URL)")
        try:
            out.append(parts.image_part(url, f"{param}[{i}].image_url"))
        except ValueError as exc:
            raise ApiError(400, str(exc), param=f"{param}[{i}].image_url") from None
    return out


def _string(item: dict, key: str, param: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise _bad(f"{param}.{key}", "must be a string")
    return value


def to_messages(
    input: Union[str, List[dict]], instructions: Optional[str], context: List[dict] = ()
) -> List[dict]:
    """Chat messages (OpenAI form, contract 2 of the project) from ``instructions``, the items
    of earlier responses (``context``, already checked) and ``input``.

    Consecutive ``function_call`` items join the assistant message before them (one turn with
    text and tool calls); a ``function_call_output`` becomes a ``tool`` message; the text of a
    ``reasoning`` item goes to the next assistant message as ``reasoning_content``. ``developer``
    messages are sent as ``system`` (chat templates know that role).
    """
    messages: List[dict] = []
    if instructions:
        messages.append({"role": "system", "content": instructions})
    if isinstance(input, str):
        input = [{"role": "user", "content": input}]
    if not input:
        raise _bad("input", "must not be empty")
    names: Dict[str, str] = {}  # call_id -> function name, for tool messages
    reasoning: List[str] = []
    numbered = [("previous_response_id", item) for item in context]
    numbered += [(f"input[{i}]", item) for i, item in enumerate(input)]
    for param, item in numbered:
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            role = item.get("role")
            if role not in _ROLES:
                raise _bad(f"{param}.role", f"must be one of {sorted(_ROLES)}, not {role!r}")
            if "content" not in item:
                raise _bad(f"{param}.content", "is required")
            message = {
                "role": "system" if role == "developer" else role,
                "content": _content(item["content"], f"{param}.content", role),
            }
            if role == "assistant" and reasoning:
                message["reasoning_content"] = "".join(reasoning)
                reasoning = []
            messages.append(message)
        elif kind == "function_call":
            call_id, name = _string(item, "call_id", param), _string(item, "name", param)
            arguments = _string(item, "arguments", param)
            names[call_id] = name
            call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
            last = messages[-1] if messages else None
            if last is None or last["role"] != "assistant":
                last = {"role": "assistant", "content": ""}
                messages.append(last)
            if reasoning:
                last["reasoning_content"] = last.get("reasoning_content", "") + "".join(reasoning)
                reasoning = []
            last.setdefault("tool_calls", []).append(call)
        elif kind == "function_call_output":
            call_id = _string(item, "call_id", param)
            if "output" not in item:
                raise _bad(f"{param}.output", "is required")
            message = {
                "role": "tool",
                "tool_call_id": call_id,
                "content": _text(item["output"], f"{param}.output"),
            }
            if call_id in names:
                message["name"] = names[call_id]
            messages.append(message)
        elif kind == "reasoning":
            parts = (item.get("content") or []) or (item.get("summary") or [])
            reasoning.append(_text(parts, f"{param}.content"))
        elif kind == "item_reference":
            raise _bad(f"{param}.type", "item_reference is not supported: omlx does not store responses")
        elif kind is None:
            raise _bad(param, "an input item needs a 'type' (or a 'role' for a message)")
        else:
            raise _bad(f"{param}.type", f"input items of type '{kind}' are not supported")
    if not any(m["role"] != "system" for m in messages):
        raise _bad("input", "needs at least one message besides system/developer ones")
    return messages


def to_tools(tools: Optional[List[dict]]) -> Tuple[Optional[List[dict]], List[dict]]:
    """(function tools in chat form for the job, or None; the same tools in Responses form for
    the response body). Tools of other types (web_search, file_search, mcp, ...) are skipped:
    omlx runs no hosted tools."""
    chat, echo = [], []
    for i, tool in enumerate(tools or []):
        param = f"tools[{i}]"
        if tool.get("type") != "function":
            continue
        spec = tool.get("function") if isinstance(tool.get("function"), dict) else tool  # chat form too
        name = spec.get("name")
        if not isinstance(name, str) or not name:
            raise _bad(f"{param}.name", "a function tool needs a name")
        parameters = spec.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise _bad(f"{param}.parameters", "must be a JSON Schema object")
        description = spec.get("description")
        if description is not None and not isinstance(description, str):
            raise _bad(f"{param}.description", "must be a string")
        function = {"name": name, "parameters": parameters or {"type": "object", "properties": {}}}
        if description:
            function["description"] = description
        chat.append({"type": "function", "function": function})
        echo.append(
            {
                "type": "function",
                "name": name,
                "description": description,
                "parameters": parameters,
                "strict": spec.get("strict") if isinstance(spec.get("strict"), bool) else None,
            }
        )
    return (chat or None), echo


def to_tool_choice(
    choice: Union[str, dict, None], tools: List[dict]
) -> Tuple[Optional[Union[str, dict]], Union[str, dict]]:
    """(tool_choice in chat form for the job, or None; the Responses form for the body)."""
    if choice is None:
        return None, "auto"
    names = {tool["name"] for tool in tools}
    if isinstance(choice, str):
        if choice not in ("auto", "none", "required"):
            raise _bad("tool_choice", f"must be 'auto', 'none', 'required' or a function, not {choice!r}")
        if choice == "required" and not tools:
            raise _bad("tool_choice", "'required' needs at least one function tool in 'tools'")
        return choice, choice
    if choice.get("type") != "function":
        raise _bad("tool_choice.type", f"only function tools can be chosen, not {choice.get('type')!r}")
    name = choice.get("name")
    if not isinstance(name, str) or name not in names:
        raise _bad("tool_choice.name", f"{name!r} is not one of the function tools {sorted(names)}")
    return {"type": "function", "function": {"name": name}}, {"type": "function", "name": name}


def to_structured(text: Optional[dict]) -> Tuple[Optional[dict], dict]:
    """(the ``structured`` sampling constraint, or None for plain text; the ``text`` config
    echoed in the body)."""
    fmt = (text or {}).get("format") or {"type": "text"}
    echo = {"format": fmt}
    if isinstance((text or {}).get("verbosity"), str):
        echo["verbosity"] = text["verbosity"]
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind == "text":
        return None, {**echo, "format": {"type": "text"}}
    if kind == "json_object":
        return {"type": "json_object"}, {**echo, "format": {"type": "json_object"}}
    if kind == "json_schema":
        name, schema = fmt.get("name"), fmt.get("schema")
        if not isinstance(name, str) or not name:
            raise _bad("text.format.name", "a json_schema format needs a name")
        if not isinstance(schema, dict):
            raise _bad("text.format.schema", "must be a JSON Schema object")
        body = {
            "type": "json_schema",
            "name": name,
            "schema": schema,
            "strict": fmt.get("strict") if isinstance(fmt.get("strict"), bool) else None,
        }
        if isinstance(fmt.get("description"), str):
            body["description"] = fmt["description"]
        return {"type": "json_schema", "schema": schema}, {**echo, "format": body}
    raise _bad("text.format.type", f"must be 'text', 'json_object' or 'json_schema', not {kind!r}")


def stored_items(input: Union[str, List[dict]]) -> List[dict]:
    """``input`` (already accepted by ``to_messages``) as the typed items that
    GET /v1/responses/{id}/input_items lists and a later request's context replays: each with
    an id and a status, message content as a list of text parts."""
    if isinstance(input, str):
        input = [{"role": "user", "content": input}]
    items = []
    for item in input:
        kind = item.get("type", "message")
        if kind == "message" and _has_images(item["content"]):  # kept as sent: text and image parts
            content = [
                {"type": "input_image", "image_url": p["image_url"], "detail": p.get("detail", "auto")}
                if p.get("type") == "input_image"
                else {"type": "input_text", "text": _text([p], "input")}
                for p in item["content"]
            ]
            items.append(
                {
                    "id": item.get("id") or _new_id("msg"),
                    "type": "message",
                    "role": item["role"],
                    "status": "completed",
                    "content": content,
                }
            )
        elif kind == "message":
            text = _text(item["content"], "input")
            if item["role"] == "assistant":
                part = {"type": "output_text", "text": text, "annotations": []}
            else:
                part = {"type": "input_text", "text": text}
            items.append(
                {
                    "id": item.get("id") or _new_id("msg"),
                    "type": "message",
                    "role": item["role"],
                    "status": "completed",
                    "content": [part],
                }
            )
        elif kind == "function_call":
            items.append(
                {
                    "id": item.get("id") or _new_id("fc"),
                    "type": kind,
                    "status": "completed",
                    "call_id": item["call_id"],
                    "name": item["name"],
                    "arguments": item["arguments"],
                }
            )
        elif kind == "function_call_output":
            items.append(
                {
                    "id": item.get("id") or _new_id("fco"),
                    "type": kind,
                    "status": "completed",
                    "call_id": item["call_id"],
                    "output": _text(item["output"], "input"),
                }
            )
        elif kind == "reasoning":
            items.append(
                {
                    "id": item.get("id") or _new_id("rs"),
                    "type": kind,
                    "summary": _parts(item.get("summary"), "summary_text"),
                    "content": _parts(item.get("content"), "reasoning_text"),
                }
            )
    return items


def _parts(parts: Any, kind: str) -> List[dict]:
    return [
        {"type": kind, "text": p["text"]}
        for p in parts or []
        if isinstance(p, dict) and isinstance(p.get("text"), str)
    ]


def _new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex}"
