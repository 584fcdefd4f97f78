"""OpenAI's Responses API: /v1/responses and its stored responses."""
