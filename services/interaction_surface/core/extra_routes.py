"""Routes installed by import path (`HOLDLINE_SURFACE_ROUTES`; demo mode adds the demo's).

Each entry is `module:function`; the function is called once, at build time, as
`function(router, surface)` and adds its routes to the app's own router. The surface knows
no installer by name: the demo's fault panel arrives this way, and so can a user's.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterable
from typing import Any

from fastapi import APIRouter

from libs.tools import DeclarationError

from .surface import Surface

RouteInstaller = Callable[[APIRouter, Surface], Any]


class BadRoutes(DeclarationError):
    """An entry that is not `module:function`, or names nothing importable (exit 78)."""


def resolve(path: str) -> RouteInstaller:
    """The installer an entry names; BadRoutes when it cannot be imported."""
    module_name, _, function = path.partition(":")
    if not module_name or not function:
        raise BadRoutes(f"HOLDLINE_SURFACE_ROUTES: {path!r} is not module:function")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise BadRoutes(f"HOLDLINE_SURFACE_ROUTES: cannot import {module_name}: {exc}") from None
    installer = getattr(module, function, None)
    if not callable(installer):
        raise BadRoutes(f"HOLDLINE_SURFACE_ROUTES: {module_name} has no function {function}")
    return installer  # type: ignore[no-any-return]


def add_extra_routes(router: APIRouter, surface: Surface, paths: Iterable[str]) -> None:
    """Install every entry's routes, in order."""
    for path in paths:
        resolve(path)(router, surface)
