"""The chaos driver and its invariant checks, shared by tests/system/chaos and the cluster
harness."""
