"""The names of an IDE's own request families (``_family/method``), without
their wire models (:mod:`appserver.protocol.editor_families`): a thread's
declared tools and every turn check names; only a thread whose editor serves
a family needs the models."""

import re

# `_family/method[/more]`: ACP reserves names starting with `_` for custom methods;
# `fs` and `terminal` are the server's own (ext/acp/fs/*, ext/acp/terminal/*).
_ACP_METHOD = re.compile(r"^_[A-Za-z0-9_.-]{1,63}(/[A-Za-z0-9_.-]{1,64}){1,4}$")


def acp_method(value: str) -> str:
    """A declared ``acpMethod`` as ``_family/method`` (a leading ``ext/acp/`` is
    dropped); ``ValueError`` unless it names a custom (``_``) family and a method."""
    method = value.strip().removeprefix("ext/acp/").strip("/")
    if not _ACP_METHOD.match(method):
        raise ValueError(
            "acpMethod must be `_family/method` (a custom ACP family, starting with `_`)"
        )
    return method


def family_of(method: str) -> str:
    """The family of a ``_family/method`` (``_unity``)."""
    return method.split("/", 1)[0]
