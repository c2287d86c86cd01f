"""Holdline on a three-node JetStream cluster with nodes killed, paused and wiped."""
