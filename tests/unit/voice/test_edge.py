"""The audio edge without a running system: codec, VAD, playback truth, frame parsing."""

from __future__ import annotations

import json

import pytest

from services.interaction_surface.voice.codec import (
    PCM_FRAME_BYTES,
    FrameSplitter,
    downsample_16k_to_8k,
    pcm16_to_ulaw,
    rms,
    silence_ulaw,
    ulaw_ms,
    ulaw_to_pcm16,
    upsample_8k_to_16k,
)
from services.interaction_surface.voice.engines.pocketsphinx import PocketsphinxStt
from services.interaction_surface.voice.engines.vocabulary import arpa, sentences
from services.interaction_surface.voice.floor import FloorConfig, doubtful_values
from services.interaction_surface.voice.playback import PlaybackLedger, heard_prefix, unheard_rest
from services.interaction_surface.voice.twilio import signature_ok, twilio_signature
from services.interaction_surface.voice.twilio_frames import (
    FrameError,
    TwilioAudio,
    TwilioMedia,
    decode_frame,
)
from services.interaction_surface.voice.vad import VadConfig, VadEvent, VoiceActivity
from services.interaction_surface.voice.wiring import PRIMER_TEXT
from testkit.phone import speech
from testkit.speech_corpus import demo_vocabulary


def frames(ulaw: bytes) -> list[bytes]:
    """PCM16 20 ms frames of μ-law audio."""
    return FrameSplitter(PCM_FRAME_BYTES).push(ulaw_to_pcm16(ulaw))


def run_vad(vad: VoiceActivity, ulaw: bytes) -> list[VadEvent]:
    events = []
    for index, frame in enumerate(frames(ulaw), start=1):
        event = vad.feed(frame, index * 20)
        if event is not None:
            events.append(event)
    return events


async def test_codec_round_trip_and_resampling() -> None:
    audio = await speech("one two three", tail_silence_ms=0)
    pcm = ulaw_to_pcm16(audio)
    assert len(pcm) == 2 * len(audio)
    assert rms(pcm) > 300
    again = pcm16_to_ulaw(pcm)
    # μ-law is its own fixed point after one decode/encode.
    assert again == audio
    wide = upsample_8k_to_16k(pcm)
    assert abs(len(wide) - 2 * len(pcm)) <= 4
    assert abs(len(downsample_16k_to_8k(wide)) - len(pcm)) <= 4
    assert ulaw_ms(silence_ulaw(300)) == 300
    assert rms(ulaw_to_pcm16(silence_ulaw(100))) < 10


def test_frame_splitter_keeps_remainders() -> None:
    splitter = FrameSplitter(4)
    assert splitter.push(b"abcdef") == [b"abcd"]
    assert splitter.push(b"gh") == [b"efgh"]
    assert splitter.flush() == b""


async def test_vad_starts_after_min_speech_and_ends_after_silence() -> None:
    config = VadConfig(aggressiveness=2, min_speech_ms=60, endpoint_silence_ms=400)
    audio = silence_ulaw(200) + await speech("please wait a moment", tail_silence_ms=600)
    events = run_vad(VoiceActivity(config), audio)
    # Silero may need a window more than webrtcvad: suspected first, then confirmed.
    assert [e.kind for e in events if e.kind != "suspected"] == ["started", "stopped"]
    started, stopped = [e for e in events if e.kind != "suspected"]
    assert started.at_ms - started.first_voiced_ms >= 60
    assert started.first_voiced_ms >= 180
    assert stopped.at_ms - started.at_ms > 400


async def test_vad_blip_shorter_than_min_speech_is_ignored() -> None:
    voiced = await speech("ah", tail_silence_ms=0)
    # 40 ms of a real voiced sound, well inside the word.
    middle = len(voiced) // 2
    blip = voiced[middle : middle + 320]
    audio = silence_ulaw(200) + blip + silence_ulaw(600)
    config = VadConfig(aggressiveness=2, min_speech_ms=60, endpoint_silence_ms=300)
    assert run_vad(VoiceActivity(config), audio) == []


