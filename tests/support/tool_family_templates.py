"""Chat templates of the families whose tool-call formats omlx parses but whose architectures the
test-model factory does not build (written for omlx, in the spirit of each family's published
template; keyed by the tool-call format's name, ``inference.chat.tool_parsers.FORMATS``).

Each renders plain messages, tools, tool calls in assistant history (arguments as objects, as
``inference.chat.template`` hands them over), reasoning (``reasoning_content``) and tool results
the way its family does. Tests put one into a test model's tokenizer_config.json to serve it
(the model's weights do not matter to rendering and parsing):

- ``qwen3_xml`` (Qwen3-Coder, Qwen3.5): ChatML; calls as ``<tool_call>\\n<function=NAME>\\n
  <parameter=K>\\nV\\n</parameter>\\n</function>\\n</tool_call>``; results in a user turn as
  ``<tool_response>``; the generation prompt opens ``<think>`` unless enable_thinking is false.
- ``glm45``: ``[gMASK]<sop>``, ``<|system|>``, ``<|user|>``, ``<|assistant|>``; calls as
  ``<tool_call>NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>\\n</tool_call>``; results in an
  ``<|observation|>`` turn; reasoning in ``<think>...</think>`` (empty when thinking is off).
- ``kimi_k2``: ``<|im_user|>user<|im_middle|>...<|im_end|>``; calls in a
  ``<|tool_calls_section_begin|>`` section with ids ``functions.NAME:IDX``; results in
  ``<|im_system|>tool`` turns, ``## Return of ID``.
- ``deepseek_v3`` (V3.1): ``<｜User｜>``, ``<｜Assistant｜>``; calls in ``<｜tool▁calls▁begin｜>``;
  results as ``<｜tool▁output▁begin｜>...<｜tool▁output▁end｜>``; ``thinking=True`` opens ``<think>``
  in the generation prompt, else it is closed (``</think>``).
- ``gemma3``: ``<start_of_turn>user`` / ``model``; system and tools in the first user turn; calls
  as a ```` ```tool_code ```` block of Python calls; results as ```` ```tool_output ```` in a user turn.
- ``gemma4``: ``<|turn>system`` / ``user`` / ``model``; tools as ``<|tool>declaration:...<tool|>``;
  calls as ``<|tool_call>call:NAME{k:v}<tool_call|>`` (strings in ``<|"|>``); results follow the
  call in the model's turn as ``<|tool_response>response:NAME{value:...}<tool_response|>``;
  reasoning in ``<|channel>thought\\n...<channel|>``.
- ``harmony`` (gpt-oss): ``<|start|>ROLE<|message|>...<|end|>``; tools in the developer message
  (namespace functions); reasoning in the analysis channel; calls as commentary messages
  ``to=functions.NAME <|constrain|>json`` ending ``<|call|>``; results as
  ``<|start|>functions.NAME to=assistant<|channel|>commentary<|message|>...<|end|>``.
"""

# The system message and its index, and the index of the last user message.
_HEAD = r"""
{%- set ns = namespace(system='', start=0, last_user=-1, calls=0, results=0) -%}
{%- if messages and messages[0].role == 'system' -%}{%- set ns.system = messages[0].content or '' -%}{%- set ns.start = 1 -%}{%- endif -%}
{%- for m in messages -%}{%- if m.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}{%- endfor -%}
"""
_FN = "{%- set fn = call.function if call.function is defined else call -%}"
_ARGS = "{%- set args = fn.arguments if fn.arguments is mapping else {} -%}"

