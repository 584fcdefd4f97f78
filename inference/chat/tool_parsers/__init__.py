"""Tool-call formats of model families, and which one a model writes.

One module per kind of format (``json_formats``, ``xml_formats``, ``token_formats``, ``gemma``,
``harmony``); ``FORMATS`` holds one instance of each by name, the names the ``tool_parser``
setting of a model takes. ``select`` states the rule that picks a model's format.
"""
from .base import Schemas, ToolCall, ToolFormat, new_tool_call
from .gemma import Gemma3Format, Gemma4Format
from .harmony import HarmonyFormat
from .json_formats import HermesFormat, Llama3Format, MistralFormat
from .token_formats import DeepSeekV3Format, KimiK2Format
from .xml_formats import Glm45Format, Qwen3XmlFormat

FORMATS = {f.name: f for f in (HermesFormat(), Llama3Format(), MistralFormat(), Qwen3XmlFormat(), Glm45Format(),
                               KimiK2Format(), DeepSeekV3Format(), Gemma3Format(), Gemma4Format(),
                               HarmonyFormat())}

from .select import detect_tool_format  # noqa: E402  (select reads FORMATS)

__all__ = ["FORMATS", "Schemas", "ToolCall", "ToolFormat", "detect_tool_format", "new_tool_call"]
