"""batch-coordinator settings, read once from the environment.

`HOLDLINE_LANGUAGE` (default `en`) language of closing summaries (`en`, `es`).
`HOLDLINE_MODEL` (default: `mock` in demo mode, else none, whose closings come from
templates) model that explains final failures (libs.models), with the adapters' `OPENAI_*`
and `HOLDLINE_MODEL_*` settings (`ModelSettings`); `HOLDLINE_MODEL_MODULES` (demo mode
adds the demo's) are imported first.
`HOLDLINE_PARTITIONS` (default 1) and `HOLDLINE_PARTITION` (default: the ordinal ending the pod
name in `HOSTNAME`; 0 when N is 1): this process handles only the sessions of partition k of N.
`BATCH_COORDINATOR_HOST` / `BATCH_COORDINATOR_PORT` (127.0.0.1:8092), `HOLDLINE_LOG_LEVEL`
(INFO): where and how `libs.serve` runs it (`ServeSettings`).
`BATCH_COORDINATOR_NICE` (default 10): added to the process's nice value, so the turn path
runs first on a shared machine.
`HOLDLINE_TOOL_MODULES`, `HOLDLINE_TOOLS_FILE`: your tools (`ToolSettings`; `libs.modes`).
`HOLDLINE_INTERRUPTED_GRACE_S` (default 10): a batch member with no event this long after
its `batch.opened` lost its turn before the admission; it is rejected as `interrupted` (a
guarded first event, so a late admission is refused) and the batch closes. Looked for every
`HOLDLINE_INTERRUPTED_SWEEP_S` (default 5).
Broker settings come from `BusSettings.from_env()`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from libs.bus.topology import Partition
from libs.config import (
    BACKGROUND_NICE,
    BusSettings,
    HttpSettings,
    ModelSettings,
    ServeSettings,
    ToolSettings,
    env_float,
    env_str,
)
from libs.modes import DEMO_MODEL, demo_mode, model_modules

SERVICE = "batch-coordinator"
ENV_PREFIX = "BATCH_COORDINATOR"
DEFAULT_PORT = 8092


@dataclass(frozen=True)
class Settings:
    """Everything the coordinator reads from its environment."""

    bus: BusSettings
    # Language of closing summaries (`en`, `es`).
    language: str = "en"
    model: ModelSettings = field(default_factory=ModelSettings)
    # `module,...` imported before the model is chosen (`libs.modes.model_modules`).
    model_modules: tuple[str, ...] = ()
    partition: Partition = field(default_factory=Partition)
    tools: ToolSettings = field(default_factory=ToolSettings)
    # A batch member with no event this long after its `batch.opened` lost its turn before the
    # admission: it is rejected as `interrupted` and the batch closes.
    interrupted_grace_s: float = 10.0
    # How often such members are looked for.
    interrupted_sweep_s: float = 5.0
    serve: ServeSettings = field(
        default_factory=lambda: ServeSettings(HttpSettings("127.0.0.1", DEFAULT_PORT))
    )

    @classmethod
    def from_env(cls) -> Settings:
        """Read the settings from the environment."""
        bus = BusSettings.from_env()
        return cls(
            bus=bus,
            language=env_str("HOLDLINE_LANGUAGE", cls.language),
            model=ModelSettings.from_env(default_name=DEMO_MODEL if demo_mode() else ""),
            model_modules=model_modules(),
            partition=Partition.from_env(),
            tools=ToolSettings.from_env(),
            interrupted_grace_s=env_float("HOLDLINE_INTERRUPTED_GRACE_S", cls.interrupted_grace_s),
            interrupted_sweep_s=env_float("HOLDLINE_INTERRUPTED_SWEEP_S", cls.interrupted_sweep_s),
            serve=ServeSettings.from_env(
                ENV_PREFIX, DEFAULT_PORT, bus, default_nice=BACKGROUND_NICE
            ),
        )
