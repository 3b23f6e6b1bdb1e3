"""Model providers: choosing one and building it.

:func:`resolve_settings` decides which provider to use and how to reach it;
:func:`make_provider` builds it. Each setting is taken from the first source
that has a non-empty value, in this order:

1. **CLI flags** (``cli``): ``provider``, ``model``, ``base_url``, ``api_key``,
   ``timeout``, ``max_retries``.
2. **AppServer environment**: ``APPSERVER_PROVIDER``, ``APPSERVER_MODEL``,
   ``APPSERVER_BASE_URL``, ``APPSERVER_API_KEY``, ``APPSERVER_TIMEOUT``,
   ``APPSERVER_MAX_RETRIES``.
3. **The provider's usual environment** (only for the provider chosen):
   ``OPENAI_BASE_URL`` / ``OPENAI_API_KEY`` for ``openai`` (with a DashScope
   base URL, ``DASHSCOPE_API_KEY`` is tried before ``OPENAI_API_KEY``);
   ``ANTHROPIC_BASE_URL`` / ``ANTHROPIC_API_KEY`` for ``anthropic``;
   ``OPENAI_ORG_ID`` / ``OPENAI_PROJECT_ID`` (``openai`` only) become its
   organisation and project headers.
4. **The user's settings** (``user``: ``<home>/workspaces/<id>/config.json``
   over ``<home>/config.json``, outside any repository; see
   :mod:`appserver.storage.user_settings`), DotCraft's key names: ``Provider``,
   ``Model``, ``EndPoint``, ``ApiKey``, ``Timeout``, ``MaxRetries``.
5. **Workspace config** (``.craft/config.json``, which can arrive with a
   checkout): ``Provider``, ``Model``, ``Timeout``, ``MaxRetries``; its
   ``ApiKey`` and ``EndPoint`` only when the workspace is ``trusted`` (the
   old place, read with a warning), and its ``EndPoint`` only together with
   its own ``ApiKey`` (or no key at all): a key from the environment or the
   user's settings is never sent to an address a workspace file chose.
6. **Defaults**: provider ``offline``, the provider's default model and base
   URL, no key, timeout 120 s, 2 retries.

One exception to 6: settings that name an ``EndPoint`` or ``ApiKey`` but no
``Provider`` select ``openai``. DotCraft configs look like that and mean an
OpenAI-compatible endpoint; environment variables alone never switch away
from ``offline``, so an ``OPENAI_API_KEY`` exported for other tools does not
turn on a paid API.

Key names are matched ignoring case, ``-`` and ``_`` (``base_url``,
``base-url``, ``baseUrl``, ``BaseUrl`` are the same key). Provider names:
``offline``, ``openai`` (aliases ``openai-compatible``, ``dashscope``),
``anthropic`` (alias ``claude``). Invalid values raise :class:`ValueError`.

The network providers are imported only when built, and their HTTP library
loads in the background after start-up (``warm``): an offline server never
pays for it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import urlsplit

# Resolving settings loads no provider: the interface and each provider are
# imported when a provider is built (a stdio server resolves its settings
# before it answers `initialize`, and builds the provider after).
if TYPE_CHECKING:
    from appserver.providers.base import Provider
    from appserver.providers.offline import OfflineProvider

log = logging.getLogger("appserver.providers")

ProviderName = Literal["offline", "openai", "anthropic"]

DEFAULT_TIMEOUT = 120.0
DEFAULT_MAX_RETRIES = 2

_PROVIDER_ALIASES: dict[str, ProviderName] = {
    "offline": "offline",
    "openai": "openai",
    "openaicompatible": "openai",
    "openaicompat": "openai",
    "dashscope": "openai",
    "anthropic": "anthropic",
    "claude": "anthropic",
}


@dataclass(frozen=True)
class ProviderSettings:
    """Everything needed to build a provider (see the module docstring)."""

    provider: ProviderName = "offline"
    model: str | None = None  # None: the provider's default model
    base_url: str | None = None  # None: the provider's official endpoint
    api_key: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    max_retries: int = DEFAULT_MAX_RETRIES
    # OpenAI's organisation and project headers (OPENAI_ORG_ID, OPENAI_PROJECT_ID,
    # the variables the openai SDK reads).
    organization: str | None = None
    project: str | None = None

    def describe(self) -> str:
        """A log-safe one-line summary (never includes the key)."""
        key = "set" if self.api_key else "missing"
        return (
            f"provider={self.provider} model={self.model or '(default)'} "
            f"base_url={self.base_url or '(default)'} api_key={key}"
        )


def _norm(key: str) -> str:
    return key.lower().replace("-", "").replace("_", "")


def _lookup(source: Mapping[str, Any], key: str) -> Any:
    wanted = _norm(key)
    for name, value in source.items():
        if _norm(name) == wanted and value is not None and value != "":
            return value
    return None


def _first(*values: Any) -> Any:
    for value in values:
        if value is not None and value != "":
            return value
    return None


def _text(value: Any, what: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        # Flags and variables are always text: a settings file set this.
        raise ValueError(
            f"{what} must be a string, got {value!r} (in a config.json: the user's settings "
            "for this workspace, or the workspace's .craft/config.json)"
        )
    return value.strip() or None


def resolve_settings(
    cli: Mapping[str, Any],
    env: Mapping[str, str],
    workspace_config: Mapping[str, Any],
    *,
    user: Mapping[str, Any] | None = None,
    trusted: bool = False,
) -> ProviderSettings:
    """Resolve provider settings with precedence CLI > APPSERVER_* > vendor env >
    the user's settings > the workspace file (see the module docstring)."""
    ws = workspace_layer(workspace_config, trusted)
    mine: Mapping[str, Any] = user or {}

    raw_provider = _text(
        _first(
            _lookup(cli, "provider"),
            env.get("APPSERVER_PROVIDER"),
            _lookup(mine, "provider"),
            _lookup(ws, "provider"),
        ),
        "provider",
    )
    provider: ProviderName
    if raw_provider is not None:
        provider = _provider_name(raw_provider)
    elif any(_lookup(layer, key) is not None for layer in (mine, ws) for key in _ENDPOINT_KEYS):
        provider = "openai"
    else:
        provider = "offline"

    model = _text(
        _first(
            _lookup(cli, "model"),
            env.get("APPSERVER_MODEL"),
            _lookup(mine, "model"),
            _lookup(ws, "model"),
        ),
        "model",
    )

    outer_url = _first(
        _lookup(cli, "base_url"),
        env.get("APPSERVER_BASE_URL"),
        *(env.get(name) for name in _vendor_base_url_vars(provider)),
        _lookup(mine, "endpoint"),
    )
    base_url = _text(_first(outer_url, _lookup(ws, "endpoint")), "base_url")
    outer_key = _first(
        _lookup(cli, "api_key"),
        env.get("APPSERVER_API_KEY"),
        *(env.get(name) for name in _vendor_key_vars(provider, base_url)),
        _lookup(mine, "apikey"),
    )
    if outer_url is None and base_url is not None and outer_key is not None:
        # The workspace file chose the address and the key is the user's.
        log.warning(
            "ignoring EndPoint %s from .craft/config.json: an API key from the environment "
            "or your settings is never sent to an address a workspace file chose",
            base_url,
        )
        base_url = None
        outer_key = _first(
            _lookup(cli, "api_key"),
            env.get("APPSERVER_API_KEY"),
            *(env.get(name) for name in _vendor_key_vars(provider, None)),
            _lookup(mine, "apikey"),
        )
    api_key = _text(_first(outer_key, _lookup(ws, "apikey")), "api_key")

    timeout = _number(
        _first(
            _lookup(cli, "timeout"),
            env.get("APPSERVER_TIMEOUT"),
            _lookup(mine, "timeout"),
            _lookup(ws, "timeout"),
        ),
        "timeout",
        DEFAULT_TIMEOUT,
    )
    retries = _number(
        _first(
            _lookup(cli, "max_retries"),
            env.get("APPSERVER_MAX_RETRIES"),
            _lookup(mine, "max_retries"),
            _lookup(ws, "max_retries"),
        ),
        "max_retries",
        DEFAULT_MAX_RETRIES,
    )
    if timeout <= 0:
        raise ValueError(f"timeout must be positive, got {timeout}")
    if retries < 0 or retries != int(retries):
        raise ValueError(f"max_retries must be a non-negative integer, got {retries}")

    return ProviderSettings(
        provider=provider,
        model=model,
        base_url=base_url,
        api_key=api_key,
        timeout=timeout,
        max_retries=int(retries),
        organization=_text(env.get("OPENAI_ORG_ID"), "OPENAI_ORG_ID")
        if provider == "openai"
        else None,
        project=_text(env.get("OPENAI_PROJECT_ID"), "OPENAI_PROJECT_ID")
        if provider == "openai"
        else None,
    )