QWEN3_XML = (
    _HEAD
    + r"""
{%- if tools or ns.start -%}
{{- '<|im_start|>system\n' + ns.system -}}
{%- if tools -%}
{{- ('\n\n' if ns.system else '') + '# Tools\n\nThese functions are available:\n<tools>' -}}
{%- for tool in tools -%}{{- '\n' + (tool | tojson) -}}{%- endfor -%}
{{- '\n</tools>\n\nTo call a function, write:\n<tool_call>\n<function=NAME>\n<parameter=ARGUMENT>\nVALUE\n</parameter>\n</function>\n</tool_call>' -}}
{%- endif -%}
{{- '<|im_end|>\n' -}}
{%- endif -%}
{%- for message in messages -%}
{%- if loop.index0 < ns.start -%}
{%- elif message.role == 'assistant' -%}
{{- '<|im_start|>assistant\n' -}}
{%- if loop.index0 > ns.last_user -%}{{- '<think>\n' + (message.reasoning_content or '') + '\n</think>\n\n' -}}{%- endif -%}
{{- message.content or '' -}}
{%- for call in message.tool_calls or [] -%}"""
    + _FN
    + _ARGS
    + r"""
{%- if not loop.first or message.content -%}{{- '\n' -}}{%- endif -%}
{{- '<tool_call>\n<function=' + fn.name + '>\n' -}}
{%- for key, value in args.items() -%}
{{- '<parameter=' + key + '>\n' -}}{%- if value is string -%}{{- value -}}{%- else -%}{{- value | tojson -}}{%- endif -%}{{- '\n</parameter>\n' -}}
{%- endfor -%}
{{- '</function>\n</tool_call>' -}}
{%- endfor -%}
{{- '<|im_end|>\n' -}}
{%- elif message.role == 'tool' -%}
{%- if messages[loop.index0 - 1].role != 'tool' -%}{{- '<|im_start|>user' -}}{%- endif -%}
{{- '\n<tool_response>\n' + (message.content or '') + '\n</tool_response>' -}}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}{{- '<|im_end|>\n' -}}{%- endif -%}
{%- else -%}
{{- '<|im_start|>' + message.role + '\n' + (message.content or '') + '<|im_end|>\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|im_start|>assistant\n' -}}
{%- if enable_thinking is defined and not enable_thinking -%}{{- '<think>\n\n</think>\n\n' -}}{%- else -%}{{- '<think>\n' -}}{%- endif -%}
{%- endif -%}
"""
)

GLM45 = (
    _HEAD
    + r"""
{{- '[gMASK]<sop>' -}}
{%- if tools or ns.start -%}
{{- '<|system|>\n' + ns.system -}}
{%- if tools -%}
{{- ('\n\n' if ns.system else '') + '# Tools\n\nYou may call these functions:\n<tools>' -}}
{%- for tool in tools -%}{{- '\n' + (tool | tojson) -}}{%- endfor -%}
{{- '\n</tools>\n\nWrite each call as:\n<tool_call>NAME\n<arg_key>ARGUMENT</arg_key>\n<arg_value>VALUE</arg_value>\n</tool_call>' -}}
{%- endif -%}
{%- endif -%}
{%- for message in messages -%}
{%- if loop.index0 < ns.start -%}
{%- elif message.role == 'assistant' -%}
{{- '<|assistant|>' -}}
{%- if message.reasoning_content and loop.index0 > ns.last_user -%}{{- '\n<think>' + message.reasoning_content + '</think>' -}}{%- else -%}{{- '\n<think></think>' -}}{%- endif -%}
{%- if message.content -%}{{- '\n' + message.content -}}{%- endif -%}
{%- for call in message.tool_calls or [] -%}"""
    + _FN
    + _ARGS
    + r"""
{{- '\n<tool_call>' + fn.name + '\n' -}}
{%- for key, value in args.items() -%}
{{- '<arg_key>' + key + '</arg_key>\n<arg_value>' -}}{%- if value is string -%}{{- value -}}{%- else -%}{{- value | tojson -}}{%- endif -%}{{- '</arg_value>\n' -}}
{%- endfor -%}
{{- '</tool_call>' -}}
{%- endfor -%}
{%- elif message.role == 'tool' -%}
{%- if messages[loop.index0 - 1].role != 'tool' -%}{{- '<|observation|>' -}}{%- endif -%}
{{- '\n<tool_response>\n' + (message.content or '') + '\n</tool_response>' -}}
{%- else -%}
{{- '<|' + message.role + '|>\n' + (message.content or '') -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- '<|assistant|>' -}}{%- if enable_thinking is defined and not enable_thinking -%}{{- '\n<think></think>' -}}{%- endif -%}
{%- endif -%}
"""
)

