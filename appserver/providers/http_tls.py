"""The TLS trust the providers' HTTP client verifies a model API with.

``httpx2``'s context (:func:`full_context`) loads the system's whole CA bundle
when it is built, and importing ``httpcore2`` to build it costs as much again:
~130 ms of CPU together here, in every session with an ``https`` model, and on
the first request of a one-shot face. Where the system keeps its CAs in
OpenSSL's directory of hashed certificates (Debian, Ubuntu, Alpine:
``/etc/ssl/certs``, kept in step with the bundle by ``update-ca-certificates``),
:func:`quick_context` points OpenSSL at that directory instead, and OpenSSL
reads a CA only when a handshake needs it. Should a handshake fail to verify
with it, the client builds the full context and tries again, so nothing the
full context trusts is refused. ``SSL_CERT_FILE`` and ``SSL_CERT_DIR`` are
honoured as ``httpx2`` honours them, without loading it (docs/providers.md,
"How the providers talk HTTP").
"""

from __future__ import annotations

import os
import re
import ssl
import sys
from collections.abc import Callable

# The names OpenSSL looks certificates up by in a hashed directory (the test
# httpcore2 makes of one).
_HASHED_NAME = re.compile(r"[0-9a-fA-F]{8}\.\d")


def verifying_context() -> tuple[ssl.SSLContext, Callable[[], ssl.SSLContext] | None]:
    """The context to verify a model API with, and what builds a fuller one
    should a handshake fail to verify with it (``None``: nothing fuller).

    As ``httpx2`` chooses: ``SSL_CERT_FILE``, else ``SSL_CERT_DIR``, else the
    system's store, which is the hashed directory where there is one."""
    cafile = os.environ.get("SSL_CERT_FILE")
    if cafile:
        return _for_http1(ssl.create_default_context(cafile=cafile)), None
    capath = os.environ.get("SSL_CERT_DIR")
    if capath:
        return _for_http1(ssl.create_default_context(capath=capath)), None
    quick = quick_context()
    if quick is not None:
        return quick, full_context
    return full_context(), None


def full_context() -> ssl.SSLContext:
    """The verifying context ``httpx2`` builds: ``SSL_CERT_FILE``,
    ``SSL_CERT_DIR``, else the operating system's store (all its roots)."""
    import httpx2

    return _for_http1(httpx2.create_ssl_context())


def quick_context() -> ssl.SSLContext | None:
    """A context that reads the system's CAs as handshakes need them, or
    ``None`` where that is not how the system keeps them (macOS and Windows,
    where ``httpx2`` asks the operating system; a distribution without a
    hashed directory)."""
    if sys.platform in ("darwin", "win32"):
        return None
    directory = ssl.get_default_verify_paths().openssl_capath
    if not hashed_directory(directory):
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.load_verify_locations(capath=directory)
    return _for_http1(context)


def hashed_directory(path: str) -> bool:
    """Whether ``path`` is a directory OpenSSL can look certificates up in."""
    try:
        return any(_HASHED_NAME.fullmatch(name) for name in os.listdir(path))
    except OSError:
        return False


def _for_http1(context: ssl.SSLContext) -> ssl.SSLContext:
    # What httpcore2 offers too: the client speaks HTTP/1.1 only.
    context.set_alpn_protocols(["http/1.1"])
    return context
