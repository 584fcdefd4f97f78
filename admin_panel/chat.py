"""The Chat page's data: what the form asks for (``ChatRequest``, checked here so that a bad value is
a message on the page) and what each answer reports (``AnswerStats``). The websocket side is
admin_panel/consumers/chat.py."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, List, Optional

MAX_MESSAGE_CHARS = 100_000


@dataclass
class ChatRequest:
    model: str  # a servable model id (an alias is resolved to it)
    message: str
    system: str = ""
    temperature: Optional[float] = None  # None: the model's setting, else the engine's default
    max_tokens: Optional[int] = None
    use_tools: bool = False  # offer the MCP servers' tools (admin_panel/chat_tools.py)
    tool_choice: str = "auto"  # "required": the first round must call a tool

    def params(self) -> dict:
        """SamplingParams fields of the job (unset ones keep the model's defaults)."""
        values = {"temperature": self.temperature, "max_tokens": self.max_tokens}
        return {k: v for k, v in values.items() if v is not None}

    def messages(self, history: List[dict]) -> List[dict]:
        """The chat messages of the job: the system prompt, the conversation so far, this message."""
        system = [{"role": "system", "content": self.system}] if self.system.strip() else []
        return system + history + [{"role": "user", "content": self.message}]


def parse_form(data: dict, resolve: Callable[[str], Optional[str]]) -> ChatRequest:
    """The ws-send form's fields as a ChatRequest; ValueError says what is wrong, for the page.
    ``resolve`` maps a model name to a servable id (None: not servable)."""
    name = _text(data, "model").strip()
    if not name:
        raise ValueError("Pick a model.")
    model = resolve(name)
    if model is None:
        raise ValueError(
            f"The model '{name}' cannot be served (it is not in the model directory, or "
            "not a model omlx can run)."
        )
    message = _text(data, "message")
    if not message.strip():
        raise ValueError("The message is empty.")
    if len(message) > MAX_MESSAGE_CHARS:
        raise ValueError(f"The message is longer than {MAX_MESSAGE_CHARS} characters.")
    temperature = _number(data, "temperature", "Temperature")
    if temperature is not None and not 0 <= temperature <= 2:
        raise ValueError("Temperature must be between 0 and 2.")
    max_tokens = _number(data, "max_tokens", "Max tokens")
    if max_tokens is not None and (max_tokens != int(max_tokens) or max_tokens < 1):
        raise ValueError("Max tokens must be a whole number of at least 1.")
    tool_choice = _text(data, "tool_choice").strip() or "auto"
    if tool_choice not in ("auto", "required"):
        raise ValueError("Tool use must be 'auto' or 'required'.")
    return ChatRequest(
        model,
        message,
        _text(data, "system"),
        temperature,
        int(max_tokens) if max_tokens is not None else None,
        use_tools=_text(data, "mcp_tools") in ("on", "true", "1"),
        tool_choice=tool_choice,
    )


def _text(data: dict, key: str) -> str:
    value = data.get(key, "")
    if isinstance(value, list):  # a field sent twice
        value = value[-1] if value else ""
    return value if isinstance(value, str) else str(value)


def _number(data: dict, key: str, label: str) -> Optional[float]:
    text = _text(data, key).strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{label}: '{text}' is not a number.") from None
    if not math.isfinite(value):
        raise ValueError(f"{label}: '{text}' is not a finite number.")
    return value


@dataclass
class AnswerStats:
    """One answer's numbers: where its prompt's KV came from, what it generated, how fast.
    Times are seconds of the server's monotonic clock."""

    prompt_tokens: int
    hot_tokens: int
    cold_tokens: int
    generated_tokens: int
    finish_reason: str
    ttft: Optional[float]  # from the message being sent to the first token (a model load included)
    tokens_per_second: Optional[float]  # decode speed: tokens after the first over their time

    @property
    def computed_tokens(self) -> int:
        return self.prompt_tokens - self.hot_tokens - self.cold_tokens

    @classmethod
    def build(
        cls,
        usage: Optional[dict],
        finish_reason: str,
        sent: float,
        first_token: Optional[float],
        last_token: Optional[float],
    ) -> "AnswerStats":
        usage = usage or {}
        generated = usage.get("completion_tokens", 0)
        speed = None
        if first_token is not None and last_token is not None and generated > 1 and last_token > first_token:
            speed = (generated - 1) / (last_token - first_token)
        return cls(
            usage.get("prompt_tokens", 0),
            usage.get("hot_cached_tokens", 0),
            usage.get("cold_cached_tokens", 0),
            generated,
            finish_reason,
            None if first_token is None else first_token - sent,
            speed,
        )
