"""Build tools of the repository (not installed with the runtime): `python -m devtools.proto`
writes and checks `proto/` and the generated parts of the docs."""
