"""Run-time failure injection registered through ``/admin/faults``.

Faults live in memory on purpose: a restart is a clean slate for chaos, while the effects
they caused stay in the database. Every mutating request that reaches execution is checked
against all active faults in creation order (a read of a resource, against those added with
``reads``); each matching fault counts down one of its ``times`` and contributes its effect.
When several set the same field the earliest wins, and per-request ``X-Sandbox-Fault-*``
headers win over all of them.
"""

from __future__ import annotations

import itertools
from typing import Any

from .fault_rules import FaultBody, FaultEffect, FaultRule, merge_effects


class FaultRegistry:
    def __init__(self) -> None:
        self._rules: list[FaultRule] = []
        self._ids = itertools.count(1)

    def add(self, body: FaultBody) -> FaultRule:
        rule = FaultRule(
            fault_id=f"flt_{next(self._ids)}",
            match=body.match,
            effect=FaultEffect(
                latency_ms=body.latency_ms,
                status=body.status,
                retry_after_s=body.retry_after_s,
                timeout_after_commit=body.timeout_after_commit,
            ),
            remaining=body.times,
            reads=body.reads,
        )
        self._rules.append(rule)
        return rule

    def clear(self) -> int:
        count = len(self._rules)
        self._rules.clear()
        return count

    def remove(self, fault_id: str) -> bool:
        before = len(self._rules)
        self._rules = [rule for rule in self._rules if rule.fault_id != fault_id]
        return len(self._rules) != before

    def views(self) -> list[dict[str, Any]]:
        return [rule.view() for rule in self._rules]

    def consume(
        self, resource: str, request_fault: FaultEffect, *, read: bool = False
    ) -> FaultEffect:
        """The effect for one request on ``resource``; counts matching rules down.

        Synchronous on purpose: no await between matching and decrementing, so two
        concurrent requests can never both consume the last ``times`` of a rule.
        """
        effects = [request_fault]
        for rule in self._rules:
            if rule.reads == read and rule.matches(resource):
                rule.hits += 1
                if rule.remaining is not None:
                    rule.remaining -= 1
                effects.append(rule.effect)
        return merge_effects(effects)
