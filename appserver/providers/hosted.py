"""What every provider reached over HTTP shares (OpenAI-compatible, Anthropic):
its settings, its HTTP client (:class:`~appserver.providers.http.HttpApi`),
warming and closing that client, and reading the API's list of models. Each
provider adds its own wire: the request body, the stream's events, its errors.
"""

from __future__ import annotations

import logging
from typing import Any

from appserver import __version__
from appserver.providers._common import unavailable_code
from appserver.providers.base import ProviderError, ProviderUnavailable
from appserver.providers.http import HttpApi, classify_error


class HostedProvider:
    """A model behind an HTTP API.

    ``base_url`` is where the API is (``None``: the provider's own ``root``);
    ``headers`` are the provider's own (its key, its version), beside our
    ``user-agent`` and ``accept``. Without ``api_key``, a call to the vendor's
    own API fails at once with ``MissingApiKey`` and the provider's
    :attr:`missing_key` message; a call to another endpoint (``base_url``: a
    local Ollama, vLLM or LM Studio needs no key) is made without one, and if
    it is refused the message says where a key would come from.
    """

    name = "hosted"
    #: What a call without a key is told (where the key comes from).
    missing_key = "MissingApiKey: no API key"

    def __init__(
        self,
        *,
        api_key: str | None,
        base_url: str | None,
        default_model: str,
        root: str,
        headers: dict[str, str],
        timeout: float,
        max_retries: int,
    ) -> None:
        self.api_key = api_key
        self.base_url = base_url
        self.default_model = default_model
        self.timeout = timeout
        self.max_retries = max_retries
        headers = {
            "user-agent": f"appserver/{__version__}",
            "accept": "application/json",
            **headers,
        }
        self.api = HttpApi(base_url or root, headers, timeout=timeout, max_retries=max_retries)

    @property
    def keyless(self) -> bool:
        """No key for the vendor's own API: every call fails at once."""
        return not self.api_key and self.base_url is None

    async def warm(self) -> None:
        """Build the HTTP client ahead of the first turn (off the event loop),
        so a server answers ``initialize`` before paying for it."""
        if not self.keyless:
            await self.api.warm()

    async def aclose(self) -> None:
        """Close pooled HTTP connections (the provider can be used again afterwards)."""
        await self.api.aclose()

    def failure(self, exc: Exception, hint: str = "") -> ProviderError:
        """What a stream that failed with ``exc`` ends with (``hint`` added to
        its message); a failure of no known kind is logged with its traceback."""
        kind, message = classify_error(exc)
        hint += self._key_hint(kind)
        if kind == "other":
            # on the provider module's own logger, as before this class
            log = logging.getLogger(type(self).__module__)
            log.warning("model call failed: %s", message, exc_info=exc)
        return ProviderError(kind, message + hint)

    def _key_hint(self, kind: str) -> str:
        """Where a key comes from, for an endpoint asked without one that refused."""
        if kind != "auth" or self.api_key:
            return ""
        return f" ({self.missing_key.removeprefix('MissingApiKey: ')})"

    async def listed_models(self, path: str) -> list[dict[str, Any]]:
        """The model objects (each with a string ``id``) that ``GET path``
        lists under ``data``; raises :class:`ProviderUnavailable` on any failure."""
        if self.keyless:
            raise ProviderUnavailable("MissingApiKey", self.missing_key)
        try:
            listing = await self.api.get_json(path)
        except Exception as exc:
            kind, message = classify_error(exc)
            raise ProviderUnavailable(
                unavailable_code(kind), message + self._key_hint(kind)
            ) from exc
        models = listing.get("data") if isinstance(listing, dict) else None
        return [
            model
            for model in models or ()
            if isinstance(model, dict) and isinstance(model.get("id"), str)
        ]


def count(value: Any) -> int | None:
    """A token count from an API's usage object, or ``None`` when it is not one
    (absent, not an integer, negative, or past what JSON carries exactly): the
    turn then estimates, rather than report a made-up 0 or a negative total."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**53:
        return None
    return value
