"""``providers/http_tls.py``: the system's CAs read as handshakes need them,
and the full context after a handshake the quick one could not verify."""

from __future__ import annotations

import asyncio
import shutil
import ssl
import subprocess
import sys
from pathlib import Path

import pytest
import trustme

from appserver.providers import http_tls
from appserver.providers.http_client import HttpClient
from tests.providers.test_http_client import answering, client_tls, server_tls, serving

OK = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"


def hashed(directory: Path, *authorities: trustme.CA) -> Path:
    """``directory`` with each CA's certificate under OpenSSL's hashed name."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command to hash certificate names")
    directory.mkdir()
    for index, authority in enumerate(authorities):
        authority.cert_pem.write_to_path(str(directory / f"ca{index}.pem"))
    subprocess.run(["openssl", "rehash", str(directory)], check=True, capture_output=True)
    return directory


@pytest.fixture
def system_capath(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Where ``quick_context`` finds the system's CAs: a directory of this test's."""
    directory = tmp_path / "certs"
    paths = ssl.get_default_verify_paths()
    monkeypatch.setattr(
        ssl, "get_default_verify_paths", lambda: paths._replace(openssl_capath=str(directory))
    )
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    monkeypatch.setattr(sys, "platform", "linux")
    return directory


async def _get(api: HttpClient, port: int) -> bytes:
    return await (await api.send("GET", f"https://localhost:{port}/v1/models", None)).aread()


async def test_the_quick_trust_reads_a_ca_only_when_a_handshake_needs_it(
    system_capath: Path,
) -> None:
    authority = trustme.CA()
    hashed(system_capath, trustme.CA(), authority)
    context = http_tls.quick_context()
    assert context is not None
    assert context.cert_store_stats()["x509_ca"] == 0  # nothing read yet
    async with serving(answering(OK), server_tls(authority)) as server:
        api = HttpClient({}, timeout=5, connect_timeout=5, tls=context, follow_redirects=True)
        assert await _get(api, server.port) == b"ok"
        await api.aclose()
    assert context.cert_store_stats()["x509_ca"] == 1  # the one it needed


async def test_a_server_the_quick_trust_cannot_verify_gets_the_full_one(
    system_capath: Path,
) -> None:
    authority = trustme.CA()
    hashed(system_capath, trustme.CA())  # another CA only
    quick = http_tls.quick_context()
    assert quick is not None
    async with serving(answering(OK), server_tls(authority)) as server:
        api = HttpClient(
            {},
            timeout=5,
            connect_timeout=5,
            tls=quick,
            follow_redirects=True,
            fuller_tls=lambda: client_tls(authority),
        )
        assert await _get(api, server.port) == b"ok"
        assert api.tls is not quick and api.fuller_tls is None
        await api.aclose()
        alone = HttpClient({}, timeout=5, connect_timeout=5, tls=quick, follow_redirects=True)
        with pytest.raises(ssl.SSLCertVerificationError):
            await _get(alone, server.port)
        await alone.aclose()


def test_no_quick_trust_where_the_store_is_not_hashed(
    system_capath: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    system_capath.mkdir()
    (system_capath / "ca-bundle.crt").write_text("not hashed")
    assert http_tls.quick_context() is None  # a directory OpenSSL cannot look up in
    context, fuller = http_tls.verifying_context()
    assert fuller is None and context.cert_store_stats()["x509_ca"] > 0  # httpx2's, whole
    hashed(system_capath / "hashed", trustme.CA())
    paths = ssl.get_default_verify_paths()._replace(openssl_capath=str(system_capath / "hashed"))
    monkeypatch.setattr(ssl, "get_default_verify_paths", lambda: paths)
    context, fuller = http_tls.verifying_context()
    assert fuller is http_tls.full_context and context.cert_store_stats()["x509_ca"] == 0
    monkeypatch.setattr(sys, "platform", "darwin")
    assert http_tls.quick_context() is None


def test_ssl_cert_file_and_dir_choose_the_roots_as_httpx2_reads_them(
    system_capath: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    authority = trustme.CA()
    authority.cert_pem.write_to_path(str(tmp_path / "roots.pem"))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "roots.pem"))
    monkeypatch.setenv("SSL_CERT_DIR", str(hashed(tmp_path / "dir", trustme.CA())))
    context, fuller = http_tls.verifying_context()
    assert fuller is None and context.cert_store_stats()["x509_ca"] == 1  # the file's one
    monkeypatch.delenv("SSL_CERT_FILE")
    context, fuller = http_tls.verifying_context()
    assert fuller is None and context.cert_store_stats()["x509_ca"] == 0  # read as needed


def test_both_contexts_verify_the_host_and_its_certificate() -> None:
    for context in (http_tls.full_context(), http_tls.quick_context()):
        if context is not None:
            assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname


async def test_connects_failing_at_once_build_the_full_trust_once(system_capath: Path) -> None:
    authority = trustme.CA()
    hashed(system_capath, trustme.CA())  # another CA only
    quick = http_tls.quick_context()
    assert quick is not None
    builds: list[int] = []

    def fuller() -> ssl.SSLContext:
        builds.append(1)
        return client_tls(authority)

    async with serving(answering(OK), server_tls(authority)) as server:
        api = HttpClient(
            {}, timeout=5, connect_timeout=5, tls=quick, follow_redirects=True, fuller_tls=fuller
        )
        answers = await asyncio.gather(*(_get(api, server.port) for _ in range(4)))
        assert answers == [b"ok"] * 4 and builds == [1]
        await api.aclose()


async def test_a_full_trust_that_cannot_be_built_leaves_the_verification_error(
    system_capath: Path,
) -> None:
    authority = trustme.CA()
    hashed(system_capath, trustme.CA())
    quick = http_tls.quick_context()
    assert quick is not None

    def broken() -> ssl.SSLContext:
        raise RuntimeError("no roots today")

    async with serving(answering(OK), server_tls(authority)) as server:
        api = HttpClient(
            {}, timeout=5, connect_timeout=5, tls=quick, follow_redirects=True, fuller_tls=broken
        )
        with pytest.raises(ssl.SSLCertVerificationError) as raised:
            await _get(api, server.port)
        assert isinstance(raised.value.__cause__, RuntimeError)
        await api.aclose()


async def test_an_ssl_cert_file_that_is_not_there_is_a_clear_provider_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from appserver.providers.http import ApiError, HttpApi

    monkeypatch.setenv("SSL_CERT_FILE", "/nowhere/roots.pem")
    api = HttpApi("https://model.test/v1", {}, timeout=5, max_retries=0)
    await api.warm()  # reports nothing: the call does
    with pytest.raises(ApiError, match="cannot call the model API") as raised:
        await api.get_json("/models")
    assert raised.value.kind == "other"
