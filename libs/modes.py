"""Demo mode or production: which one a process runs, decided from its environment alone.

The demo (its tools, their sandbox executor and provider process, the mock model and the
demo page's fault panel) is the top-level `demo` package. Nothing in `libs/`, `services/`
or `holdline/` imports it: the core resolves tools, models and extra surface routes by
configured import path, and demo mode adds the paths below to what is configured. This
module is the one place those paths are written.

Demo mode runs when `HOLDLINE_DEMO` says so (`1` on, `0` off), else when no tools of the
user's are configured (`HOLDLINE_TOOLS_FILE` and `HOLDLINE_TOOL_MODULES` both unset).
Every process reads the same environment, so every process decides alike.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

# Tool modules demo mode loads before the user's (`register(registry)` each).
DEMO_TOOL_MODULES: tuple[str, ...] = ("demo.tools",)
# Modules demo mode imports before a model is chosen (they register `mock`).
DEMO_MODEL_MODULES: tuple[str, ...] = ("demo.models",)
# The model demo mode uses when `HOLDLINE_MODEL` is unset and no OpenAI key is set.
DEMO_MODEL = "mock"
# `module:function(router, surface)` route installers demo mode adds to the surface.
DEMO_SURFACE_ROUTES: tuple[str, ...] = ("demo.routes:add_demo_routes",)
# Processes only demo mode starts: (child name, module run with -m, port env prefix, port).
DEMO_PROCESSES: tuple[tuple[str, str, str, int], ...] = (
    ("sandbox-provider", "demo.sandbox_provider", "SANDBOX_PROVIDER", 8090),
)
# What a production process with no tools says (exit 78, like any refused configuration).
NO_TOOLS_HINT = (
    "Production mode needs tools of your own (HOLDLINE_TOOLS_FILE or HOLDLINE_TOOL_MODULES); "
    "to start the demo instead, unset both and HOLDLINE_DEMO, or set HOLDLINE_DEMO=1."
)

def _raw(environ: Mapping[str, str], name: str) -> str:
    """One variable of `environ`, stripped (empty: unset)."""
    return environ.get(name, "").strip()


_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def user_tools_configured(environ: Mapping[str, str]) -> bool:
    """Whether `HOLDLINE_TOOLS_FILE` or `HOLDLINE_TOOL_MODULES` names anything."""
    return bool(
        _raw(environ, "HOLDLINE_TOOLS_FILE") or _listed(_raw(environ, "HOLDLINE_TOOL_MODULES"))
    )


def demo_mode(environ: Mapping[str, str] | None = None) -> bool:
    """Whether the demo runs: `HOLDLINE_DEMO` when set, else no user tools configured.

    Raises ValueError on a `HOLDLINE_DEMO` that is neither on nor off."""
    env = os.environ if environ is None else environ
    # HOLDLINE_DEMO: `1` starts the demo (its tools, sandbox, mock model and fault panel)
    # beside any tools of yours, `0` never; unset: the demo runs only when no tools of
    # yours are configured.
    raw = _raw(env, "HOLDLINE_DEMO").lower()
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    if raw:
        raise ValueError(f"HOLDLINE_DEMO={raw!r}: 1 (demo) or 0 (production)")
    return not user_tools_configured(env)


def _listed(value: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in value.split(",") if n.strip())


def model_modules(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Modules to import before a model is chosen: the demo's in demo mode, then
    `HOLDLINE_MODEL_MODULES` (a user's own adapters register themselves there)."""
    env = os.environ if environ is None else environ
    demo = DEMO_MODEL_MODULES if demo_mode(env) else ()
    # HOLDLINE_MODEL_MODULES: `module,...` imported before the model is chosen (surface and
    # coordinator), so they can register models of their own (`libs.models.register`).
    listed = _listed(_raw(env, "HOLDLINE_MODEL_MODULES"))
    return (*demo, *listed)


def surface_routes(environ: Mapping[str, str] | None = None) -> tuple[str, ...]:
    """Extra surface routes, `module:function(router, surface)` each: the demo's in demo
    mode, then `HOLDLINE_SURFACE_ROUTES`."""
    env = os.environ if environ is None else environ
    demo = DEMO_SURFACE_ROUTES if demo_mode(env) else ()
    # HOLDLINE_SURFACE_ROUTES: `module:function,...` the surface calls as
    # `function(router, surface)` to add routes of their own (after the demo's, in demo mode).
    listed = _listed(_raw(env, "HOLDLINE_SURFACE_ROUTES"))
    return (*demo, *listed)


def describe(environ: Mapping[str, str]) -> str:
    """One line on the mode `environ` runs, for the supervisor's log."""
    if demo_mode(environ):
        extra = " and your tools" if user_tools_configured(environ) else ""
        return (
            f"demo mode: the demo's tools{extra}, the sandbox provider, the mock model "
            "(unless HOLDLINE_MODEL says otherwise) and the fault panel"
        )
    return (
        "production mode: only your tools (HOLDLINE_TOOLS_FILE / HOLDLINE_TOOL_MODULES); "
        "no demo tools, no sandbox provider, no fault panel"
    )
