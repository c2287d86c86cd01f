"""`[[mcp_servers]]` in the tools file: what is declared, and every refusal names the file,
the entry and the field (DESIGN §7c). The server's `tools/list` is stood in for here; the
real one is listed in tests/component/tools/test_mcp_file_listing.py."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import mcp_types
import pytest

from libs.admission import LoadView, ToolCall, TurnContext
from libs.admission.plan import plan_admission
from libs.tools import DeclarationError, ToolRegistry, mcp_file
from libs.tools.http_file import load_tools_file

SERVER = """
[[mcp_servers]]
name = "desk"
url = "http://127.0.0.1:9/mcp"
headers = { Authorization = "Bearer ${MCP_TEST_TOKEN:-dev}" }
"""
TOOL = """
[[mcp_servers.tools]]
name = "open_ticket"
roles = { customer = "resource", subject = "text" }
closing = "Ticket {result.id} is open."
lookup = { tool = "find_ticket_by_key", key_argument = "key" }
"""


def _tool(name: str, properties: dict[str, Any]) -> mcp_types.Tool:
    schema = {"type": "object", "properties": properties, "required": sorted(properties)}
    return mcp_types.Tool(name=name, description=f"{name} at the desk", input_schema=schema)


LISTED = {
    "open_ticket": _tool(
        "open_ticket", {"customer": {"type": "string"}, "subject": {"type": "string"}}
    ),
    "find_ticket_by_key": _tool("find_ticket_by_key", {"key": {"type": "string"}}),
}


@pytest.fixture
def listing(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """What the server answers at start: `tools` (a listing) or `down` (a reason)."""
    answer: dict[str, Any] = {"tools": LISTED}

    def list_now(spec: Any, *, timeout_s: float) -> Any:
        answer["spec"] = spec
        return answer.get("down") or answer["tools"]

    monkeypatch.setattr(mcp_file, "list_now", list_now)
    return answer


def _load(tmp_path: Path, text: str) -> ToolRegistry:
    path = tmp_path / "tools.toml"
    path.write_text(text)
    registry = ToolRegistry()
    load_tools_file(str(path), registry, None)
    return registry


def _refusal(tmp_path: Path, text: str) -> str:
    with pytest.raises(DeclarationError) as refused:
        _load(tmp_path, text)
    message = str(refused.value)
    assert str(tmp_path / "tools.toml") in message
    return message


def test_a_server_s_tool_is_declared_from_its_listing(
    tmp_path: Path, listing: dict[str, Any]
) -> None:
    registry = _load(tmp_path, SERVER + TOOL)
    tool = registry.tool("open_ticket")
    assert tool.description == "open_ticket at the desk"
    assert dict(tool.roles) == {"customer": "resource", "subject": "text"}
    assert tool.executor == "mcp.desk.open_ticket"
    assert tool.polled
    assert tool.closing is not None
    assert tool.closing({}, {"id": "T-7"}) == "Ticket T-7 is open."
    assert listing["spec"].headers == {"Authorization": "Bearer dev"}
    assert registry.unavailable("open_ticket") is None


def test_a_server_down_at_start_lists_its_tools_unavailable(
    tmp_path: Path, listing: dict[str, Any]
) -> None:
    listing["down"] = "ConnectError: All connection attempts failed"
    registry = _load(tmp_path, SERVER + TOOL)
    reason = registry.unavailable("open_ticket")
    assert reason is not None
    assert "MCP server 'desk' (http://127.0.0.1:9/mcp) is unavailable" in reason
    # Declared from the file: one argument per role.
    assert set(registry.tool("open_ticket").arguments.__struct_fields__) == {"customer", "subject"}


def test_admission_refuses_an_unavailable_tool_with_the_reason(
    tmp_path: Path, listing: dict[str, Any]
) -> None:
    listing["down"] = "ConnectError: refused"
    registry = _load(tmp_path, SERVER + TOOL)
    ctx = TurnContext(
        session_id="s1", turn_id="t1", tenant_id="acme", user_id="ana", agent="concierge"
    )
    call = ToolCall("open_ticket", {"customer": "ana", "subject": "Hi"}, "c1")
    counter = iter(range(100))
    plan = plan_admission(
        ctx, [call], registry=registry, view=LoadView(), now=datetime.now(UTC),
        new_id=lambda p: f"{p}_{next(counter)}",
    )
    (only,) = plan.plans
    assert only.kind == "reject"
    assert only.reason == "tool_unavailable"
    assert "unavailable: ConnectError: refused" in (only.detail or "")


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('[[mcp_servers]]\nname = "desk"\n' + TOOL, "mcp_servers[0] ('desk'): url: give `url`"),
        (
            '[[mcp_servers]]\nname = "desk"\nurl = "http://x/mcp"\ncommand = "x"\n' + TOOL,
            "mcp_servers[0] ('desk'): url: give `url`",
        ),
        (
            SERVER.replace("${MCP_TEST_TOKEN:-dev}", "${MCP_TEST_UNSET_TOKEN}") + TOOL,
            "mcp_servers[0] ('desk'): headers.Authorization: environment variable "
            "MCP_TEST_UNSET_TOKEN is not set",
        ),
        (SERVER, "mcp_servers[0] ('desk'): tools: required"),
        (
            SERVER + TOOL.replace('name = "open_ticket"', 'name = "open_tickets"'),
            "mcp_servers[0] ('desk').tools[0] ('open_tickets'): name: the server lists no tool "
            "'open_tickets'",
        ),
        (
            SERVER + TOOL.replace("customer = ", "client = "),
            "mcp_servers[0] ('desk').tools[0] ('open_ticket'): roles.client: 'client' is not an "
            "argument of the tool",
        ),
        (
            SERVER + TOOL.replace('key_argument = "key"', 'key_argument = "token"'),
            "mcp_servers[0] ('desk').tools[0] ('open_ticket'): lookup.key_argument: 'token' is "
            "not an argument of 'find_ticket_by_key'",
        ),
        (
            SERVER + TOOL.replace('tool = "find_ticket_by_key"', 'tool = "find"'),
            "mcp_servers[0] ('desk').tools[0] ('open_ticket'): lookup.tool: the server lists no "
            "tool 'find'",
        ),
        (
            SERVER + TOOL + '[mcp_servers.tools.http]\nexecute = { method = "POST", url = "x" }\n',
            "mcp_servers[0] ('desk').tools[0] ('open_ticket'): http: not for a tool of an MCP",
        ),
        (
            SERVER.replace("name = ", "nmae = ") + TOOL,
            "mcp_servers[0]: nmae: unknown field",
        ),
    ],
)
def test_bad_entries_are_refused_with_file_entry_and_field(
    tmp_path: Path, listing: dict[str, Any], text: str, where: str
) -> None:
    message = _refusal(tmp_path, text)
    assert where in message, message


def test_a_file_of_mcp_servers_alone_is_a_tools_file(
    tmp_path: Path, listing: dict[str, Any]
) -> None:
    registry = _load(tmp_path, SERVER + TOOL)
    assert [t.name for t in registry.tools()] == ["open_ticket"]