KIMI_K2 = (
    _HEAD
    + r"""
{%- if tools -%}{{- '<|im_system|>tool_declare<|im_middle|>' + (tools | tojson) + '<|im_end|>' -}}{%- endif -%}
{{- '<|im_system|>system<|im_middle|>' + (ns.system or 'You are a helpful assistant.') + '<|im_end|>' -}}
{%- for message in messages -%}
{%- if loop.index0 < ns.start -%}
{%- elif message.role == 'assistant' -%}
{{- '<|im_assistant|>assistant<|im_middle|>' -}}
{%- if message.reasoning_content and loop.index0 > ns.last_user -%}{{- '<think>' + message.reasoning_content + '</think>' -}}{%- endif -%}
{{- message.content or '' -}}
{%- if message.tool_calls -%}
{{- '<|tool_calls_section_begin|>' -}}
{%- for call in message.tool_calls -%}"""
    + _FN
    + r"""
{%- set id = call.id if (call.id or '').startswith('functions.') else 'functions.' + fn.name + ':' + (ns.calls | string) -%}
{%- set ns.calls = ns.calls + 1 -%}
{{- '<|tool_call_begin|>' + id + '<|tool_call_argument_begin|>' + (fn.arguments | tojson) + '<|tool_call_end|>' -}}
{%- endfor -%}
{{- '<|tool_calls_section_end|>' -}}
{%- endif -%}
{{- '<|im_end|>' -}}
{%- elif message.role == 'tool' -%}
{%- set id = message.tool_call_id if (message.tool_call_id or '').startswith('functions.') else 'functions.' + (message.name or 'tool') + ':' + (ns.results | string) -%}
{%- set ns.results = ns.results + 1 -%}
{{- '<|im_system|>tool<|im_middle|>## Return of ' + id + '\n' + (message.content or '') + '<|im_end|>' -}}
{%- else -%}
{{- '<|im_' + message.role + '|>' + message.role + '<|im_middle|>' + (message.content or '') + '<|im_end|>' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|im_assistant|>assistant<|im_middle|>' -}}{%- endif -%}
"""
)

DEEPSEEK_V3 = (
    _HEAD
    + r"""
{{- '<｜begin▁of▁sentence｜>' + ns.system -}}
{%- if tools -%}
{{- ('\n\n' if ns.system else '') + '## Tools\nYou may call these functions:\n' -}}
{%- for tool in tools -%}{{- (tool | tojson) + '\n' -}}{%- endfor -%}
{{- 'Call them as <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{JSON arguments}<｜tool▁call▁end｜><｜tool▁calls▁end｜>\n' -}}
{%- endif -%}
{%- for message in messages -%}
{%- if loop.index0 < ns.start -%}
{%- elif message.role == 'user' -%}{{- '<｜User｜>' + (message.content or '') -}}
{%- elif message.role == 'assistant' -%}
{%- if loop.index0 == 0 or messages[loop.index0 - 1].role != 'tool' -%}
{{- '<｜Assistant｜>' -}}
{%- if loop.index0 > ns.last_user and (message.reasoning_content or (thinking is defined and thinking)) -%}
{{- '<think>' + (message.reasoning_content or '') + '</think>' -}}{%- else -%}{{- '</think>' -}}{%- endif -%}
{%- endif -%}
{{- message.content or '' -}}
{%- if message.tool_calls -%}
{{- '<｜tool▁calls▁begin｜>' -}}
{%- for call in message.tool_calls -%}"""
    + _FN
    + r"""
{{- '<｜tool▁call▁begin｜>' + fn.name + '<｜tool▁sep｜>' + (fn.arguments | tojson) + '<｜tool▁call▁end｜>' -}}
{%- endfor -%}
{{- '<｜tool▁calls▁end｜>' -}}
{%- endif -%}
{{- '<｜end▁of▁sentence｜>' -}}
{%- elif message.role == 'tool' -%}
{{- '<｜tool▁output▁begin｜>' + (message.content or '') + '<｜tool▁output▁end｜>' -}}
{%- else -%}{{- (message.content or '') -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{%- if messages and messages[-1].role == 'tool' -%}{%- elif thinking is defined and thinking -%}{{- '<｜Assistant｜><think>' -}}{%- else -%}{{- '<｜Assistant｜></think>' -}}{%- endif -%}
{%- endif -%}
"""
)

