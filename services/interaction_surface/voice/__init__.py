"""The voice channel: media transports, the call shell, floor decisions, speech engines.

Pure (no I/O): codec.py, floor.py, turn_taking.py, dtmf.py, playback.py, trust.py,
stream_frames.py (what any carrier's frame means), frame_decoding.py (how every carrier's
JSON frames are decoded), twilio_frames.py, telnyx_frames.py, plivo_frames.py,
vonage_frames.py and exotel_frames.py (each carrier's wire format and its `Carrier`),
telnyx_trust.py, plivo_trust.py and vonage_signing.py (their request signing); the VAD
(vad.py, silero.py, speech_cues.py) runs models but decides nothing about the conversation.
Shells: call.py (one call, any transport) with its parts suspended.py, doubt.py, keypad.py,
outbound.py (its paced audio out through a `wire.CallWire`) and recorder.py (its ordered
writes); call_start.py (trust, session and attach for any transport); media_stream.py (the
stream loop, any carrier); twilio.py, telnyx.py, plivo.py, vonage.py and exotel.py (each
carrier's routes; call_control.py what their webhooks share), telephony.py (the edge's
dependencies), control_log.py (control events through the one write path), ownership.py
(the hl_calls KV), registry.py, ports.py, wiring.py; settings.py reads every voice variable
once (carrier_settings.py Vonage's and Exotel's); engines/ holds the speech engines.
"""
