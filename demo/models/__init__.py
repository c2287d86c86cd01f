"""The demo's mock model; importing this package registers it as `mock` (`libs.models`).

Demo mode imports it before a model is chosen (`libs.modes.DEMO_MODEL_MODULES`); elsewhere,
`HOLDLINE_MODEL_MODULES=demo.models` does the same.
"""

from libs.models import register

from .mock import MockModel

register("mock", MockModel)

__all__ = ["MockModel"]
