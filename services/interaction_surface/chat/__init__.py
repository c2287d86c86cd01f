"""The chat side of the surface: its routes (`routes.py`, docs/contract.md §6) and WebSocket
stream (`stream.py`), the turn (`turn_plan.py` pure; `turns.py`, `turn_log.py`,
`turn_deliveries.py` its shell), the model's context and fallback words (`conversation.py`),
and chat as a delivery channel (`channel.py`: the executor's last channel, its fallback)."""
