"""The voice channel: Twilio media streams, the call shell, floor decisions, speech engines.

Pure (no I/O): codec.py, floor.py, turn_taking.py, dtmf.py, playback.py, trust.py,
twilio_frames.py (the wire format); the VAD (vad.py, silero.py, speech_cues.py) runs
models but decides nothing about the conversation. Shells: call.py (one call) with its
parts suspended.py, doubt.py, keypad.py, outbound.py (its paced audio out) and
recorder.py (its ordered writes); twilio.py (the routes), twilio_stream.py (the stream
loop), telephony.py (the edge's dependencies), control_log.py (control events through the
one write path), ownership.py (the hl_calls KV), registry.py, ports.py, wiring.py;
settings.py reads every voice variable once; engines/ holds the speech engines.
"""
