"""Provider settings precedence: CLI > APPSERVER_* > vendor env > the user's settings > defaults.

The user's settings (DotCraft's keys, outside the workspace) are the layer DotCraft's
workspace file was; what a workspace's own .craft/config.json may still set is tested in
tests/storage/test_trust_workspace.py."""

from __future__ import annotations

from typing import Any

import pytest

from appserver.providers import ProviderSettings, make_provider, resolve_settings
from appserver.providers.anthropic_provider import AnthropicProvider
from appserver.providers.offline import OfflineProvider
from appserver.providers.openai_compat import OpenAIProvider

DOTCRAFT = {
    "ApiKey": "sk-workspace",
    "EndPoint": "https://dashscope.aliyuncs.com/compatible-mode/v1",
    "Model": "qwen-max",
}


def resolve(
    cli: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    ws: dict[str, Any] | None = None,
) -> ProviderSettings:
    return resolve_settings(cli or {}, env or {}, {}, user=ws or {})


def test_defaults_are_offline() -> None:
    assert resolve() == ProviderSettings(
        provider="offline", model=None, base_url=None, api_key=None, timeout=120.0, max_retries=2
    )


def test_vendor_environment_alone_does_not_leave_offline() -> None:
    assert resolve(env={"OPENAI_API_KEY": "sk-env", "ANTHROPIC_API_KEY": "a"}).provider == (
        "offline"
    )


def test_dotcraft_workspace_config_means_an_openai_compatible_endpoint() -> None:
    settings = resolve(ws=DOTCRAFT)
    assert settings == ProviderSettings(
        provider="openai",
        model="qwen-max",
        base_url="https://dashscope.aliyuncs.com/compatible-mode/v1",
        api_key="sk-workspace",
    )


@pytest.mark.parametrize(
    ("field", "cli_key", "env_key", "vendor_key", "ws_key"),
    [
        ("model", "model", "APPSERVER_MODEL", None, "Model"),
        ("base_url", "base_url", "APPSERVER_BASE_URL", "OPENAI_BASE_URL", "EndPoint"),
        ("api_key", "api_key", "APPSERVER_API_KEY", "OPENAI_API_KEY", "ApiKey"),
    ],
)
def test_precedence_of_each_source(
    field: str, cli_key: str, env_key: str, vendor_key: str | None, ws_key: str
) -> None:
    cli = {"provider": "openai", cli_key: "from-cli"}
    env = {env_key: "from-appserver-env"}
    if vendor_key:
        env[vendor_key] = "from-vendor-env"
    ws = {ws_key: "from-workspace"}

    assert getattr(resolve(cli, env, ws), field) == "from-cli"
    del cli[cli_key]
    assert getattr(resolve(cli, env, ws), field) == "from-appserver-env"
    del env[env_key]
    if vendor_key:
        assert getattr(resolve(cli, env, ws), field) == "from-vendor-env"
        del env[vendor_key]
    assert getattr(resolve(cli, env, ws), field) == "from-workspace"
    assert getattr(resolve(cli, env, {}), field) is None


def test_provider_precedence() -> None:
    env = {"APPSERVER_PROVIDER": "anthropic"}
    ws = {"Provider": "offline"}
    assert resolve({"provider": "openai"}, env, ws).provider == "openai"
    assert resolve({}, env, ws).provider == "anthropic"
    assert resolve({}, {}, ws).provider == "offline"
    # An explicit provider beats the DotCraft inference.
    assert resolve({}, {}, {**DOTCRAFT, "Provider": "offline"}).provider == "offline"


def test_empty_values_fall_through() -> None:
    settings = resolve({"model": None, "api_key": ""}, {"APPSERVER_MODEL": ""}, DOTCRAFT)
    assert settings.model == "qwen-max" and settings.api_key == "sk-workspace"


def test_vendor_variables_follow_the_chosen_provider() -> None:
    env = {
        "OPENAI_API_KEY": "sk-openai",
        "OPENAI_BASE_URL": "https://openai.example/v1",
        "ANTHROPIC_API_KEY": "sk-ant",
        "ANTHROPIC_BASE_URL": "https://anthropic.example",
    }
    openai = resolve({"provider": "openai"}, env)
    assert (openai.api_key, openai.base_url) == ("sk-openai", "https://openai.example/v1")
    anthropic = resolve({"provider": "anthropic"}, env)
    assert (anthropic.api_key, anthropic.base_url) == ("sk-ant", "https://anthropic.example")
    offline = resolve({}, env)
    assert (offline.api_key, offline.base_url) == (None, None)


def test_dashscope_key_wins_for_a_dashscope_endpoint() -> None:
    env = {"OPENAI_API_KEY": "sk-openai", "DASHSCOPE_API_KEY": "sk-dash"}
    assert resolve({}, env, DOTCRAFT).api_key == "sk-dash"
    assert resolve({"provider": "openai"}, env).api_key == "sk-openai"


def test_key_names_ignore_case_dashes_and_underscores() -> None:
    settings = resolve(
        {"base-url": "https://x.example/v1", "maxRetries": 0},
        {},
        {"provider": "OpenAI-Compatible", "apikey": "k", "TIMEOUT": "7.5"},
    )
    assert settings == ProviderSettings(
        provider="openai", base_url="https://x.example/v1", api_key="k", timeout=7.5, max_retries=0
    )


def test_numbers_from_environment_and_cli() -> None:
    env = {"APPSERVER_TIMEOUT": "30", "APPSERVER_MAX_RETRIES": "5"}
    assert (resolve({}, env).timeout, resolve({}, env).max_retries) == (30.0, 5)
    assert resolve({"timeout": 3, "max_retries": 1}, env).max_retries == 1


@pytest.mark.parametrize(
    ("cli", "message"),
    [
        ({"provider": "gemini"}, "unknown provider"),
        ({"timeout": "soon"}, "timeout must be a number"),
        ({"timeout": 0}, "timeout must be positive"),
        ({"max_retries": -1}, "max_retries"),
        ({"max_retries": 1.5}, "max_retries"),
        ({"model": 42}, r"model must be a string, got 42 \(in a config.json: the user's"),
    ],
)
def test_invalid_values_are_rejected(cli: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        resolve(cli)


def test_aliases() -> None:
    assert resolve({"provider": "claude"}).provider == "anthropic"
    assert resolve({"provider": "DashScope"}).provider == "openai"


def test_make_provider_builds_each_kind() -> None:
    assert isinstance(make_provider(ProviderSettings()), OfflineProvider)

    openai = make_provider(
        ProviderSettings(
            provider="openai",
            model="m1",
            base_url="http://127.0.0.1:1/v1",
            api_key="k",
            timeout=9,
            max_retries=0,
        )
    )
    assert isinstance(openai, OpenAIProvider)
    assert (openai.default_model, openai.base_url, openai.api_key) == (
        "m1",
        "http://127.0.0.1:1/v1",
        "k",
    )
    assert (openai.timeout, openai.max_retries) == (9, 0)

    anthropic = make_provider(ProviderSettings(provider="anthropic", api_key="k"))
    assert isinstance(anthropic, AnthropicProvider)
    assert anthropic.default_model == "claude-sonnet-4-6" and anthropic.base_url is None


def test_describe_never_shows_the_key() -> None:
    text = ProviderSettings(provider="openai", api_key="sk-secret").describe()
    assert "sk-secret" not in text and "api_key=set" in text
