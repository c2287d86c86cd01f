"""`python -m examples.mcp_tools` (Streamable HTTP on MCP_DESK_PORT, 8096) or `--stdio`."""

from .server import main

main()
