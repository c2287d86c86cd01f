"""The sibilant rule of the speech detector, pure (no socket): an "s" onset confirms a
barge-in as soon as the minimum run is heard, although Silero still calls it non-speech;
cough, knock, breath and line hiss at the caller's level never do."""

from __future__ import annotations

import pytest

from services.interaction_surface.voice.codec import (
    FRAME_MS,
    PCM_FRAME_BYTES,
    FrameSplitter,
    silence_ulaw,
    ulaw_to_pcm16,
)
from services.interaction_surface.voice.engines.base import synthesize
from services.interaction_surface.voice.engines.espeak import EspeakTts
from services.interaction_surface.voice.settings import vad_from_env
from services.interaction_surface.voice.speech_cues import power_spectrum, sibilant_onset
from services.interaction_surface.voice.vad import (
    VadConfig,
    VadEvent,
    VoiceActivity,
    webrtc_classifier,
)
from testkit import stimuli

NOISES = {
    "cough": stimuli.cough,
    "knock": stimuli.knock,
    "breath": stimuli.breath,
    "hiss": stimuli.hiss,
}


class NeverSpeech:
    """Silero's verdict on an "s" and on noise alike for the first windows: not speech."""

    def feed(self, pcm16: bytes) -> list[float]:
        return [0.02] if pcm16 else []


def _frames(ulaw: bytes) -> list[bytes]:
    return list(FrameSplitter(PCM_FRAME_BYTES).push(ulaw_to_pcm16(ulaw)))


def _onset(ulaw: bytes, frames: int = 3) -> object:
    classify = webrtc_classifier(2, 200)
    voiced = [f for f in _frames(silence_ulaw(100) + ulaw) if classify(f)][:frames]
    total = power_spectrum(voiced[0])
    for frame in voiced[1:]:
        total = total + power_spectrum(frame)
    return total


def _events(vad: VoiceActivity, ulaw: bytes) -> list[VadEvent]:
    out, now = [], 0
    for frame in _frames(ulaw):
        now += FRAME_MS
        event = vad.feed(frame, now)
        if event is not None:
            out.append(event)
    return out


async def _sorry() -> bytes:
    return await synthesize(EspeakTts(), "sorry, what did you say")


async def test_a_sibilant_onset_has_a_sibilants_spectrum() -> None:
    config = VadConfig()
    assert sibilant_onset(_onset(await _sorry()), config.sibilant_high, config.sibilant_flatness)
    # A voiced onset ("wait") is not a sibilant: Silero confirms those.
    wait = await synthesize(EspeakTts(), "wait, one moment please")
    assert not sibilant_onset(_onset(wait), config.sibilant_high, config.sibilant_flatness)


@pytest.mark.parametrize("name", sorted(NOISES))
async def test_no_noise_at_speech_level_has_a_sibilants_spectrum(name: str) -> None:
    config = VadConfig()
    level = stimuli.speech_level(await _sorry())
    for seed in range(1, 21):
        clip = stimuli.at_level(NOISES[name](seed), level)
        classify = webrtc_classifier(2, 200)
        voiced = [f for f in _frames(clip) if classify(f)]
        # Every place a run could start in the clip.
        for start in range(max(0, len(voiced) - 2)):
            total = sum(power_spectrum(f) for f in voiced[start : start + 3])
            assert not sibilant_onset(total, config.sibilant_high, config.sibilant_flatness), (
                name, seed, start,
            )


async def test_an_s_confirms_at_the_minimum_run_although_the_model_says_not_speech() -> None:
    audio = silence_ulaw(100) + await _sorry()
    events = _events(VoiceActivity(VadConfig(), model=NeverSpeech()), audio)
    started = [e for e in events if e.kind == "started"]
    assert started, events
    # min_speech_ms (60 ms): three voiced frames, the first one included.
    assert started[0].at_ms - started[0].first_voiced_ms == 60
    # Without the rule the model's verdict is all there is: nothing starts.
    off = _events(VoiceActivity(VadConfig(sibilant_high=0), model=NeverSpeech()), audio)
    assert not [e for e in off if e.kind == "started"]


@pytest.mark.parametrize("name", sorted(NOISES))
async def test_noise_at_the_callers_level_is_not_confirmed_by_the_rule(name: str) -> None:
    sorry = await _sorry()
    level = stimuli.speech_level(sorry)
    for seed in range(1, 9):
        vad = VoiceActivity(VadConfig(), model=NeverSpeech())
        clip = silence_ulaw(100) + stimuli.at_level(NOISES[name](seed), level) + silence_ulaw(300)
        assert not [e for e in _events(vad, clip) if e.kind == "started"], (name, seed)


def test_the_sibilant_thresholds_are_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOLDLINE_VAD_SIBILANT_HIGH", "0")
    monkeypatch.setenv("HOLDLINE_VAD_SIBILANT_FLATNESS", "0.5")
    config = vad_from_env()
    assert (config.sibilant_high, config.sibilant_flatness) == (0.0, 0.5)
    with pytest.raises(ValueError, match="sibilant"):
        VadConfig(sibilant_high=1.5)