def scripted(
    pattern: str, config: VadConfig, model: ScriptedModel | None = None
) -> list[tuple[str, int, int]]:
    """Drive the state machine with a voiced/unvoiced pattern, one character per frame."""
    flags = iter(pattern)
    vad = VoiceActivity(config, classifier=lambda _frame: next(flags) == "1", model=model)
    out = []
    for index in range(1, len(pattern) + 1):
        event = vad.feed(b"\0" * PCM_FRAME_BYTES, index * 20)
        if event is not None:
            out.append((event.kind, event.at_ms, event.first_voiced_ms))
    return out


class ScriptedModel:
    """A speech model that says speech (1) or not (0) per frame, as scripted."""

    def __init__(self, pattern: str) -> None:
        self._flags = iter(pattern)

    def feed(self, pcm16: bytes) -> list[float]:
        return [1.0 if next(self._flags) == "1" else 0.0]


def test_vad_state_machine_on_a_clock() -> None:
    config = VadConfig(
        aggressiveness=2, min_speech_ms=60, endpoint_silence_ms=100, detector="webrtc"
    )
    # Two voiced frames (40 ms) are a blip; three (60 ms) start speech.
    assert scripted("0011000000", config) == []
    assert scripted("00111000000", config) == [("started", 100, 40), ("stopped", 200, 40)]
    # A short pause inside speech does not end the turn.
    assert scripted("0111001110000000", config) == [("started", 80, 20), ("stopped", 280, 20)]


def test_silero_detector_suspects_on_energy_and_decides_on_speech() -> None:
    # One model answer per frame here (the real one answers every 32 ms).
    config = VadConfig(
        min_speech_ms=60, endpoint_silence_ms=100, confirm_ms=40, confirm_window_ms=160
    )
    voiced = "0111111111110000000"
    # Voiced but never speech: held at 60 ms, let go at the confirm window.
    assert scripted(voiced, config, ScriptedModel("0" * len(voiced))) == [
        ("suspected", 80, 20), ("rejected", 180, 20),
    ]
    # Speech from the start: confirmed at the minimum, before it needed holding.
    assert scripted(voiced, config, ScriptedModel("0110000000000000000")) == [
        ("started", 80, 20), ("stopped", 340, 20),
    ]
    # Speech a little later: held first, then confirmed.
    assert scripted(voiced, config, ScriptedModel("0001111000000000000")) == [
        ("suspected", 80, 20), ("started", 100, 20), ("stopped", 340, 20),
    ]
    # A short voiced run that ends unconfirmed is let go once it has ended (60 ms of quiet).
    short = "0111100000000"
    assert scripted(short, config, ScriptedModel("0" * len(short))) == [
        ("suspected", 80, 20), ("rejected", 180, 20),
    ]


def test_vad_config_is_validated() -> None:
    with pytest.raises(ValueError, match="aggressiveness"):
        VadConfig(aggressiveness=4)
    with pytest.raises(ValueError, match="one frame"):
        VadConfig(min_speech_ms=10)
    with pytest.raises(ValueError, match="false interruption"):
        VadConfig(false_interruption_ms=-1)


def test_mark_after_clear_is_not_heard() -> None:
    ledger = PlaybackLedger()
    ledger.begin("d1", "your access to github is ready", now_ms=0, delivery_id="d1")
    ledger.add_audio("d1", 2000)
    ledger.sent("d1")
    cut = ledger.clear(now_ms=500, reason="barge_in")
    assert [(c.heard, c.played_ms, c.unheard_ms) for c in cut] == [(False, 500, 1500)]
    assert cut[0].heard_text == "your"
    # Twilio echoes the flushed mark: it proves nothing and is swallowed.
    assert ledger.on_mark("d1", now_ms=510) is None
    assert not ledger.active


def test_clean_mark_is_heard_and_reanchors_the_queue() -> None:
    ledger = PlaybackLedger()
    ledger.begin("a", "first", now_ms=0)
    ledger.add_audio("a", 1000)
    ledger.sent("a")
    ledger.begin("b", "second one", now_ms=100)
    ledger.add_audio("b", 1000)
    ledger.sent("b")
    heard = ledger.on_mark("a", now_ms=1200)
    assert heard is not None
    assert heard.heard
    assert heard.heard_text == "first"
    # "b" started when "a" really ended (1200), so at 1700 it has played 500 ms.
    cut = ledger.clear(now_ms=1700, reason="barge_in")
    assert [(c.utterance.playback_id, c.played_ms) for c in cut] == [("b", 500)]
    assert ledger.on_mark("zzz", now_ms=1800) is None


