"""delivery-policy: the relevance gate and the ActivityGate (when may a result be said?)."""
