"""Runnable examples; `tests/integrations` imports their scripted services."""
