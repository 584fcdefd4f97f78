"""Request bodies of the Anthropic Messages routes. Unknown fields are accepted and ignored (clients
such as Claude Code send many: metadata, service_tier, container, mcp_servers, cache_control...).
Content blocks stay plain dicts: ``anthropic.input`` checks the kinds it knows and skips the rest."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Union

from ninja import Schema
from pydantic import ConfigDict, Field

from inference.api.common.cache_salt import cache_salt_field
from inference.api.common import caps


class InputMessage(Schema):
    model_config = ConfigDict(extra="allow")
    role: str
    content: Union[str, List[Dict[str, Any]]]


class _Prompt(Schema):
    """What count_tokens and messages share: everything that shapes the rendered prompt."""

    model_config = ConfigDict(extra="allow")
    model: str
    messages: List[InputMessage] = Field(..., min_length=1)
    system: Union[str, List[Dict[str, Any]], None] = None
    tools: Optional[List[Dict[str, Any]]] = None
    tool_choice: Optional[Dict[str, Any]] = None
    thinking: Optional[Dict[str, Any]] = None


class CountTokensRequest(_Prompt):
    pass


class MessagesRequest(_Prompt):
    max_tokens: int  # required, as in Anthropic's API
    temperature: Optional[float] = None
    top_p: Optional[float] = None
    top_k: Optional[int] = None
    priority: Optional[int] = None  # omlx's (vLLM's field): lower is scheduled first
    stop_sequences: Optional[List[str]] = Field(
        None, **caps.schema_extra(caps.MAX_STOP_SEQUENCES, caps.MAX_STOP_CHARS)
    )
    stream: bool = False
    ignore_eos: bool = False  # an omlx extension, as on the OpenAI routes
    metadata: Optional[Dict[str, Any]] = None
    output_config: Optional[Dict[str, Any]] = None  # {effort, format: {type: json_schema, schema}}
    output_format: Optional[Dict[str, Any]] = None  # the beta spelling of output_config.format
    cache_salt: Optional[str] = cache_salt_field()  # omlx's (vLLM's field): the prefix-cache namespace
    speculative: Any = None  # omlx's: speculative decoding for this request (docs/api.md)
