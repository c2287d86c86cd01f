"""Declared agents: which tenants may use each, where each may hand off."""

from __future__ import annotations

import pytest

from libs.config import BusSettings, ServeSettings, ToolSettings
from libs.tools import AgentDeclaration, DeclarationError, ToolRegistry, agent_refusal
from services.interaction_surface.app import create_app
from services.interaction_surface.settings import Misconfigured, Settings

DECLARED = {
    "concierge": AgentDeclaration("concierge", handoff_to=frozenset({"billing"})),
    "billing": AgentDeclaration("billing"),
    "vip": AgentDeclaration("vip", tenants=frozenset({"acme"})),
}


def test_no_declaration_accepts_any_agent_as_before() -> None:
    assert agent_refusal({}, "acme", "anything") is None
    assert agent_refusal({}, "acme", "anything", from_agent="other") is None


def test_an_undeclared_agent_is_unknown() -> None:
    refused = agent_refusal(DECLARED, "acme", "ghost")
    assert refused is not None
    assert (refused.status, refused.reason) == (404, "unknown agent")


def test_an_agent_of_other_tenants_is_not_allowed() -> None:
    assert agent_refusal(DECLARED, "acme", "vip") is None
    refused = agent_refusal(DECLARED, "globex", "vip")
    assert refused is not None
    assert (refused.status, refused.reason) == (403, "agent not allowed")


def test_handoff_targets() -> None:
    assert agent_refusal(DECLARED, "acme", "billing", from_agent="concierge") is None
    refused = agent_refusal(DECLARED, "acme", "vip", from_agent="concierge")
    assert refused is not None
    assert refused.status == 403
    # No handoff_to: any declared agent the tenant may use.
    assert agent_refusal(DECLARED, "acme", "vip", from_agent="billing") is None
    assert agent_refusal(DECLARED, "globex", "vip", from_agent="billing") is not None


def test_the_registry_checks_declarations() -> None:
    registry = ToolRegistry()
    registry.declare_agent(DECLARED["billing"])
    with pytest.raises(DeclarationError):
        registry.declare_agent(DECLARED["billing"])
    registry.declare_agent(AgentDeclaration("a", handoff_to=frozenset({"nobody"})))
    with pytest.raises(DeclarationError, match="nobody"):
        registry.check_agents()
    assert set(registry.agents) == {"billing", "a"}


def test_a_surface_whose_default_agent_is_undeclared_refuses_to_start() -> None:
    settings = Settings(
        bus=BusSettings(),
        serve=ServeSettings(),
        tools=ToolSettings(modules=("tests.unit.tools.agents_module",)),
            )
    with pytest.raises(Misconfigured, match="HOLDLINE_DEFAULT_AGENT"):
        create_app(settings)
