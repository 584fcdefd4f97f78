"""omlx's own routes, not in any vendor's API: model management, MCP servers, GET /health."""
