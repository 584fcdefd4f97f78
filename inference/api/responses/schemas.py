"""Request body of POST /v1/responses (OpenAI's Responses API). Unknown fields are accepted and
ignored; ``input``, ``tools``, ``tool_choice`` and ``text`` are checked item by item in
``responses.input`` (their many shapes give clearer messages there than a pydantic union)."""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Union

from ninja import Schema
from pydantic import ConfigDict, Field

from inference.api.common import caps

from inference.api.common.cache_salt import cache_salt_field


class ReasoningConfig(Schema):
    model_config = ConfigDict(extra="allow")
    effort: Optional[str] = None


class ResponsesRequest(Schema):
    model_config = ConfigDict(extra="allow")
    model: str
    input: Union[str, List[Dict[str, Any]]]
    instructions: Optional[str] = None
    max_output_tokens: Optional[int] = None
    temperature: Optional[float] = None
    top_p: Optional[float] = None
    stream: bool = False
    tools: Optional[List[Dict[str, Any]]] = None
    tool_choice: Union[str, Dict[str, Any], None] = None
    parallel_tool_calls: Optional[bool] = None
    text: Optional[Dict[str, Any]] = None
    reasoning: Optional[ReasoningConfig] = None
    store: Optional[bool] = None
    metadata: Optional[Dict[str, str]] = Field(
        None, json_schema_extra={"maxProperties": caps.MAX_METADATA_PAIRS}
    )
    previous_response_id: Optional[str] = None
    user: Optional[str] = Field(None, json_schema_extra={"maxLength": caps.MAX_USER_CHARS})
    # vLLM's extensions, as on the chat route (the SDK sends them with extra_body)
    top_k: Optional[int] = None
    priority: Optional[int] = None  # vLLM's: lower is scheduled first (docs/engine.md)
    min_p: Optional[float] = None
    repetition_penalty: Optional[float] = None
    seed: Optional[int] = None
    stop: Union[str, List[str], None] = Field(None, **caps.schema_extra(caps.MAX_STOP, caps.MAX_STOP_CHARS))
    ignore_eos: bool = False
    cache_salt: Optional[str] = cache_salt_field()  # vLLM's: the prefix-cache namespace
    speculative: Any = None  # omlx's: speculative decoding for this request (docs/api.md)