_ENDPOINT_KEYS = ("endpoint", "apikey")


def workspace_layer(workspace_config: Mapping[str, Any], trusted: bool) -> dict[str, Any]:
    """What the workspace's own ``.craft/config.json`` may set: never a key or
    an address in an untrusted workspace; in a trusted one, with a warning
    that keys belong in the user's settings."""
    layer = dict(workspace_config)
    secret = [name for name in layer if _norm(name) in _ENDPOINT_KEYS and layer[name]]
    if secret and not trusted:
        log.warning(
            "ignoring %s in .craft/config.json: this workspace is not trusted",
            " and ".join(sorted(secret)),
        )
        for name in secret:
            del layer[name]
    elif any(_norm(name) == "apikey" for name in secret):
        log.warning(
            "ApiKey in .craft/config.json is read for now; keys belong in your own settings "
            "(workspace/config/update writes them there, outside the repository)"
        )
    return layer


def _provider_name(raw: str) -> ProviderName:
    name = _PROVIDER_ALIASES.get(_norm(raw))
    if name is None:
        raise ValueError(f"unknown provider {raw!r} (expected offline, openai or anthropic)")
    return name


def _vendor_base_url_vars(provider: ProviderName) -> tuple[str, ...]:
    if provider == "openai":
        return ("OPENAI_BASE_URL",)
    if provider == "anthropic":
        return ("ANTHROPIC_BASE_URL",)
    return ()


