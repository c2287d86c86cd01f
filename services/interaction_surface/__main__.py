"""`python -m services.interaction_surface`."""

from libs.serve import serve

from .app import create_app

serve(
    create_app, service="interaction-surface", env_prefix="INTERACTION_SURFACE", default_port=8080
)
