"""Wiring the voice channel into the surface: speech ports, sessions for calls, routes."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI

from libs.config import env_str
from libs.domain import SessionState
from libs.events import InteractionEvent

from .api import Surface
from .auth import new_id
from .deliveries import DeliveryExecutor
from .playback import Settled
from .speech import (
    SpeechError,
    SpeechToText,
    TextToSpeech,
    register_stt,
    stt_from_env,
    synthesize,
    tts_from_env,
)
from .stt import PocketsphinxStt
from .telephony import (
    CallRegistry,
    SpeechPorts,
    Telephony,
    append_control,
    build_telephony_router,
    opened_session_event,
    telephony_settings,
)
from .turns import TurnInput
from .vad import VadConfig

log = logging.getLogger(__name__)


def install_voice(app: FastAPI, surface: Surface, registry: CallRegistry) -> Telephony:
    """Include the telephony routes; `start_voice` fills in the engines at start-up."""
    auth_token, public_url = telephony_settings()

    async def find_session(session_id: str, token: str | None) -> SessionState:
        return await surface.session_for_token(session_id, token)

    async def open_session(user_id: str, tenant_id: str) -> SessionState:
        agent = surface.settings.default_agent
        env = await surface.append_interaction(
            new_id("s"), opened_session_event(user_id, tenant_id, agent),
            expect=True, agent=agent,
        )
        state = surface.view.session(env.session_id)
        assert state is not None
        return state

    telephony = Telephony(
        registry=registry,
        ports=None,
        find_session=find_session,
        open_session=open_session,
        default_tenant=surface.settings.default_tenant,
        auth_token=auth_token,
        public_url=public_url,
    )
    app.include_router(build_telephony_router(telephony))
    return telephony


PRIMER_TEXT = "hello, how can I help you today"


async def _stt(tts: TextToSpeech) -> SpeechToText | None:
    try:
        primer = await synthesize(tts, PRIMER_TEXT)
        register_stt("pocketsphinx", lambda: PocketsphinxStt(primer))
        return stt_from_env()
    except SpeechError:
        # Calls still work without transcription: VAD, barge-in and deliveries need no STT.
        log.exception("no speech recognition on calls")
        return None


async def start_voice(
    telephony: Telephony, surface: Surface, executor: Callable[[], DeliveryExecutor | None]
) -> None:
    """Engines and the turn hook, once the surface's turns exist.

    `HOLDLINE_SPEECH_MODULES` names modules that register extra engines first.
    """
    for name in env_str("HOLDLINE_SPEECH_MODULES", "").split(","):
        if name.strip():
            importlib.import_module(name.strip())
    rt = surface.runtime

    async def record(session_id: str, event: InteractionEvent, **ids: Any) -> None:
        await surface.append_interaction(session_id, event, expect=False, **ids)

    async def control(session_id: str, event: Any, **ids: Any) -> None:
        await append_control(rt.jetstream, rt.topology, session_id, event, **ids)

    async def turn(session: SessionState, text: str) -> tuple[str, str, str, tuple[str, ...]]:
        assert surface.turns is not None
        current = surface.view.session(session.session_id) or session
        answer = await surface.turns.handle(
            TurnInput(session=current, text=text, client_turn_id=None, channel="voice")
        )
        reply = answer["reply"]
        attached = tuple(answer.get("attached_delivery_ids", ()))
        return answer["turn_id"], reply["response_id"], reply["text"], attached

    async def settle_attached(_session_id: str, ids: tuple[str, ...], settled: Settled) -> None:
        found = executor()
        if found is None:
            return
        for delivery_id in ids:
            await found.settle_voice(delivery_id, settled, write=False)

    tts = tts_from_env()
    telephony.ports = SpeechPorts(
        tts=tts,
        stt=await _stt(tts),
        vad=VadConfig.from_env(),
        record=record,
        append_control=control,
        turn=turn,
        settle_attached=settle_attached,
    )
