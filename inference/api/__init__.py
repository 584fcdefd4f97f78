"""The REST API (django-ninja), mounted by inference/urls.py, grouped by API as vLLM's
entrypoints are: openai/ (chat, completions, embeddings), anthropic/ (Messages), responses/
(OpenAI's Responses), omlx/ (omlx's own routes: models, MCP, health) and common/ (what they
share: errors, auth, the body parser, sampling checks, the checked chat job, the model check and
the one streaming path with its Formatter interface)."""
