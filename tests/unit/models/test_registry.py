"""Choosing a model by name and settings (read from the environment by `ModelSettings`)."""

from __future__ import annotations

import pytest

from demo.models import MockModel
from libs.config import ModelSettings
from libs.models import OpenAIResponsesModel, UnknownModel, get_model, model_for


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HOLDLINE_MODEL", "OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("OPENAI_TIMEOUT_S", raising=False)


def test_mock_by_default() -> None:
    settings = ModelSettings.from_env()
    assert settings.name == "mock"
    assert isinstance(model_for(settings), MockModel)


def test_openai_when_a_key_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:1/v1/")
    monkeypatch.setenv("OPENAI_MODEL", "gpt-x")
    monkeypatch.setenv("OPENAI_TIMEOUT_S", "3")
    settings = ModelSettings.from_env()
    assert settings.name == "openai"
    model = model_for(settings)
    assert isinstance(model, OpenAIResponsesModel)
    assert (model.base_url, model.model, model.timeout_s) == ("http://127.0.0.1:1/v1", "gpt-x", 3.0)


def test_holdline_model_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("HOLDLINE_MODEL", "mock")
    settings = ModelSettings.from_env()
    assert settings.name == "mock"
    assert isinstance(model_for(settings), MockModel)


def test_a_process_may_default_to_another_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    assert ModelSettings.from_env(default_name="mock").name == "mock"


def test_openai_without_a_key_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="OPENAI_API_KEY"):
        get_model("openai")


def test_unknown_model() -> None:
    with pytest.raises(UnknownModel, match="registered: chat-completions, mock, none, openai"):
        get_model("nope")
