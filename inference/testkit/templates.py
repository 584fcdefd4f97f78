"""Chat templates of the test models built by ``inference.testkit``, one per family, each in
the family's own format for tools and reasoning (written for omlx, in the spirit of each family's
published template):

- ``qwen2``: ChatML; tools listed in the system turn; calls as ``<tool_call>{json}</tool_call>``
  (Hermes / Qwen2.5 style); tool results in a user turn as ``<tool_response>...</tool_response>``.
- ``qwen3``: as qwen2, plus reasoning: the generation prompt opens ``<think>`` (the answer is
  reasoning until ``</think>``); ``enable_thinking=False`` closes it empty instead. Reasoning of
  assistant turns after the last user message is shown again (``reasoning_content``).
- ``llama``: Llama 3.1 headers; tools listed in the first user turn; a call is the bare JSON
  ``{"name": ..., "parameters": {...}}``; tool results in ``ipython`` turns.
- ``mistral``: ``[INST]...[/INST]``; tools as ``[AVAILABLE_TOOLS][...][/AVAILABLE_TOOLS]`` before
  the last user turn; calls as ``[TOOL_CALLS][{"name", "arguments"}]``; results as
  ``[TOOL_RESULTS]{...}[/TOOL_RESULTS]``.

Every template renders plain messages the way the family does; the qwen ones render exactly
ChatML. Special tokens each template uses are in ``SPECIAL_TOKENS``.
"""

SPECIAL_TOKENS = {
    "qwen2": ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"),
    "qwen3": ("<think>", "</think>", "<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>"),
    "llama": (
        "<|begin_of_text|>",
        "<|start_header_id|>",
        "<|end_header_id|>",
        "<|eot_id|>",
        "<|eom_id|>",
        "<|python_tag|>",
    ),
    "mistral": (
        "[INST]",
        "[/INST]",
        "[TOOL_CALLS]",
        "[AVAILABLE_TOOLS]",
        "[/AVAILABLE_TOOLS]",
        "[TOOL_RESULTS]",
        "[/TOOL_RESULTS]",
    ),
}

# A call's function and its arguments (a JSON string as OpenAI sends it, or an object).
_FUNCTION = "{%- set fn = call.function if call.function is defined else call -%}"
_ARGUMENTS = "{%- if fn.arguments is string -%}{{- fn.arguments -}}{%- else -%}{{- fn.arguments | tojson -}}{%- endif -%}"


def _qwen(thinking: bool) -> str:
    lines = [
        "{%- set ns = namespace(system='', start=0, last_user=-1) -%}",
        "{%- if messages and messages[0].role == 'system' -%}",
        "{%- set ns.system = messages[0].content or '' -%}{%- set ns.start = 1 -%}",
        "{%- endif -%}",
        "{%- for message in messages -%}{%- if message.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}"
        "{%- endif -%}{%- endfor -%}",
        "{%- if tools -%}",
        "{{- '<|im_start|>system\\n' -}}{%- if ns.system -%}{{- ns.system + '\\n\\n' -}}{%- endif -%}",
        "{{- '# Tools\\n\\nYou may call the functions below. Each is described by a JSON Schema inside"
        " <tools></tools>:\\n<tools>' -}}",
        "{%- for tool in tools -%}{{- '\\n' + (tool | tojson) -}}{%- endfor -%}",
        "{{- '\\n</tools>\\n\\nTo call one, write its name and arguments as a JSON object between"
        " <tool_call></tool_call> tags, one pair of tags per call:\\n<tool_call>\\n"
        '{"name": <function name>, "arguments": <arguments object>}\\n</tool_call><|im_end|>\\n\' -}}',
        "{%- elif ns.start == 1 -%}",
        "{{- '<|im_start|>system\\n' + ns.system + '<|im_end|>\\n' -}}",
        "{%- endif -%}",
        "{%- for message in messages -%}",
        "{%- if loop.index0 < ns.start -%}",
        "{%- elif message.role == 'assistant' -%}",
        "{{- '<|im_start|>assistant\\n' -}}",
    ]
    if thinking:
        lines += [
            "{%- if message.reasoning_content and loop.index0 > ns.last_user -%}",
            "{{- '<think>\\n' + message.reasoning_content + '\\n</think>\\n\\n' -}}",
            "{%- endif -%}",
        ]
    lines += [
        "{{- message.content or '' -}}",
        "{%- for call in message.tool_calls or [] -%}",
        _FUNCTION,
        "{%- if not loop.first or message.content -%}{{- '\\n' -}}{%- endif -%}",
        '{{- \'<tool_call>\\n{"name": "\' + fn.name + \'", "arguments": \' -}}',
        _ARGUMENTS,
        "{{- '}\\n</tool_call>' -}}",
        "{%- endfor -%}",
        "{{- '<|im_end|>\\n' -}}",
        "{%- elif message.role == 'tool' -%}",
        "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}",
        "{{- '\\n<tool_response>\\n' + (message.content or '') + '\\n</tool_response>' -}}",
        "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}{{- '<|im_end|>\\n' -}}{%- endif -%}",
        "{%- else -%}",
        "{{- '<|im_start|>' + message.role + '\\n' + (message.content or '') + '<|im_end|>\\n' -}}",
        "{%- endif -%}",
        "{%- endfor -%}",
        "{%- if add_generation_prompt -%}",
        "{{- '<|im_start|>assistant\\n' -}}",
    ]
    if thinking:
        lines += [
            "{%- if enable_thinking is defined and not enable_thinking -%}{{- '<think>\\n\\n</think>\\n\\n' -}}",
            "{%- else -%}{{- '<think>\\n' -}}{%- endif -%}",
        ]
    lines.append("{%- endif -%}")
    return "\n".join(lines)


