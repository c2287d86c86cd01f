"""Operator tools behind the `holdline` command: dead letters, manual resolution, rebuilds."""
