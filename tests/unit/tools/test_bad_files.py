"""Bad tool declarations are refused at start, naming the file, the entry and the field;
a service given one does not start, and `holdline run` says so plainly instead of looping."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec
import pytest

from libs.admission import rules
from libs.config import ToolSettings
from libs.tools import (
    BusinessLimits,
    DeclarationError,
    ToolDeclaration,
    ToolRegistry,
    default_registry,
)
from libs.tools.http_file import load_tools_file
from testkit.tools_file import GOOD
from testkit.tools_file import tools_file as _file


def _refusal(tmp_path: Path, text: str) -> str:
    path = _file(tmp_path, text)
    with pytest.raises(DeclarationError) as refused:
        load_tools_file(str(path), ToolRegistry(), None)
    message = str(refused.value)
    assert str(path) in message
    return message


def test_a_good_file_loads(tmp_path: Path) -> None:
    registry = ToolRegistry()
    load_tools_file(str(_file(tmp_path, GOOD)), registry, None)
    tool = registry.tool("open_ticket")
    assert dict(tool.roles) == {"project": "resource"}
    assert tool.closing is not None
    assert tool.closing({"project": "x", "title": "y"}, {"id": "T-9"}) == "Ticket T-9 is open."


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            ('project = "resource"', 'projects = "resource"'),
            "tools[0] ('open_ticket'): roles.projects",
        ),
        (('project = "resource"', 'project = "secret"'), "roles.project: 'secret' is not one of"),
        (('/tickets"', '/{queue}/tickets"'), "http.execute.url: {queue} is not an argument"),
        (("{result.id} is open.", "{ticket_no} is open."), "closing: {ticket_no} is not a field"),
        (("by-token/{idempotency_key}", "by-token/{title}"), "http.lookup.url: must contain {idem"),
        (('type = "object"', 'type = "list"'), "parameters: must be a JSON Schema object"),
        (
            ('name = "open_ticket"', 'name = "Open Ticket"'),
            "tools[0] ('Open Ticket'): name: must be",
        ),
        (('description = "Open a ticket."', 'descripton = "x"'), "descripton: unknown field"),
        (('[tools.roles]\nproject = "resource"\n', ""), "declares no roles"),
        (
            ('url = "http://127.0.0.1:9/tickets"', 'url = "${NO_SUCH_DESK_URL}/tickets"'),
            "http.execute.url: environment variable NO_SUCH_DESK_URL is not set",
        ),
        (
            ("[tools.http]", '[tools.http]\ncancel = { url = "http://x/{result.id}" }\nretry = []'),
            "http.retry: unknown field",
        ),
        (("[[tools]]", "[[tool]]"), "tool: unknown top-level field"),
        (("[tools.http]", "[tools.http\n"), "not valid TOML"),
    ],
)
def test_bad_entries_are_refused_with_file_entry_and_field(
    tmp_path: Path, edit: tuple[str, str], expected: str
) -> None:
    old, new = edit
    assert old in GOOD
    assert expected in _refusal(tmp_path, GOOD.replace(old, new, 1))


def test_a_declared_opt_out_is_accepted(tmp_path: Path) -> None:
    text = GOOD.replace('[tools.roles]\nproject = "resource"\n', "").replace(
        'closing = "', 'open = true\nclosing = "'
    )
    registry = ToolRegistry()
    load_tools_file(str(_file(tmp_path, text)), registry, None)
    assert registry.tool("open_ticket").open


def test_duplicate_names_across_modules_and_the_file(tmp_path: Path) -> None:
    with pytest.raises(DeclarationError) as twice:
        default_registry(
            settings=ToolSettings(modules=("examples.payouts", "tests.unit.tools.dup_module"))
        )
    assert "tests.unit.tools.dup_module" in str(twice.value)
    assert "already declared by module examples.payouts" in str(twice.value)
    path = _file(tmp_path, GOOD.replace('name = "open_ticket"', 'name = "send_payout"'))
    with pytest.raises(DeclarationError) as clash:
        default_registry(
            settings=ToolSettings(modules=("examples.payouts",), tools_file=str(path))
        )
    assert f"{path}: tools[0] ('send_payout'): name:" in str(clash.value)
    assert "module examples.payouts" in str(clash.value)
    # A demo tool's name is taken too.
    path.write_text(GOOD.replace('name = "open_ticket"', 'name = "transfer_money"'))
    with pytest.raises(DeclarationError, match=r"already declared by module demo\.tools"):
        default_registry(settings=ToolSettings(tools_file=str(path)))


class _Move(msgspec.Struct, frozen=True, kw_only=True):
    account_id: str
    amount: Annotated[int, msgspec.Meta(gt=0)]


def test_a_python_tool_that_moves_money_must_declare_roles() -> None:
    bare = ToolDeclaration(name="move", description="x", arguments=_Move, executor="x")
    with pytest.raises(DeclarationError) as refused:
        ToolRegistry().declare(bare)
    message = str(refused.value)
    assert "'account_id', 'amount'" in message
    assert "declare roles" in message
    assert "open=true" in message
    registry = ToolRegistry()
    registry.declare(
        ToolDeclaration(
            name="move",
            description="x",
            arguments=_Move,
            executor="x",
            roles={"account_id": "owned", "amount": "amount"},
        )
    )
    with pytest.raises(DeclarationError, match="'payee' is not in the schema"):
        ToolRegistry().declare(
            ToolDeclaration(
                name="move",
                description="x",
                arguments=_Move,
                executor="x",
                roles={"payee": "resource"},
            )
        )
    with pytest.raises(DeclarationError, match="max_amount needs an argument with role 'amount'"):
        ToolRegistry().declare(
            ToolDeclaration(
                name="move",
                description="x",
                arguments=_Move,
                executor="x",
                open=True,
                business=BusinessLimits(max_amount=5),
            )
        )


def test_a_batch_file_tool_expands_one_operation_per_item(tmp_path: Path) -> None:
    text = """
[[tools]]
name = "watch_projects"
description = "Watch each project."
batch_field = "projects"
item_field = "project"
[tools.parameters]
type = "object"
required = ["projects"]
[tools.parameters.properties.projects]
type = "array"
maxItems = 5
items = { type = "string", pattern = "^[a-z]+$" }
[tools.roles]
project = "resource"
[tools.http]
execute = { url = "http://127.0.0.1:9/watch/{project}" }
lookup = { url = "http://127.0.0.1:9/watch/by-key/{idempotency_key}" }
"""
    registry = ToolRegistry()
    load_tools_file(str(_file(tmp_path, text)), registry, None)
    tool = registry.tool("watch_projects")
    items = rules.expand(tool, {"projects": ["acme/alpha", "Beta"]})
    assert items == [{"project": "acme/alpha"}, {"project": "Beta"}]
    caller = rules.Caller("acme", "ana", "concierge")
    assert [rules.check_item(tool, i, caller) for i in items] == [
        {"project": "alpha"},
        {"project": "beta"},
    ]
    refused = rules.check_item(tool, {"project": "globex/alpha"}, caller)
    assert refused == ("forbidden", "project 'globex/alpha' belongs to another tenant")
