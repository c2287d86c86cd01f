"""Speech engines: interfaces (base.py), espeak-ng, pocketsphinx, Deepgram, the registry."""
