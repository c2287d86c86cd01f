"""Runnable examples outside the core: a user's own tools, and agents on holdline.

`tests/tools` and `tests/integrations` import them as a user's code would be imported.
"""