_PY = (
    r"{%- macro py(v) -%}{%- if v is sameas true -%}True{%- elif v is sameas false -%}False{%- elif v is none -%}None"
    r"{%- else -%}{{- v | tojson -}}{%- endif -%}{%- endmacro -%}"
)
GEMMA3 = (
    _PY
    + _HEAD
    + r"""
{{- '<bos>' -}}
{%- set ns.first = true -%}
{%- for message in messages -%}
{%- if loop.index0 < ns.start -%}
{%- elif message.role == 'assistant' -%}
{{- '<start_of_turn>model\n' + (message.content or '') -}}
{%- if message.tool_calls -%}
{%- if message.content -%}{{- '\n' -}}{%- endif -%}
{{- '```tool_code\n' -}}
{%- for call in message.tool_calls -%}"""
    + _FN
    + _ARGS
    + r"""
{{- fn.name + '(' -}}{%- for key, value in args.items() -%}{{- key + '=' + py(value) -}}{%- if not loop.last -%}{{- ', ' -}}{%- endif -%}{%- endfor -%}{{- ')\n' -}}
{%- endfor -%}
{{- '```' -}}
{%- endif -%}
{{- '<end_of_turn>\n' -}}
{%- elif message.role == 'tool' -%}
{%- if messages[loop.index0 - 1].role != 'tool' -%}{{- '<start_of_turn>user\n' -}}{%- endif -%}
{{- '```tool_output\n' + (message.content or '') + '\n```\n' -}}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}{{- '<end_of_turn>\n' -}}{%- endif -%}
{%- else -%}
{{- '<start_of_turn>user\n' -}}
{%- if ns.first -%}
{%- set ns.first = false -%}
{%- if ns.system -%}{{- ns.system + '\n\n' -}}{%- endif -%}
{%- if tools -%}
{{- 'You may call these functions. To call any, answer with a Python call in a block:\n```tool_code\nNAME(ARGUMENT=VALUE)\n```\n' -}}
{%- for tool in tools -%}{{- (tool | tojson) + '\n' -}}{%- endfor -%}{{- '\n' -}}
{%- endif -%}
{%- endif -%}
{{- (message.content or '') + '<end_of_turn>\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<start_of_turn>model\n' -}}{%- endif -%}
"""
)

_G4 = (
    r"""{%- macro g4(v) -%}{%- if v is string -%}{{- '<|"|>' + v + '<|"|>' -}}"""
    r"""{%- elif v is mapping -%}{{- '{' -}}{%- for k, x in v.items() -%}{{- k + ':' + g4(x) -}}{%- if not loop.last -%},{%- endif -%}{%- endfor -%}{{- '}' -}}"""
    r"""{%- elif v is iterable -%}{{- '[' -}}{%- for x in v -%}{{- g4(x) -}}{%- if not loop.last -%},{%- endif -%}{%- endfor -%}{{- ']' -}}"""
    r"""{%- else -%}{{- v | tojson -}}{%- endif -%}{%- endmacro -%}"""
)
GEMMA4 = (
    _G4
    + _HEAD
    + r"""
{{- '<bos>' -}}
{%- set thinking = enable_thinking is defined and enable_thinking -%}
{%- if ns.system or tools or thinking -%}
{{- '<|turn>system\n' -}}{%- if thinking -%}{{- '<|think|>' -}}{%- endif -%}{{- ns.system -}}
{%- for tool in tools or [] -%}{%- set f = tool.function -%}
{{- '<|tool>declaration:' + f.name + g4({'description': f.description or '', 'parameters': f.parameters or {}}) + '<tool|>' -}}
{%- endfor -%}
{{- '<turn|>\n' -}}
{%- endif -%}
{%- for message in messages -%}
{%- if loop.index0 < ns.start -%}
{%- elif message.role == 'assistant' -%}
{{- '<|turn>model\n' -}}
{%- if message.reasoning_content and loop.index0 > ns.last_user -%}{{- '<|channel>thought\n' + message.reasoning_content + '<channel|>' -}}{%- endif -%}
{{- message.content or '' -}}
{%- for call in message.tool_calls or [] -%}"""
    + _FN
    + _ARGS
    + r"""
{{- '<|tool_call>call:' + fn.name + g4(args) + '<tool_call|>' -}}
{%- endfor -%}
{%- if loop.last or messages[loop.index0 + 1].role != 'tool' -%}{{- '<turn|>\n' -}}{%- endif -%}
{%- elif message.role == 'tool' -%}
{{- '<|tool_response>response:' + (message.name or 'tool') + g4({'value': message.content or ''}) + '<tool_response|>' -}}
{%- if not loop.last and messages[loop.index0 + 1].role != 'tool' -%}{{- '<turn|>\n' -}}{%- endif -%}
{%- else -%}
{{- '<|turn>' + message.role + '\n' + (message.content or '') + '<turn|>\n' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt and not (messages and messages[-1].role == 'tool') -%}{{- '<|turn>model\n' -}}{%- endif -%}
"""
)

