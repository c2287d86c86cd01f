"""MCP: holdline as a durable MCP server whose calls are tasks (docs/guides/mcp.md, §6c).

`/mcp` serves MCP Streamable HTTP from the `mcp` SDK on the surface's own app
(`mount.py`), authenticates each request to a holdline session (`auth.py`), lists the
session's tools (`tools.py`), admits each `tools/call` through the Agent API's admission
(`handlers.py`, over `agent/tool_calls.py`) and answers the tasks extension's
`tasks/get`/`tasks/update`/`tasks/cancel` from the session's events (`projection.py`, pure
mapping in `tasks.py`), and on a 2025-11-25 connection that version's tasks API
(`legacy.py`, its words in `legacy_tasks.py`); `subscriptions/listen` carries
`tools/list_changed` after a handoff (`listen.py`). The closing of a tasked call is its
batch's one delivery, on the `mcp` channel (`channel.py`).
"""
