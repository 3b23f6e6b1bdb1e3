"""Wire models and method-table entries of `model/list` and `workspace/config/*`."""

from __future__ import annotations

from appserver.protocol.spec import MethodSpec, NotificationSpec, ServerRequestSpec

METHOD_SPECS: list[MethodSpec] = []
NOTIFICATION_SPECS: list[NotificationSpec] = []
SERVER_REQUEST_SPECS: list[ServerRequestSpec] = []