def test_heard_prefix_counts_whole_words() -> None:
    text = "one two three four"
    assert heard_prefix(text, 0, 1000) == ""
    assert heard_prefix(text, 1000, 1000) == text
    assert heard_prefix(text, 500, 1000) == "one two"
    assert heard_prefix(text, 100, 0) == ""


def test_a_resume_says_exactly_the_words_after_the_heard_prefix() -> None:
    text = "your access to github is ready"
    heard = heard_prefix(text, 500, 1200)
    assert heard == "your access"
    assert unheard_rest(text, heard) == "to github is ready"
    assert f"{heard} {unheard_rest(text, heard)}" == text
    assert unheard_rest(text, "") == text
    assert unheard_rest(text, text) == ""


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("{not json", "malformed_json"),
        ("[1, 2]", "not_an_object"),
        ('{"streamSid": "x"}', "missing_event"),
    ],
)
def test_bad_frames_have_reasons(raw: str, reason: str) -> None:
    with pytest.raises(FrameError) as caught:
        decode_frame(raw)
    assert caught.value.reason == reason


def test_media_payload_is_checked() -> None:
    assert decode_frame('{"event": "media", "media": {"payload": "/w=="}}') == TwilioMedia(
        TwilioAudio(b"\xff")
    )
    for bad, reason in (
        ({"media": {"payload": "!!not base64!!"}}, "invalid_base64"),
        ({"media": {}}, "missing_payload"),
        ({"media": "x"}, "missing_payload"),
    ):
        with pytest.raises(FrameError) as caught:
            decode_frame(json.dumps({"event": "media", **bad}))
        assert caught.value.reason == reason


def test_tolerant_parse_ignores_unknown_fields_and_numbers() -> None:
    frame = decode_frame(
        '{"event": "media", "sequenceNumber": 7, "extra": {"a": 1}, "media": {"payload": ""}}'
    )
    assert frame == TwilioMedia(TwilioAudio(b""))


def test_twilio_signature() -> None:
    params = {"CallSid": "CA1", "From": "+15550001111", "To": "+15550002222"}
    url = "https://example.com/v1/telephony/twilio/voice?tenant_id=acme"
    sig = twilio_signature("secret", url, params)
    assert signature_ok("secret", url, params, sig)
    assert not signature_ok("other", url, params, sig)
    assert not signature_ok("secret", url, {**params, "From": "+1"}, sig)
    assert not signature_ok("secret", url, params, None)


async def test_pocketsphinx_with_the_domain_lm_transcribes_telephone_audio() -> None:
    engine = PocketsphinxStt(await speech(PRIMER_TEXT, tail_silence_ms=0), demo_vocabulary())
    for text in (
        "wait one moment please",
        "give me access to okta",
        "give me access to notion and gitlab",
        "give me access to github and jira",
    ):
        audio = silence_ulaw(200) + await speech(text, tail_silence_ms=500)
        recognizer = engine.session()
        for frame in frames(audio):
            recognizer.feed(frame)
        assert recognizer.finish() == text
        words = recognizer.words()
        assert [w.text for w in words] == text.split()
        if text.endswith("jira"):
            # The first phone call: both names heard surely enough to act on.
            calls = [("provision_access", {"accesses": ["github", "jira"]})]
            assert doubtful_values(calls, words, engine.known_values, FloorConfig()) == []
    assert engine.session().finish() == ""


def test_domain_lm_is_a_valid_trigram_model() -> None:
    model = arpa(sentences(demo_vocabulary()))
    assert model.startswith("\\data\\\nngram 1=")
    assert "ngram 3=" in model
    assert "give me access" in model
    assert "dame acceso a" in model
    assert model.rstrip().endswith("\\end\\")
