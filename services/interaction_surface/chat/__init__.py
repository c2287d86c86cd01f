"""The chat side of the surface: its routes (`routes.py`, docs/contract.md §6), the turn
(`turn_plan.py` pure, `turns.py` its executor), the model's context and fallback words
(`conversation.py`), and delivery routing (`routing.py` pure, `deliveries.py` its executor,
shared with calls and external agents)."""
