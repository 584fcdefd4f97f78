"""Request bodies of the OpenAI-compatible routes. Unknown fields are accepted and ignored (clients
send many); known fields are type-checked here and range-checked by SamplingParams."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Union

from ninja import Schema
from pydantic import ConfigDict, Field, field_validator

from inference.api.common.cache_salt import cache_salt_field
from inference.api.common import caps

MAX_N = 16


class StreamOptions(Schema):
    include_usage: bool = False


class ContentPart(Schema):
    model_config = ConfigDict(extra="allow")
    type: str
    text: Optional[str] = None
    image_url: Union[Dict[str, Any], str, None] = None  # {"url": ..., "detail": ...}


class ToolCallFunction(Schema):
    model_config = ConfigDict(extra="allow")
    name: str
    arguments: Union[str, Dict[str, Any]] = "{}"


class ToolCall(Schema):
    model_config = ConfigDict(extra="allow")
    id: Optional[str] = None
    type: str = "function"
    function: ToolCallFunction


CHAT_ROLES = ("system", "developer", "user", "assistant", "tool", "function")


class ChatMessage(Schema):
    """A message of the conversation: assistant messages may carry ``tool_calls`` (and
    ``reasoning_content``), tool messages answer one by ``tool_call_id``."""

    model_config = ConfigDict(extra="allow")
    role: str

    @field_validator("role")
    @classmethod
    def _known_role(cls, role: str) -> str:
        if role not in CHAT_ROLES:
            raise ValueError(f"unknown role {role!r}; one of {', '.join(CHAT_ROLES)}")
        return role

    content: Union[str, List[ContentPart], None] = None
    tool_calls: Optional[List[ToolCall]] = None
    tool_call_id: Optional[str] = None
    reasoning_content: Optional[str] = None

    def template_dict(self, where: str = "message") -> dict:
        """The message as chat templates expect it: text parts joined into one string; with
        image parts, a list of text and image parts (inference.vision.parts)."""
        message = self.model_dump(exclude_none=True)
        if isinstance(self.content, list):
            kinds = {part.type for part in self.content} - {"text", "input_text", "image_url"}
            if kinds:
                raise ValueError(
                    f"content parts of type {sorted(kinds)} are not supported (text and image_url)"
                )
            if any(part.type == "image_url" for part in self.content):
                if self.role != "user":
                    raise ValueError(f"{where}: image_url parts are read in user messages only")
                message["content"] = [
                    _image_or_text(part, f"{where}.content[{i}]") for i, part in enumerate(self.content)
                ]
            else:
                message["content"] = "".join(part.text or "" for part in self.content)
        message.setdefault("content", "")
        return message


def _image_or_text(part: ContentPart, where: str) -> dict:
    from inference.vision import parts

    if part.type != "image_url":
        return parts.text_part(part.text or "")
    image_url = part.image_url  # {"url": ..., "detail": ...} (or a bare string)
    url = image_url.get("url") if isinstance(image_url, dict) else image_url
    return parts.image_part(url, f"{where}.image_url.url")


class _Sampling(Schema):
    """Fields shared by chat and text completions (OpenAI's, plus vLLM's top_k, min_p,
    repetition_penalty and ignore_eos)."""

    model_config = ConfigDict(extra="allow")
    model: str
    max_tokens: Optional[int] = None
    temperature: Optional[float] = None
    top_p: Optional[float] = None
    top_k: Optional[int] = None
    min_p: Optional[float] = None
    presence_penalty: Optional[float] = None
    frequency_penalty: Optional[float] = None
    repetition_penalty: Optional[float] = None
    priority: Optional[int] = None  # vLLM's: lower is scheduled first (docs/engine.md)
    n: int = Field(1, ge=1, le=MAX_N)
    stop: Union[str, List[str], None] = Field(None, **caps.schema_extra(caps.MAX_STOP, caps.MAX_STOP_CHARS))
    seed: Optional[int] = None
    ignore_eos: bool = False
    stream: bool = False
    stream_options: Optional[StreamOptions] = None
    cache_salt: Optional[str] = cache_salt_field()  # vLLM's: the prefix-cache namespace
    speculative: Any = None  # omlx's: speculative decoding for this request (docs/api.md)


class ChatCompletionRequest(_Sampling):
    messages: List[ChatMessage] = Field(..., min_length=1)
    max_completion_tokens: Optional[int] = None
    logprobs: bool = False
    top_logprobs: Optional[int] = None
    # Checked in detail by inference.chat.structured (messages name the wrong part precisely).
    tools: Optional[List[Dict[str, Any]]] = None
    tool_choice: Union[str, Dict[str, Any], None] = None
    parallel_tool_calls: bool = True
    response_format: Optional[Dict[str, Any]] = None
    chat_template_kwargs: Optional[Dict[str, Any]] = None
    reasoning_effort: Optional[str] = None  # accepted, ignored: templates have no common knob


class CompletionRequest(_Sampling):
    prompt: Union[str, List[int], List[str], List[List[int]]]
    logprobs: Optional[int] = None
    echo: bool = False
