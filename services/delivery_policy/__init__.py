"""delivery-policy: the relevance gate and the ActivityGate (when may a result be said?).

Plane: coordination plane (see services/README.md).
"""
