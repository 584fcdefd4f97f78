"""Asking a running `omlx serve` (for `omlx models` and `omlx cache`): GET with the API key, and a
plain None when nothing answers."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

import httpx

DEFAULT_URL = "http://127.0.0.1:8000"


def add_server_flags(parser, **kwargs) -> None:
    parser.add_argument("--url", help=f"a running `omlx serve` to ask (default {DEFAULT_URL})", **kwargs)
    parser.add_argument("--api-key", help="its API key (default $OMLX_API_KEY)", **kwargs)


@dataclass
class Answer:
    status: int
    data: Optional[dict]  # the JSON body, when it is a JSON object


class Server:
    def __init__(self, url: Optional[str], api_key: Optional[str]):
        self.url = (url or DEFAULT_URL).rstrip("/")
        key = api_key or os.environ.get("OMLX_API_KEY")
        self.headers = {"Authorization": f"Bearer {key}"} if key else {}

    def get(self, path: str, timeout: float = 5.0) -> Optional[Answer]:
        """The server's answer, or None when nothing answers at the URL."""
        try:
            response = httpx.get(self.url + path, headers=self.headers, timeout=timeout)
        except httpx.HTTPError:
            return None
        try:
            data = response.json()
        except ValueError:
            data = None
        return Answer(response.status_code, data if isinstance(data, dict) else None)

    def refused(self, answer: Answer) -> Optional[str]:
        """Why the server would not tell us (None when it did)."""
        if answer.status == 401:
            return f"the server at {self.url} refused the API key (--api-key or OMLX_API_KEY)"
        if answer.status != 200 or answer.data is None:
            return f"the server at {self.url} answered HTTP {answer.status}"
        return None
