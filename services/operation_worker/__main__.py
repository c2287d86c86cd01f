"""`python -m services.operation_worker`."""

from libs.serve import serve

from .app import create_app
from .settings import SERVICE, Settings

_settings = Settings.from_env()
serve(lambda: create_app(_settings), service=SERVICE, settings=_settings.serve)
