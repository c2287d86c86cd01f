"""The demo: a fenced layer on top of holdline, never imported by the core.

Its tools (`tools`, with their sandbox executor in `sandbox`), their system of record
(`sandbox_provider`, a process of its own), the mock model (`models`) and the demo page's
fault panel (`routes`). Demo mode (`libs.modes`) reaches them by import path only; data the
demo's channels need (its spoken vocabulary, say) belongs here too, as modules of their own.
"""
