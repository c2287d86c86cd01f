"""Benchmarks: not tests; each writes its figures to bench/results/<name>.json."""
