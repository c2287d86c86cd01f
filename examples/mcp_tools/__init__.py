"""A support desk as an MCP server (FastMCP), imported as holdline tools by a tools file."""
