"""The official OpenAI and Anthropic SDKs on a live server, as the live tests hold them: strict
response validation (a reply the SDK's types do not accept fails the test), no retries (a failure
shows at once), a timeout of 120 s unless told. Each client is a context manager."""

import anthropic
import openai


def openai_client(url, api_key="unused", timeout=120, strict=True) -> openai.OpenAI:
    """The OpenAI SDK on the server at ``url`` (its /v1); ``strict=False``: the SDK's default
    lenient validation."""
    return openai.OpenAI(
        base_url=url + "/v1",
        api_key=api_key,
        max_retries=0,
        timeout=timeout,
        _strict_response_validation=strict,
    )


def anthropic_client(url, api_key="unused", timeout=120) -> anthropic.Anthropic:
    """The Anthropic SDK on the server at ``url``."""
    return anthropic.Anthropic(
        base_url=url, api_key=api_key, max_retries=0, timeout=timeout, _strict_response_validation=True
    )
