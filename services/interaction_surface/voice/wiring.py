"""Wiring the voice channel into the surface: speech ports, sessions for calls, routes (the
phone's, and the browser's WebRTC offer)."""

from __future__ import annotations

import asyncio
import importlib
import logging
from typing import Any

from fastapi import FastAPI
from nats.js.api import KeyValueConfig, StorageType
from nats.js.kv import KeyValue

from libs.bus import Repository
from libs.domain import SessionState
from libs.domain.operation import OpStatus
from libs.events import InteractionEvent

from ..chat.turns import TurnInput
from ..core.surface import Surface
from ..delivery.executor import DeliveryExecutor
from .call import CallRegistry, Review, SpeechPorts
from .channel import CallChannel
from .control_log import ControlLog, control_aggregate
from .engines.base import SpeechError, SpeechToText, TextToSpeech, synthesize
from .engines.deepgram import DeepgramTts
from .engines.deepgram_stt import DeepgramStt
from .engines.espeak import EspeakTts
from .engines.pocketsphinx import PocketsphinxStt
from .engines.registry import register_stt, register_tts, stt_named, tts_named
from .engines.vocabulary import SpeechVocabulary
from .exotel import add_exotel_routes
from .ownership import CallOwnership
from .playback import Settled
from .plivo import add_plivo_routes
from .settings import VoiceSettings
from .silero import load_silero
from .telephony import Telephony, VoiceStarted
from .telnyx import add_telnyx_routes
from .trust import CLAIM_MARGIN_S
from .twilio import add_telephony_routes, opened_session_event
from .vonage import add_vonage_routes
from .webrtc_peer import WebRtcPeers
from .webrtc_routes import add_webrtc_routes

log = logging.getLogger(__name__)


def install_voice(
    app: FastAPI,
    surface: Surface,
    registry: CallRegistry,
    *,
    settings: VoiceSettings,
    ownership: CallOwnership,
    executor: DeliveryExecutor,
) -> Telephony:
    """Include the telephony routes; `start_voice` gives the engines at start-up."""

    async def find_session(session_id: str, token: str | None) -> SessionState:
        return await surface.session_for_token(session_id, token)

    async def open_session(user_id: str, tenant_id: str) -> SessionState:
        agent = surface.settings.default_agent
        env = await surface.append_interaction(
            surface.ids.new("s"), opened_session_event(user_id, tenant_id, agent),
            expect=True, agent=agent,
        )
        state = surface.view.session(env.session_id)
        assert state is not None
        return state

    telephony = Telephony(
        registry=registry,
        find_session=find_session,
        open_session=open_session,
        clock=surface.clock,
        ids=surface.ids,
        ownership=ownership,
        # The executor says on the call whatever is handed over for its session.
        on_attach=executor.watch,
        default_tenant=surface.settings.default_tenant,
        trust=settings.trust,
        voice=settings,
    )
    # One routes module per carrier, each over the same stream loop (`media_stream`).
    add_telephony_routes(app.router, telephony)
    add_telnyx_routes(app.router, telephony)
    add_plivo_routes(app.router, telephony)
    add_vonage_routes(app.router, telephony)
    add_exotel_routes(app.router, telephony)
    # Browser voice (§6d): the same calls over a WebRTC peer connection; its peers close
    # when the surface stops (`Telephony.close_transports`).
    peers = WebRtcPeers()
    add_webrtc_routes(app.router, surface, telephony, peers, settings.webrtc)
    telephony.closers.append(peers.close_all)
    return telephony


PRIMER_TEXT = "hello, how can I help you today"


async def _stt(
    tts: TextToSpeech, name: str, vocabulary: SpeechVocabulary
) -> SpeechToText | None:
    try:
        # Only the local recognizer needs the primer: with a cloud TTS it costs a paid request
        # at start-up, and a failed one must not switch off a cloud recognizer.
        if name == "pocketsphinx":
            primer = await synthesize(tts, PRIMER_TEXT)
            register_stt("pocketsphinx", lambda: PocketsphinxStt(primer, vocabulary))
        return stt_named(name)
    except SpeechError:
        # Calls still work without transcription: VAD, barge-in and deliveries need no STT.
        log.exception("no speech recognition on calls")
        return None


async def _calls_bucket(surface: Surface, ttl_s: float) -> KeyValue:
    """The call-ownership bucket: entries expire unless their owner refreshes them."""
    js = surface.runtime.jetstream
    name = surface.runtime.topology.bucket("calls")
    try:
        return await js.create_key_value(
            KeyValueConfig(
                bucket=name, history=1, ttl=ttl_s, storage=StorageType.FILE,
                replicas=surface.settings.bus.replicas,
            )
        )
    except Exception:  # noqa: BLE001 - declared by another surface with other settings
        return await js.key_value(name)


