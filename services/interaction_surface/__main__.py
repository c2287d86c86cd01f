"""`python -m services.interaction_surface`."""

import sys
from typing import NoReturn

from fastapi import FastAPI

from libs.serve import EXIT_CONFIG, serve

from .app import create_app
from .settings import Misconfigured, Settings
from .voice.trust import TelephonyMisconfigured


def _refuse(exc: Exception) -> NoReturn:
    # Refuse to start, with the reason on one line (a crash loop in Kubernetes says why);
    # the supervisor does not restart a configuration it would refuse again.
    sys.stderr.write(f"interaction-surface: refusing to start: {exc}\n")
    sys.stderr.flush()
    raise SystemExit(EXIT_CONFIG) from None


try:
    _settings = Settings.from_env()
except (TelephonyMisconfigured, Misconfigured) as exc:
    _refuse(exc)


def _app() -> FastAPI:
    try:
        return create_app(_settings)
    except (TelephonyMisconfigured, Misconfigured) as exc:
        _refuse(exc)


# The surface applies its own trusted-proxy list (HOLDLINE_TRUSTED_PROXIES) and needs the
# real peer to tell a local request from a proxied one, so uvicorn must not rewrite it.
serve(
    _app,
    service="interaction-surface",
    settings=_settings.serve,
    proxy_headers=False,
)
