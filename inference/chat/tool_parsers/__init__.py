"""Tool-call formats of model families, and which one a model writes.

One module per kind of format (``json_formats``, ``xml_formats``, ``token_formats``, ``gemma``,
``harmony``); ``registry.FORMATS`` holds one instance of each by name, the names the
``tool_parser`` setting of a model takes. ``select`` states the rule that picks a model's format.
"""

from .base import Schemas, ToolCall, ToolFormat, new_tool_call
from .registry import FORMATS
from .select import detect_tool_format

__all__ = ["FORMATS", "Schemas", "ToolCall", "ToolFormat", "detect_tool_format", "new_tool_call"]
