"""The checked chat request: every API (and the console's chat) checks its tools, tool
choice and image count here and builds its chat ``GenerationJob`` with the structured-output
constraint already in its params, so the worker (``inference.generation.run_job``) receives it
whole and checks none of it again (the OpenAI chat route counts its images itself)."""

from __future__ import annotations

from typing import List, Optional, Tuple

from inference.chat.structured import ToolChoice, check_tool_choice, check_tools, tool_choice_structured
from inference.generation import GenerationJob
from inference.vision.limits import ImageLimits
from inference.vision.parts import check_count


def tool_options(tools, tool_choice: ToolChoice) -> Tuple[Optional[List[dict]], ToolChoice, Optional[dict]]:
    """(tools, tool_choice, the constraint of a forced tool call or None), checked: ValueError
    ("field: why")."""
    tools = check_tools(tools)
    tool_choice = check_tool_choice(tool_choice, tools)
    return tools, tool_choice, tool_choice_structured(tools, tool_choice)


def chat_job(
    request_id: str,
    model: str,
    params: dict,
    n: int = 1,
    *,
    messages: List[dict],
    tools: Optional[List[dict]] = None,
    tool_choice: ToolChoice = None,
    chat_template_kwargs: Optional[dict] = None,
    parallel_tool_calls: bool = True,
    cache_salt: Optional[str] = None,
) -> GenerationJob:
    """A chat job, checked (ValueError): ``params`` are SamplingParams fields the view checked
    (``sampling.checked_params``); their ``structured`` is the request's own constraint
    (response_format, text.format, output_config), else a forced tool call's is put there.
    ``cache_salt``: the job's prefix-cache namespace (``cache_salt.effective_salt``)."""
    check_count(messages, ImageLimits.from_settings())
    tools, tool_choice, forced = tool_options(tools, tool_choice)
    if params.get("structured") is None and forced is not None:
        params = dict(params, structured=forced)
    return GenerationJob(
        request_id,
        model,
        params,
        n,
        messages=messages,
        tools=tools,
        tool_choice=tool_choice,
        chat_template_kwargs=dict(chat_template_kwargs or {}),
        parallel_tool_calls=parallel_tool_calls,
        cache_salt=cache_salt,
    )
