"""The ActivityGate's timings: quiet windows by channel, language and domain, wait limits."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class QuietRule:
    """A minimum quiet time for deliveries matching channel, language and domain ("*": any)."""

    channel: str
    language: str
    domain: str
    min_quiet_ms: int

    def matches(self, channel: str, language: str, domain: str) -> bool:
        """Whether every non-wildcard field equals the given value."""
        return all(
            want in ("*", have)
            for want, have in ((self.channel, channel), (self.language, language),
                               (self.domain, domain))
        )

    @property
    def specificity(self) -> int:
        """How many fields are not wildcards; the most specific rule wins."""
        return sum(1 for v in (self.channel, self.language, self.domain) if v != "*")


@dataclass(frozen=True, slots=True)
class GatePolicy:
    """Timings of the ActivityGate."""

    # Silence required after the user stops speaking or typing before a proactive delivery.
    min_quiet_ms: int = 650
    # Overrides of the quiet time per channel, language and domain (the tool of the delivery's
    # operations), most specific wins: `voice:es:*=800,chat:*:*=300,*:*:transfer_money=1200`.
    rules: tuple[QuietRule, ...] = ()
    # How long a delivery may wait for a proactive window before next-turn resync.
    window_ms: int = 30_000
    # Unheard attempts before the delivery stops trying proactively.
    max_unheard: int = 3
    # The conversation language used to pick quiet rules.
    language: str = "en"

    def quiet_ms(self, channel: str, language: str, domain: str) -> int:
        """The quiet time for a delivery on this channel, in this language and domain."""
        matching = [r for r in self.rules if r.matches(channel, language, domain)]
        if not matching:
            return self.min_quiet_ms
        return max(matching, key=lambda r: r.specificity).min_quiet_ms


def parse_quiet_rules(text: str) -> tuple[QuietRule, ...]:
    """Parse `channel:language:domain=ms` entries separated by commas ("*" = any)."""
    rules: list[QuietRule] = []
    for raw in text.split(","):
        item = raw.strip()
        if not item:
            continue
        key, sep, value = item.partition("=")
        parts = key.strip().split(":")
        if not sep or len(parts) != 3:
            raise ValueError(f"quiet rule {item!r} is not channel:language:domain=ms")
        try:
            ms = int(value)
        except ValueError as exc:
            raise ValueError(f"quiet rule {item!r}: {value!r} is not milliseconds") from exc
        if ms < 0:
            raise ValueError(f"quiet rule {item!r}: milliseconds must be >= 0")
        channel, language, domain = (p.strip() or "*" for p in parts)
        rules.append(QuietRule(channel, language, domain, ms))
    return tuple(rules)
