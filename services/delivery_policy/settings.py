"""delivery-policy settings, read once from the environment.

`HOLDLINE_MIN_QUIET_MS` (default 650) silence required after the user stops speaking or
typing before a proactive delivery.
`HOLDLINE_MIN_QUIET_RULES` (default empty) overrides per channel, language and domain
(the tool of the delivery's operations), most specific wins: `voice:es:*=800,chat:*:*=300,
*:*:transfer_money=1200`.
`HOLDLINE_DELIVERY_WINDOW_MS` (default 30000) how long a delivery may wait for a proactive
window before it falls back to next-turn resync.
`HOLDLINE_MAX_UNHEARD` (default 3) unheard attempts before next-turn resync.
`HOLDLINE_LANGUAGE` (default `en`) conversation language used to pick quiet rules.
`HOLDLINE_PARTITIONS` (default 1) and `HOLDLINE_PARTITION` (default: the ordinal ending the pod
name in `HOSTNAME`; 0 when N is 1): this process handles only the sessions of partition k of N.
`DELIVERY_POLICY_HOST` / `DELIVERY_POLICY_PORT` (127.0.0.1:8093), `HOLDLINE_LOG_LEVEL` (INFO):
where and how `libs.serve` runs it (`ServeSettings`).
`DELIVERY_POLICY_NICE` (default 10): added to the process's nice value, so the turn path runs
first on a shared machine.
Broker settings come from `BusSettings.from_env()`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from libs.bus.topology import Partition
from libs.config import (
    BACKGROUND_NICE,
    BusSettings,
    HttpSettings,
    ServeSettings,
    env_int,
    env_str,
)
from libs.domain.gate_policy import GatePolicy, parse_quiet_rules

SERVICE = "delivery-policy"
ENV_PREFIX = "DELIVERY_POLICY"
DEFAULT_PORT = 8093


@dataclass(frozen=True)
class Settings:
    """Everything the delivery-policy reads from its environment."""

    bus: BusSettings
    policy: GatePolicy
    partition: Partition = field(default_factory=Partition)
    serve: ServeSettings = field(
        default_factory=lambda: ServeSettings(HttpSettings("127.0.0.1", DEFAULT_PORT))
    )

    @classmethod
    def from_env(cls) -> Settings:
        """Read the settings from the environment."""
        defaults = GatePolicy()
        bus = BusSettings.from_env()
        return cls(
            bus=bus,
            policy=GatePolicy(
                min_quiet_ms=env_int("HOLDLINE_MIN_QUIET_MS", defaults.min_quiet_ms),
                rules=parse_quiet_rules(env_str("HOLDLINE_MIN_QUIET_RULES", "")),
                window_ms=env_int("HOLDLINE_DELIVERY_WINDOW_MS", defaults.window_ms),
                max_unheard=env_int("HOLDLINE_MAX_UNHEARD", defaults.max_unheard),
                language=env_str("HOLDLINE_LANGUAGE", defaults.language),
            ),
            partition=Partition.from_env(),
            serve=ServeSettings.from_env(
                ENV_PREFIX, DEFAULT_PORT, bus, default_nice=BACKGROUND_NICE
            ),
        )
