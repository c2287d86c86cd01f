"""`python -m services.operation_worker`."""

from libs.serve import serve

from .app import create_app

serve(create_app, service="operation-worker", env_prefix="OPERATION_WORKER", default_port=8091)
