"""operation-worker: runs admitted operations against their systems of record, once per intent.

Plane: operation plane (see services/README.md).
"""

from .app import create_app
from .domain import RetryBudget, after_attempt, after_lookup, backoff_s, policy
from .handlers import Worker
from .settings import Settings

__all__ = [
    "RetryBudget",
    "Settings",
    "Worker",
    "after_attempt",
    "after_lookup",
    "backoff_s",
    "create_app",
    "policy",
]
