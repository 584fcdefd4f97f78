"""``FORMATS``: one instance of each tool-call format by name, the names the ``tool_parser``
setting of a model takes."""

from __future__ import annotations

from .gemma import Gemma3Format, Gemma4Format
from .harmony import HarmonyFormat
from .json_formats import HermesFormat, Llama3Format, MistralFormat
from .token_formats import DeepSeekV3Format, KimiK2Format
from .xml_formats import Glm45Format, Qwen3XmlFormat

FORMATS = {
    f.name: f
    for f in (
        HermesFormat(),
        Llama3Format(),
        MistralFormat(),
        Qwen3XmlFormat(),
        Glm45Format(),
        KimiK2Format(),
        DeepSeekV3Format(),
        Gemma3Format(),
        Gemma4Format(),
        HarmonyFormat(),
    )
}
