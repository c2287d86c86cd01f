"""The voice channel: Twilio media streams, the call shell, floor decisions, speech engines.

Pure (no I/O): codec.py, floor.py, turn_taking.py, dtmf.py, playback.py, trust.py; the
VAD (vad.py) runs models but decides nothing about the conversation. Shells: call.py (one
call), outbound.py (its paced audio out), recorder.py (its ordered writes), twilio.py
(routes, frames, the stream loop), ownership.py (the hl_calls KV), registry.py, ports.py,
wiring.py; settings.py reads every voice variable once; engines/ holds the speech engines.
"""
