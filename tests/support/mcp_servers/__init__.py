"""Real MCP servers for the tests, written with the official SDK (``MCPServer``, the SDK's new name
for FastMCP): ``stdio_server.py`` (run as a child process by omlx) and ``http_server.py`` (a
streamable-HTTP endpoint the tests start themselves)."""
