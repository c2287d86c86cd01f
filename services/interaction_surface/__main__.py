"""`python -m services.interaction_surface`."""

import sys

from libs.serve import serve

from .app import create_app
from .twilio_trust import TelephonyMisconfigured

try:
    app = create_app()
except TelephonyMisconfigured as exc:
    # Refuse to start, with the reason on one line (a crash loop in Kubernetes says why).
    sys.exit(f"interaction-surface: {exc}")
# The surface applies its own trusted-proxy list (HOLDLINE_TRUSTED_PROXIES) and needs the
# real peer to tell a local request from a proxied one, so uvicorn must not rewrite it.
serve(
    app,
    service="interaction-surface",
    env_prefix="INTERACTION_SURFACE",
    default_port=8080,
    proxy_headers=False,
)
