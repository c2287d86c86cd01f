"""Process launchers and drivers shared by the tests and the benchmarks; not part of the runtime."""