def _vendor_key_vars(provider: ProviderName, base_url: str | None) -> tuple[str, ...]:
    if provider == "openai":
        host = (urlsplit(base_url).hostname or "") if base_url else ""
        # A DashScope endpoint needs a DashScope key; an OpenAI key exported for
        # other tools would only produce a confusing 401.
        if "dashscope" in host:
            return ("DASHSCOPE_API_KEY", "OPENAI_API_KEY")
        return ("OPENAI_API_KEY",)
    if provider == "anthropic":
        return ("ANTHROPIC_API_KEY",)
    return ()


def key_variables(settings: ProviderSettings) -> tuple[str, ...]:
    """The environment variables an API key for ``settings`` is read from, in order."""
    if settings.provider == "offline":
        return ()
    return ("APPSERVER_API_KEY", *_vendor_key_vars(settings.provider, settings.base_url))


def missing_key_warning(settings: ProviderSettings) -> str | None:
    """What to set when a hosted provider has no API key; ``None`` when nothing is missing.

    Every call such a provider makes fails with ``MissingApiKey`` until a key is set.
    """
    names = key_variables(settings)
    if not names or settings.api_key:
        return None
    listed = f"{', '.join(names[:-1])} or {names[-1]}"
    said = f"no API key for provider {settings.provider}: set {listed} "
    said += "(or apiKey with workspace/config/update); until then its "
    if settings.base_url is None:
        return said + "turns fail with MissingApiKey"
    if _local_endpoint(settings.base_url):
        return None  # a local server (Ollama, vLLM, LM Studio) needs none
    return said + f"requests to {settings.base_url} go without one"


def _local_endpoint(url: str) -> bool:
    """Whether ``url`` is on this machine or a private network (such a model
    server usually wants no key): loopback, private and link-local addresses,
    ``localhost``, ``*.local`` and single-label names."""
    import ipaddress
    from urllib.parse import urlsplit

    host = (urlsplit(url).hostname or "").lower()
    if host == "localhost" or host.endswith((".localhost", ".local")):
        return True
    if host and "." not in host and ":" not in host:
        return True  # a single name: a container's (ollama) or this network's
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    return address.is_loopback or address.is_private or address.is_link_local


def _number(value: Any, what: str, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a number, got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise ValueError(f"{what} must be a number, got {value!r}") from None


def known_model(settings: ProviderSettings) -> str | None:
    """The model a provider built from ``settings`` uses by default, when that is
    known without building it: the configured one, or the offline model's."""
    if settings.model:
        return settings.model
    return "offline" if settings.provider == "offline" else None


def settled_model(
    provider_options: Mapping[str, Any], workspace_config: Mapping[str, Any], user: Any
) -> tuple[str, str] | None:
    """(provider, model) when the settings give the same whether or not the
    workspace is trusted and the model is known, else ``None`` (what an answer
    written before the provider is built may name: faces' early answers)."""
    chosen = set()
    for trusted in (True, False):
        try:
            settings = resolve_settings(
                provider_options, os.environ, workspace_config, user=user, trusted=trusted
            )
        except ValueError:
            return None
        chosen.add((settings.provider, known_model(settings)))
    if len(chosen) != 1:
        return None
    provider, model = chosen.pop()
    return None if model is None else (provider, model)


def make_provider(settings: ProviderSettings) -> Provider:
    """Build the provider ``settings`` describe (no network access happens here)."""
    if settings.provider == "openai":
        from appserver.providers.openai_compat import OpenAIProvider

        return OpenAIProvider(
            api_key=settings.api_key,
            base_url=settings.base_url,
            model=settings.model,
            timeout=settings.timeout,
            max_retries=settings.max_retries,
            organization=settings.organization,
            project=settings.project,
        )
    if settings.provider == "anthropic":
        from appserver.providers.anthropic_provider import AnthropicProvider

        return AnthropicProvider(
            api_key=settings.api_key,
            base_url=settings.base_url,
            model=settings.model,
            timeout=settings.timeout,
            max_retries=settings.max_retries,
        )
    from appserver.providers.offline import OfflineProvider

    return OfflineProvider()


def __getattr__(name: str) -> Any:
    if name == "OfflineProvider":  # re-exported, imported at first use
        from appserver.providers.offline import OfflineProvider

        return OfflineProvider
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "OfflineProvider",
    "ProviderName",
    "ProviderSettings",
    "key_variables",
    "make_provider",
    "missing_key_warning",
    "resolve_settings",
    "settled_model",
]
