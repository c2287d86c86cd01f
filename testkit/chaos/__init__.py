"""The chaos driver and its invariant checks, shared by tests/chaos and the cluster harness."""
