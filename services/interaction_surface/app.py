"""interaction-surface: the only component that speaks to users."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.responses import HTMLResponse

from libs.bus import Context
from libs.problems import install_problem_handlers
from libs.service import Runtime, create_service_app

from .settings import Settings

_PAGE = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>holdline</title></head>
<body><h1>holdline</h1><p>The interaction surface is running.</p></body></html>"""


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the surface's app."""
    settings = settings or Settings.from_env()
    runtime = Runtime(
        name="interaction-surface",
        settings=settings.bus,
        publishes=(Context.INTERACTION, Context.CONTROL, Context.OPERATIONS, Context.BATCHES),
    )
    app = create_service_app(runtime, title="holdline interaction-surface")
    install_problem_handlers(app)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def index() -> str:
        return _PAGE

    return app
