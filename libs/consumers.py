"""A service's durable consumers, built from its declarations (`libs/roles.py`).

The composition root builds runtime → handlers → `Consumers(declarations, handlers)` in
that order and passes the last to `create_service_app`; the runtime builds the
`DurableConsumer`s from it once it has connected and declared the streams. Every
declaration must have exactly one handler and every handler a declaration, checked when
`Consumers` is built, before anything starts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from libs.bus import Context, DurableConsumer, Handler, spec_for
from libs.bus.topology import Partition
from libs.events import EventCodec
from libs.roles import ConsumerDeclaration

if TYPE_CHECKING:
    from libs.service import Runtime


@dataclass(frozen=True, slots=True)
class Bound:
    """A handler with the tuning a service's settings give its consumer (None: the
    consumer's default)."""

    handler: Handler[Any]
    max_in_flight: int | None = None
    batch: int | None = None

    def options(self) -> dict[str, int]:
        """The `DurableConsumer` keyword arguments set here."""
        chosen = {"max_in_flight": self.max_in_flight, "batch": self.batch}
        return {name: value for name, value in chosen.items() if value is not None}


class UnboundConsumer(ValueError):
    """A declared consumer without a handler, or a handler for no declared consumer."""


class Consumers:
    """A service's declared consumers with their handlers, built into durable consumers
    when its runtime starts."""

    def __init__(
        self,
        declarations: Sequence[ConsumerDeclaration],
        handlers: Mapping[str, Handler[Any] | Bound],
        *,
        partition: Partition | None = None,
    ) -> None:
        roles = [d.role for d in declarations]
        repeated = sorted({r for r in roles if roles.count(r) > 1})
        missing = sorted(set(roles) - set(handlers))
        unknown = sorted(set(handlers) - set(roles))
        if repeated or missing or unknown:
            raise UnboundConsumer(
                f"roles declared twice: {repeated}, without a handler: {missing}, "
                f"handled but not declared: {unknown}"
            )
        if partition is None and any(d.partitioned for d in declarations):
            raise UnboundConsumer("a partitioned consumer needs the process's partition")
        self.declarations = tuple(declarations)
        self._bound = {
            role: h if isinstance(h, Bound) else Bound(h) for role, h in handlers.items()
        }
        self._partition = partition

    def build(self, runtime: Runtime) -> list[DurableConsumer[Any]]:
        """One durable consumer per declaration, over the runtime's broker and timings."""
        built: list[DurableConsumer[Any]] = []
        for declaration in self.declarations:
            if declaration.service != runtime.name:
                raise UnboundConsumer(
                    f"{declaration.service}'s consumer {declaration.role!r} given to "
                    f"{runtime.name}"
                )
            bound = self._bound[declaration.role]
            partition = self._partition if declaration.partitioned else None
            built.append(
                durable_consumer(
                    runtime,
                    declaration.context,
                    durable=declaration.durable(runtime.topology, partition),
                    codec=declaration.codec,
                    handler=bound.handler,
                    filter_subjects=declaration.filter_subjects(runtime.topology),
                    partition=partition,
                    group_by=declaration.grouping.group_by(),
                    **bound.options(),
                )
            )
        return built


def durable_consumer(
    runtime: Runtime,
    context: Context,
    *,
    durable: str,
    codec: EventCodec[Any],
    handler: Handler[Any],
    filter_subjects: tuple[str, ...] | None = None,
    **options: Any,
) -> DurableConsumer[Any]:
    """A durable consumer over a context's stream (or only `filter_subjects` of it), with
    the runtime's timings; `options` go to `DurableConsumer`."""
    settings = runtime.settings
    spec = spec_for(
        runtime.topology,
        context,
        durable=durable,
        ack_wait_s=settings.ack_wait_s,
        max_deliver=settings.max_deliver,
        filter_subjects=filter_subjects,
    )
    return DurableConsumer(
        runtime.jetstream,
        spec,
        codec,
        handler,
        topology=runtime.topology,
        source=context,
        redelivery_backoff_s=settings.redelivery_backoff_s,
        broker_patience_s=settings.broker_patience_s,
        check_after_s=settings.consumer_check_s,
        **options,
    )
