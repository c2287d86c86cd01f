"""Framework adapters on `holdline.client` alone: each is an optional extra.

- `holdline.integrations.pipecat` (`pip install 'holdline[pipecat]'`)
- `holdline.integrations.livekit` (`pip install 'holdline[livekit]'`)
- `holdline.integrations.openai_agents` (`pip install 'holdline[openai-agents]'`)
- `holdline.integrations.openai_realtime` (`pip install 'holdline[openai-realtime]'`)

This package imports no framework itself, so importing one adapter never needs another's.
"""
