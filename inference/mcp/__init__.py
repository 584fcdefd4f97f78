"""MCP (Model Context Protocol) tools for omlx: the servers of ``--mcp-config`` started with
`omlx serve`, supervised (a crashed server is restarted with backoff), their tools listed in
OpenAI's tool form and executed for the API (/v1/mcp/...) and the console's chat.

- ``config``: the ``mcpServers`` JSON (Claude Desktop's format) as ``ServerSpec`` rows.
- ``sdk``: the optional `mcp` package (``pip install 'omlx[mcp]'``) and the message when it is missing.
- ``connection``: one server's supervised connection (state, tools, calls).
- ``manager``: every server, on an event loop of its own thread; the process-wide instance.
- ``tools``: names (``server__tool``), OpenAI tool schemas, results as text.
"""
