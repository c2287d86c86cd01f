"""What every channel of the surface shares: the live view (`view.py`, `session_log.py`), the
one write path over it (`writes.py`), the `Surface` (`surface.py`) and its HTTP plumbing
(`http.py`), session locks, rate limits, stored answers (`answers.py`), the pure snapshot and
diagnosis, and the routes installed by import path (`extra_routes.py`: the demo's fault
proxy in demo mode)."""