_LLAMA = "\n".join(
    [
        "{{- '<|begin_of_text|>' -}}",
        "{%- set ns = namespace(system='', start=0, tools_shown=false) -%}",
        "{%- if messages and messages[0].role == 'system' -%}",
        "{%- set ns.system = messages[0].content or '' -%}{%- set ns.start = 1 -%}",
        "{%- endif -%}",
        "{%- if ns.start == 1 -%}",
        "{{- '<|start_header_id|>system<|end_header_id|>\\n\\n' + ns.system + '<|eot_id|>' -}}",
        "{%- endif -%}",
        "{%- for message in messages -%}",
        "{%- if loop.index0 < ns.start -%}",
        "{%- elif message.role == 'user' and tools and not ns.tools_shown -%}",
        "{%- set ns.tools_shown = true -%}",
        "{{- '<|start_header_id|>user<|end_header_id|>\\n\\n' -}}",
        "{{- 'The functions below may be called. To call one, answer with nothing but a JSON object"
        ' {"name": <function name>, "parameters": <object of argument values>}.\\n\\n\' -}}',
        "{%- for tool in tools -%}{{- (tool | tojson) + '\\n\\n' -}}{%- endfor -%}",
        "{{- (message.content or '') + '<|eot_id|>' -}}",
        "{%- elif message.role == 'assistant' and message.tool_calls -%}",
        "{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}",
        "{%- for call in message.tool_calls -%}",
        _FUNCTION,
        "{%- if not loop.first -%}{{- '\\n' -}}{%- endif -%}",
        '{{- \'{"name": "\' + fn.name + \'", "parameters": \' -}}',
        _ARGUMENTS,
        "{{- '}' -}}",
        "{%- endfor -%}",
        "{{- '<|eot_id|>' -}}",
        "{%- elif message.role == 'tool' -%}",
        "{{- '<|start_header_id|>ipython<|end_header_id|>\\n\\n' + (message.content or '') + '<|eot_id|>' -}}",
        "{%- else -%}",
        "{{- '<|start_header_id|>' + message.role + '<|end_header_id|>\\n\\n' + (message.content or '')"
        " + '<|eot_id|>' -}}",
        "{%- endif -%}",
        "{%- endfor -%}",
        "{%- if add_generation_prompt -%}{{- '<|start_header_id|>assistant<|end_header_id|>\\n\\n' -}}{%- endif -%}",
    ]
)

_MISTRAL = "\n".join(
    [
        "{%- set ns = namespace(system='', start=0, last_user=-1) -%}",
        "{%- if messages and messages[0].role == 'system' -%}",
        "{%- set ns.system = messages[0].content or '' -%}{%- set ns.start = 1 -%}",
        "{%- endif -%}",
        "{%- for message in messages -%}{%- if message.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}"
        "{%- endif -%}{%- endfor -%}",
        "{%- for message in messages -%}",
        "{%- if loop.index0 < ns.start -%}",
        "{%- elif message.role == 'user' -%}",
        "{%- if tools and loop.index0 == ns.last_user -%}",
        "{{- '[AVAILABLE_TOOLS]' + (tools | tojson) + '[/AVAILABLE_TOOLS]' -}}",
        "{%- endif -%}",
        "{{- '[INST]' -}}",
        "{%- if ns.system and loop.index0 == ns.last_user -%}{{- ns.system + '\\n\\n' -}}{%- endif -%}",
        "{{- (message.content or '') + '[/INST]' -}}",
        "{%- elif message.role == 'assistant' and message.tool_calls -%}",
        "{{- '[TOOL_CALLS][' -}}",
        "{%- for call in message.tool_calls -%}",
        _FUNCTION,
        '{{- \'{"name": "\' + fn.name + \'", "arguments": \' -}}',
        _ARGUMENTS,
        "{%- if call.id -%}{{- ', \"id\": \"' + call.id + '\"' -}}{%- endif -%}",
        "{{- '}' -}}{%- if not loop.last -%}{{- ', ' -}}{%- endif -%}",
        "{%- endfor -%}",
        "{{- ']' + eos_token -}}",
        "{%- elif message.role == 'assistant' -%}",
        "{{- ' ' + (message.content or '') + eos_token -}}",
        "{%- elif message.role == 'tool' -%}",
        "{{- '[TOOL_RESULTS]' + ({'content': message.content or '', 'call_id': message.tool_call_id or ''} | tojson)"
        " + '[/TOOL_RESULTS]' -}}",
        "{%- elif message.role == 'system' -%}",
        "{{- '[INST]' + (message.content or '') + '[/INST]' -}}",
        "{%- else -%}",
        "{{- raise_exception('unknown role: ' + message.role) -}}",
        "{%- endif -%}",
        "{%- endfor -%}",
    ]
)

CHAT_TEMPLATES = {
    "qwen2": _qwen(thinking=False),
    "qwen3": _qwen(thinking=True),
    "llama": _LLAMA,
    "mistral": _MISTRAL,
}
