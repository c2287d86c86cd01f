"""interaction-surface: the only component that speaks to users; its composition root.

`create_app` builds every part once, in dependency order, and passes each what it needs:
the live view and the one write path over it (`core/`), the three delivery channels (a
call, an external agent, chat: the routing order, chat last as the fallback) and the
delivery executor over them (`delivery/`), then the channels' routes. Only what needs the
broker connection waits for it (`start_parts`, `start_voice`).

Start-up: connect and declare (Runtime), follow the five event streams into the live view
and the operations stream into admission's load view, wait until both caught up, then
serve. The delivery consumer waits for the view too, so nothing is decided on a partial
picture.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import httpx
from fastapi import FastAPI
from fastapi.responses import FileResponse
from fastapi.staticfiles import StaticFiles

from libs import metrics
from libs.admission import Admission, LoadView
from libs.bus import ConnectedEventStore
from libs.clock import RANDOM_IDS, SYSTEM_CLOCK, Clock, Ids
from libs.config import ModelSettings
from libs.consumers import Consumers
from libs.models import model_for
from libs.models.interface import ConversationModel
from libs.openapi import publish
from libs.problems import install_problem_handlers
from libs.roles import published_contexts
from libs.service import Runtime, create_service_app
from libs.tools import ToolRegistry, default_registry

from .agent.acks import AgentAcks
from .agent.bodies import AGENT_BODIES
from .agent.channel import AgentChannel
from .agent.connections import AgentRegistry
from .agent.records import AgentRecords
from .agent.routes import AgentApi, add_agent_routes
from .agent.socket import add_agent_socket
from .agent.tool_calls import ToolCalls
from .chat.channel import ChatChannel
from .chat.routes import BODIES, add_chat_routes
from .chat.turns import Turns
from .consumers import CONSUMERS, PUBLICATIONS, SERVICE
from .consumers import DELIVERIES as DELIVERIES_CONSUMER
from .core.extra_routes import add_extra_routes
from .core.http import install
from .core.sockets import SocketAuth
from .core.surface import Started, Surface
from .core.view import SurfaceView
from .core.writes import SurfaceWrites
from .delivery.executor import DeliveryExecutor
from .identity import JwtVerifier
from .mcp.channel import McpChannel
from .mcp.handlers import McpHandlers
from .mcp.mount import install_mcp
from .mcp.projection import Tasks
from .settings import Misconfigured, Settings
from .voice.call import CallRegistry
from .voice.channel import CallChannel
from .voice.ownership import CallOwnership
from .voice.speech_vocabulary import vocabulary_of
from .voice.webrtc_routes import WEBRTC_BODIES
from .voice.wiring import install_voice, start_voice

STATIC = Path(__file__).parent / "static"


def conversation_model(
    modules: tuple[str, ...] = (), settings: ModelSettings | None = None
) -> ConversationModel:
    """The model the settings name (`HOLDLINE_MODEL`), after importing `modules`
    (`HOLDLINE_MODEL_MODULES`).

    Those modules register extra models (a user's own adapter) with `libs.models.register`.
    """
    return model_for(settings or ModelSettings(), modules)


def start_parts(
    runtime: Runtime,
    surface: Surface,
    load_view: LoadView,
    registry: ToolRegistry,
    model: ConversationModel,
) -> Started:
    """Build, in dependency order, the parts that need the broker connection."""
    # An MCP server down at start is asked again until it answers (its tools are refused at
    # admission meanwhile).
    registry.open_sources()
    clock: Clock = surface.clock
    ids: Ids = surface.ids
    admission = Admission(
        runtime.store,
        runtime.topology,
        registry,
        load_view,
        runtime.bucket("intents"),
        clock=clock,
        ids=ids,
    )
    turns = Turns(
        view=surface.view,
        writes=surface.writes,
        admission=admission,
        load_view=load_view,
        model=model,
        registry=registry,
        settings=surface.settings,
        clock=clock,
        ids=ids,
    )
    # Erased sessions whose business settled since (here or before a restart) are purged.
    surface.sweeper.start()
    return Started(
        admission=admission,
        turns=turns,
        tool_calls=ToolCalls(surface, admission, registry),
        http=httpx.AsyncClient(base_url=surface.settings.provider_url, timeout=5.0),
    )


@dataclass(frozen=True, slots=True)
class DeliveryParts:
    """The delivery executor over its channels, and what the routes take of them."""

    executor: DeliveryExecutor
    call: CallChannel
    agent_api: AgentApi
    mcp: McpHandlers


def delivery_parts(
    surface: Surface, calls: CallRegistry, ownership: CallOwnership
) -> DeliveryParts:
    """The four delivery channels and the executor over them, in dependency order.

    The routing order is the channels' order: an MCP task's closing (its result), a call
    held here (or by another live surface), an external agent, then chat, which takes
    whatever the others do not.
    """
    view, writes, clock, ids = surface.view, surface.writes, surface.clock, surface.ids
    call_channel = CallChannel(view, writes, calls, ownership, clock=clock, ids=ids)
    agents = AgentRegistry()
    records = AgentRecords(view, writes, clock=clock, ids=ids)
    agent_channel = AgentChannel(surface, writes, records, agents, ownership=ownership)
    chat_channel = ChatChannel(
        view, writes, clock=clock, turn_timeout_s=surface.settings.turn_timeout_s
    )
    tasks = Tasks(view)
    mcp_channel = McpChannel(tasks, writes, records)
    executor = DeliveryExecutor(view, (mcp_channel, call_channel, agent_channel, chat_channel))
    agent_api = AgentApi(
        surface=surface,
        channel=agent_channel,
        acks=AgentAcks(surface, writes, records, agents),
        records=records,
        executor=executor,
    )
    mcp = McpHandlers(surface, agent_api, tasks, mcp_channel)
    return DeliveryParts(executor=executor, call=call_channel, agent_api=agent_api, mcp=mcp)


def declared_tools(settings: Settings) -> ToolRegistry:
    """The tool registry, refused (Misconfigured) when the default agent is not declared."""
    registry = default_registry(settings=settings.tools)
    if registry.agents and settings.default_agent not in registry.agents:
        raise Misconfigured(
            f"HOLDLINE_DEFAULT_AGENT={settings.default_agent} is not a declared agent"
        )
    return registry


def create_app(settings: Settings | None = None) -> FastAPI:
    """Build the surface's app."""
    settings = settings or Settings.from_env()
    metrics.time_turn_phases(settings.turn_phases)
    load_view = LoadView()
    calls = CallRegistry()
    # The process's one clock and id factory: every part below gets these two.
    clock, ids = SYSTEM_CLOCK, RANDOM_IDS
    # The composition root: every part is built here, in dependency order, before start-up;
    # only what needs the broker connection waits for it (`start_parts` and `start_voice`,
    # each given in one step).
    # Before anything starts: a bad tool declaration stops the service (DeclarationError).
    registry = declared_tools(settings)
    view = SurfaceView(label=registry.label)
    runtime = Runtime(
        name=SERVICE, settings=settings.bus, publishes=published_contexts(PUBLICATIONS)
    )
    # The one write path: repositories over the runtime's event store, reading the view.
    writes = SurfaceWrites(
        view, ConnectedEventStore(runtime), runtime.topology, clock=clock, ids=ids
    )
    surface = Surface(
        runtime=runtime, view=view, settings=settings, writes=writes, clock=clock, ids=ids,
        jwt=JwtVerifier(settings.jwt) if settings.jwt.configured else None,
        agents=registry.agents,
    )
    # Calls and agent connections are owned in one bucket (same owner, same owner-lost
    # sweep); it opens when voice starts.
    ownership = CallOwnership(ids.new("surface"), settings.voice.call_owner_ttl_s)
    delivery = delivery_parts(surface, calls, ownership)
    executor, call_channel, agent_api = delivery.executor, delivery.call, delivery.agent_api
    model = conversation_model(settings.model_modules, settings.model)
    # Its one durable consumer, declared in consumers.py, bound once the executor exists.
    consumers = Consumers(CONSUMERS, {DELIVERIES_CONSUMER.role: executor.on_delivery})

    async def on_start() -> None:
        js = runtime.jetstream
        # One follower of the operations stream for both: the view feeds the load view.
        view.operation_feeds.append(load_view.apply)
        await view.follow(js, runtime.topology, heartbeat_s=runtime.timings.follow_heartbeat_s)
        await view.caught_up.wait()
        load_view.caught_up.set()
        metrics.initialise_tools(t.name for t in registry.tools(include_internal=True))
        metrics.initialise_deliveries()
        surface.started = start_parts(runtime, surface, load_view, registry, model)
        # What the offline recognizer may hear: the declared tools' names and phrases.
        telephony.started = await start_voice(
            telephony, surface, executor, call_channel,
            vocabulary_of(registry.tools()),
        )
        await mcp_endpoint.start()

    async def on_stop() -> None:
        if telephony.started is not None:
            # Browser calls end first (their ends recorded while the bus is open).
            await telephony.close_transports()
            telephony.started.sweeper.cancel()
        await mcp_endpoint.stop()
        await surface.sweeper.stop()
        if surface.started is not None:
            # Answers already returned are recorded (turn replies) and stored (Agent API
            # answers) while the bus is still open.
            await surface.started.turns.flush()
            await surface.started.tool_calls.flush()
        await view.close()
        if surface.started is not None:
            await surface.started.http.aclose()

    app = create_service_app(
        runtime, consumers, title="holdline interaction-surface", on_start=on_start,
        on_stop=on_stop,
    )
    install_problem_handlers(app)
    install(app)
    # The channels' routes (this order is the OpenAPI document's): chat, the routes installed
    # by import path (the demo's fault proxy in demo mode), the Agent API, then voice. Each is
    # added to the app's own router, not included: FastAPI walks included routers (and sums
    # their route versions) on every request.
    # One rule for both sockets: a ticket, a header, or a URL token from a local caller.
    add_chat_routes(app.router, surface, sockets := SocketAuth(surface))
    add_extra_routes(app.router, surface, settings.routes)
    add_agent_routes(app.router, agent_api)
    add_agent_socket(app.router, agent_api, sockets)
    telephony = install_voice(
        app, surface, calls, settings=settings.voice, ownership=ownership, executor=executor
    )
    publish(app, {**BODIES, **AGENT_BODIES, **WEBRTC_BODIES})
    # MCP (§6c): Streamable HTTP at /mcp, the same sessions and admission as the Agent API
    # (after `publish`: it adds its route to the document `publish` serves).
    mcp_endpoint = install_mcp(app, delivery.mcp, app.version)

    _demo_page(app)
    return app


def _demo_page(app: FastAPI) -> None:
    """`/`: the live demo page, and its static files."""

    @app.get("/", include_in_schema=False)
    async def index() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
