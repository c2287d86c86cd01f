"""The Agent API (docs/contract.md §6b): HTTP routes (`routes.py`, `bodies.py`), the agent's
WebSocket (`socket.py`), the agent channel (`connections.py`, `records.py`, `acks.py`,
`channel.py`) and tool calls (`tool_calls.py`, `tool_formats.py`, `tool_outputs.py`)."""