async def _tickets_bucket(surface: Surface, ttl_s: float) -> KeyValue:
    """Used call tickets: a claim outlives the ticket, so a replay is refused everywhere."""
    js = surface.runtime.jetstream
    name = surface.runtime.topology.bucket("call-tickets")
    try:
        return await js.create_key_value(
            KeyValueConfig(
                bucket=name, history=1, ttl=ttl_s + CLAIM_MARGIN_S, storage=StorageType.FILE,
                replicas=surface.settings.bus.replicas,
            )
        )
    except Exception:  # noqa: BLE001 - declared by another surface with other settings
        return await js.key_value(name)


async def _sweep_forever(executor: DeliveryExecutor, ownership: CallOwnership) -> None:
    """Start-up sweep, then one per TTL: calls whose owner died stop holding deliveries."""
    while True:
        try:
            await executor.sweep()
        except Exception:
            log.exception("delivery sweep failed")
        await asyncio.sleep(ownership.ttl_s)


async def start_ownership(
    telephony: Telephony, surface: Surface, executor: DeliveryExecutor
) -> asyncio.Task[None]:
    """Open the shared call bucket (calls are claimed there from now on) and start the
    sweep of dead owners' calls; returns the sweep's task.

    `HOLDLINE_CALL_OWNER_TTL_S` (10): how long a killed surface's calls still look alive.
    """
    ownership = telephony.ownership
    ownership.open(await _calls_bucket(surface, ownership.ttl_s))
    return asyncio.create_task(_sweep_forever(executor, ownership))


async def start_voice(
    telephony: Telephony,
    surface: Surface,
    executor: DeliveryExecutor,
    channel: CallChannel,
    vocabulary: SpeechVocabulary,
) -> VoiceStarted:
    """Engines, buckets and the turn hook, once the surface's turns exist.

    `HOLDLINE_SPEECH_MODULES` names modules that register extra engines first; the offline
    recognizer is built for `vocabulary` (the declared tools' names and phrases).
    """
    settings = telephony.voice
    # Built in first, so a user's module may still replace it.
    register_tts("espeak", lambda: EspeakTts(voice=settings.tts_voice, wpm=settings.tts_wpm))
    register_tts("deepgram", lambda: DeepgramTts(settings.deepgram_config()))
    register_stt("deepgram", lambda: DeepgramStt(settings.deepgram_config()))
    for name in settings.speech_modules:
        importlib.import_module(name)
    rt = surface.runtime
    # The start-up check: every misconfiguration of the phone edge, said once.
    for note in [*settings.carriers.telnyx.problems(), *settings.carriers.plivo.problems()]:
        # A carrier not in use needs no key: said, not warned about.
        log.info("telephony: %s", note)
    for problem in telephony.trust.problems():
        log.warning("telephony: %s", problem)
    tickets = await _tickets_bucket(surface, telephony.trust.ticket_ttl_s)
    sweeper = await start_ownership(telephony, surface, executor)

    async def record(session_id: str, event: InteractionEvent, **ids: Any) -> None:
        await surface.append_interaction(session_id, event, expect=False, **ids)

    control = ControlLog(
        Repository(
            rt.store, control_aggregate(rt.topology), clock=surface.clock, ids=surface.ids
        ),
        rt.topology, clock=surface.clock, ids=surface.ids,
    )

    async def turn(
        session: SessionState,
        text: str,
        client_turn_id: str | None = None,
        review: Review | None = None,
    ) -> tuple[str, str, str, tuple[str, ...]]:
        assert surface.turns is not None
        current = surface.view.session(session.session_id) or session
        answer = await surface.turns.handle(
            TurnInput(
                session=current, text=text, client_turn_id=client_turn_id, channel="voice",
                review=review,
            )
        )
        reply = answer["reply"]
        attached = tuple(answer.get("attached_delivery_ids", ()))
        return answer["turn_id"], reply["response_id"], reply["text"], attached

    async def settle_attached(_session_id: str, ids: tuple[str, ...], settled: Settled) -> None:
        for delivery_id in ids:
            await channel.settle_voice(delivery_id, settled, write=False, within_reply=True)

    def delivery_texts(ids: tuple[str, ...]) -> dict[str, str]:
        states = (surface.view.deliveries.get(d) for d in ids)
        return {s.delivery_id: s.text for s in states if s is not None}

    def awaiting_confirmation(session_id: str) -> bool:
        return any(
            op.status is OpStatus.AWAITING_CONFIRMATION
            for op in surface.view.session_operations(session_id)
        )

    vad = settings.vad
    if vad.detector == "silero":
        # At start-up: a missing model fails the start, not the first call.
        load_silero(settings.vad.model_path)
    tts = tts_named(settings.tts)
    ports = SpeechPorts(
        tts=tts,
        stt=await _stt(tts, settings.stt, vocabulary),
        vad=vad,
        record=record,
        append_control=control.append,
        turn=turn,
        settle_attached=settle_attached,
        delivery_texts=delivery_texts,
        awaiting_confirmation=awaiting_confirmation,
        dtmf_pause_ms=settings.dtmf_pause_ms,
        playout_lead_ms=settings.playout_lead_ms,
        floor=settings.floor,
    )
    return VoiceStarted(ports=ports, tickets=tickets, sweeper=sweeper)
