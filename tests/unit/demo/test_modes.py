"""Demo mode or production (`libs.modes`): decided from the environment alone, and what
`holdline run` starts in each (its plan, before anything runs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from libs import modes
from libs.config import ModelSettings, ToolSettings
from libs.models import NoModelConfigured, TemplateModel, UnknownModel, get_model, model_for
from libs.supervisor import Supervisor, main
from libs.tools import DeclarationError, default_registry
from testkit.tools_file import GOOD, tools_file

BROKER = {"NATS_URL": "nats://127.0.0.1:4222", "PATH": ""}


@pytest.mark.parametrize(
    ("environ", "demo"),
    [
        ({}, True),
        ({"HOLDLINE_TOOLS_FILE": "tools.toml"}, False),
        ({"HOLDLINE_TOOL_MODULES": "mine.tools"}, False),
        ({"HOLDLINE_TOOL_MODULES": " , "}, True),
        ({"HOLDLINE_TOOLS_FILE": "tools.toml", "HOLDLINE_DEMO": "1"}, True),
        ({"HOLDLINE_DEMO": "0"}, False),
        ({"HOLDLINE_DEMO": "off", "HOLDLINE_TOOLS_FILE": "t.toml"}, False),
        ({"HOLDLINE_DEMO": "", "HOLDLINE_TOOLS_FILE": "t.toml"}, False),
    ],
)
def test_the_mode_follows_the_environment(environ: dict[str, str], demo: bool) -> None:
    assert modes.demo_mode(environ) is demo
    assert modes.describe(environ).startswith("demo mode" if demo else "production mode")


def test_a_mode_that_is_neither_is_refused() -> None:
    with pytest.raises(ValueError, match="HOLDLINE_DEMO='maybe'"):
        modes.demo_mode({"HOLDLINE_DEMO": "maybe"})


def test_demo_mode_adds_the_demos_paths_before_the_users() -> None:
    mine = {"HOLDLINE_MODEL_MODULES": "mine.model", "HOLDLINE_SURFACE_ROUTES": "mine.r:add"}
    assert modes.model_modules(mine) == ("demo.models", "mine.model")
    assert modes.surface_routes(mine) == ("demo.routes:add_demo_routes", "mine.r:add")
    production = {**mine, "HOLDLINE_TOOLS_FILE": "t.toml"}
    assert modes.model_modules(production) == ("mine.model",)
    assert modes.surface_routes(production) == ("mine.r:add",)


def _children(tmp_path: Path, environ: dict[str, str]) -> dict[str, list[str]]:
    supervisor = Supervisor(tmp_path, {**BROKER, **environ})
    supervisor.plan()
    return {c.name: c.argv for c in supervisor.children}


def test_holdline_run_starts_the_sandbox_only_in_demo_mode(tmp_path: Path) -> None:
    demo = _children(tmp_path, {})
    assert demo["sandbox-provider"][-2:] == ["-m", "demo.sandbox_provider"]
    assert demo["interaction-surface"][-2:] == ["-m", "services.interaction_surface"]
    production = _children(tmp_path, {"HOLDLINE_TOOLS_FILE": "tools.toml"})
    assert "sandbox-provider" not in production
    assert sorted(production) == [
        "batch-coordinator", "delivery-policy", "interaction-surface", "operation-worker",
    ]
    forced = _children(tmp_path, {"HOLDLINE_TOOLS_FILE": "tools.toml", "HOLDLINE_DEMO": "1"})
    assert "sandbox-provider" in forced


def test_holdline_run_says_which_mode_runs() -> None:
    production = modes.describe({"HOLDLINE_TOOL_MODULES": "mine.tools"})
    assert production.startswith("production mode: only your tools")
    assert "no sandbox provider" in production
    assert modes.describe({}).startswith("demo mode: the demo's tools, the sandbox provider")
    assert "and your tools" in modes.describe({"HOLDLINE_DEMO": "1", "HOLDLINE_TOOLS_FILE": "t"})


def test_production_without_tools_is_refused_with_exit_78(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in ("HOLDLINE_TOOLS_FILE", "HOLDLINE_TOOL_MODULES", "NATS_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOLDLINE_DEMO", "0")
    monkeypatch.setenv("HOLDLINE_ROOT", str(tmp_path))
    assert main() == 78
    out = capsys.readouterr().out
    assert "refusing to start: HOLDLINE_DEMO=0 and no tools are configured" in out
    assert "to start the demo instead" in out


def test_a_production_registry_holds_only_the_users_tools(tmp_path: Path) -> None:
    path = tools_file(tmp_path, GOOD)
    registry = default_registry(settings=ToolSettings(demo=False, tools_file=str(path)))
    assert [t.name for t in registry.tools(include_internal=True)] == ["open_ticket"]
    assert not registry.has("transfer_money")
    with pytest.raises(DeclarationError, match="HOLDLINE_DEMO=1"):
        default_registry(settings=ToolSettings(demo=False))
    empty = tools_file(tmp_path, "")
    with pytest.raises(DeclarationError, match=r"no \[\[tools\]\] entries.*HOLDLINE_DEMO=1"):
        default_registry(settings=ToolSettings(demo=False, tools_file=str(empty)))


async def test_production_without_a_model_words_closings_and_refuses_turns() -> None:
    model = get_model("")
    assert isinstance(model, TemplateModel)
    assert isinstance(model_for(ModelSettings(name="none")), TemplateModel)
    with pytest.raises(NoModelConfigured, match="HOLDLINE_MODEL"):
        await model.respond(None)  # type: ignore[arg-type]


def test_the_mock_outside_demo_mode_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from libs.models import registry  # noqa: PLC0415

    monkeypatch.delitem(registry._FACTORIES, "mock", raising=False)
    with pytest.raises(UnknownModel, match="HOLDLINE_DEMO=1"):
        get_model("mock")


def test_the_model_defaults_follow_the_mode(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HOLDLINE_MODEL", "OPENAI_API_KEY", "HOLDLINE_TOOL_MODULES"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOLDLINE_DEMO", "1")
    assert ModelSettings.from_env().name == "mock"
    monkeypatch.setenv("HOLDLINE_DEMO", "0")
    assert ModelSettings.from_env().name == ""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert ModelSettings.from_env().name == "openai"


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("demo.routes", "is not module:function"),
        ("no_such_module_here:add", "cannot import no_such_module_here"),
        ("demo.routes:nothing", "has no function nothing"),
    ],
)
def test_a_bad_route_installer_is_a_refused_configuration(path: str, words: str) -> None:
    from services.interaction_surface.core.extra_routes import BadRoutes, resolve  # noqa: PLC0415

    with pytest.raises(BadRoutes, match=words) as refused:
        resolve(path)
    assert isinstance(refused.value, DeclarationError)  # exit 78, like a bad tools file


def test_the_demos_route_installer_resolves() -> None:
    from demo.routes import add_demo_routes  # noqa: PLC0415
    from services.interaction_surface.core.extra_routes import resolve  # noqa: PLC0415

    assert resolve(modes.DEMO_SURFACE_ROUTES[0]) is add_demo_routes
