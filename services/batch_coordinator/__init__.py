"""batch-coordinator: batch membership, drain detection, one closing delivery per batch.

Plane: coordination plane (see services/README.md).
"""