HARMONY = (
    _HEAD
    + r"""
{{- '<|start|>system<|message|>You are a helpful assistant.\nReasoning: ' + (reasoning_effort or 'medium') -}}
{{- '\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.' -}}
{%- if tools -%}{{- '\nCalls to these tools must go to the commentary channel: \'functions\'.' -}}{%- endif -%}
{{- '<|end|>' -}}
{%- if ns.system or tools -%}
{{- '<|start|>developer<|message|>' -}}
{%- if ns.system -%}{{- '# Instructions\n\n' + ns.system + ('\n\n' if tools else '') -}}{%- endif -%}
{%- if tools -%}
{{- '# Tools\n\n## functions\n\nnamespace functions {\n' -}}
{%- for tool in tools -%}{%- set f = tool.function -%}
{{- '\n// ' + (f.description or '') + '\ntype ' + f.name + ' = (_: ' + ((f.parameters or {}) | tojson) + ') => any;\n' -}}
{%- endfor -%}
{{- '\n} // namespace functions' -}}
{%- endif -%}
{{- '<|end|>' -}}
{%- endif -%}
{%- for message in messages -%}
{%- if loop.index0 < ns.start -%}
{%- elif message.role == 'assistant' -%}
{%- if message.reasoning_content and loop.index0 > ns.last_user -%}
{{- '<|start|>assistant<|channel|>analysis<|message|>' + message.reasoning_content + '<|end|>' -}}
{%- endif -%}
{%- if message.content and message.tool_calls -%}
{{- '<|start|>assistant<|channel|>commentary<|message|>' + message.content + '<|end|>' -}}
{%- elif message.content -%}
{{- '<|start|>assistant<|channel|>final<|message|>' + message.content + '<|end|>' -}}
{%- endif -%}
{%- for call in message.tool_calls or [] -%}"""
    + _FN
    + r"""
{{- '<|start|>assistant<|channel|>commentary to=functions.' + fn.name + ' <|constrain|>json<|message|>' + (fn.arguments | tojson) + '<|call|>' -}}
{%- endfor -%}
{%- elif message.role == 'tool' -%}
{{- '<|start|>functions.' + (message.name or 'tool') + ' to=assistant<|channel|>commentary<|message|>' + (message.content or '') + '<|end|>' -}}
{%- else -%}
{{- '<|start|>' + message.role + '<|message|>' + (message.content or '') + '<|end|>' -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}{{- '<|start|>assistant' -}}{%- endif -%}
"""
)

CHAT_TEMPLATES = {
    "qwen3_xml": QWEN3_XML,
    "glm45": GLM45,
    "kimi_k2": KIMI_K2,
    "deepseek_v3": DEEPSEEK_V3,
    "gemma3": GEMMA3,
    "gemma4": GEMMA4,
    "harmony": HARMONY,
}
