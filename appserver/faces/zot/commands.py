"""zot's commands, one handler each. ``Commands.dispatch`` answers one parsed command
(``hello``, ``ping``, ``prompt``, ``compact``, ``abort``, ``get_state``,
``get_messages``, ``clear``, ``set_model``, ``set_reasoning``, ``get_models``) with its
``response`` frame; ``prompt`` and ``compact`` are queued as jobs.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from appserver.faces.common import decode_base64, store_image
from appserver.faces.zot.jobs import Job
from appserver.faces.zot.wire import BUSY, Frame

if TYPE_CHECKING:
    from appserver.faces.zot.jobs import Jobs
    from appserver.faces.zot.session import Session

Handler = Callable[[str | None, Frame], Awaitable[None]]


class Commands:
    """The handlers of one session's commands."""

    def __init__(self, session: Session, jobs: Jobs) -> None:
        self.session = session
        self.jobs = jobs

    async def dispatch(self, kind: str, request_id: str | None, frame: Frame) -> None:
        handler = self._handlers().get(kind)
        if handler is None:
            await self.session.fail(request_id, kind, "unknown command")
            return
        await handler(request_id, frame)

    def _handlers(self) -> dict[str, Handler]:
        return {
            "hello": self._hello,
            "prompt": self._prompt,
            "abort": self._abort,
            "compact": self._compact,
            "get_state": self._get_state,
            "get_messages": self._get_messages,
            "clear": self._clear,
            "set_model": self._set_model,
            "set_reasoning": self._set_reasoning,
            "get_models": self._get_models,
            "ping": self._ping,
        }

    async def _hello(self, request_id: str | None, frame: Frame) -> None:
        from appserver.faces.zot.handshake import hello_data

        session = self.session
        provider = session.runtime.engine.provider.name
        await session.respond(request_id, "hello", hello_data(provider, session.current_model()))

    async def _ping(self, request_id: str | None, frame: Frame) -> None:
        await self.session.respond(request_id, "ping", {"pong": True})

    async def _prompt(self, request_id: str | None, frame: Frame) -> None:
        message = frame.get("message", "")
        if message is None:
            message = ""
        if not isinstance(message, str):
            await self.session.fail(request_id, "prompt", "'message' must be a string")
            return
        try:
            images = await self._save_images(frame.get("images"))
        except ValueError as exc:
            await self.session.fail(request_id, "prompt", str(exc))
            return
        parts: list[Any] = []
        if message or not images:
            parts.append({"type": "text", "text": message})  # as data: no model (inputs.py)
        if images:
            from appserver.protocol.turns import LocalImagePart

            parts += [LocalImagePart(type="localImage", path=path) for path in images]
        await self.jobs.enqueue(Job("prompt", parts, id=request_id))

    async def _save_images(self, images: Any) -> list[str]:
        """Decode ``images`` and store each under .craft/attachments/images/<sha256>.<ext>."""
        if images is None:
            return []
        if not isinstance(images, list):
            raise ValueError("'images' must be a list")
        paths: list[str] = []
        for index, image in enumerate(images):
            where = f"images[{index}]"
            if not isinstance(image, dict):
                raise ValueError(f"{where} must be an object")
            data = image.get("data")
            mime_type = image.get("mime_type")
            if mime_type is not None and not isinstance(mime_type, str):
                raise ValueError(f"{where}.mime_type must be a string")
            if not isinstance(data, str):
                raise ValueError(f"{where}.data must be base64 text")
            try:
                path, _ = await store_image(self.session.workspace, decode_base64(data))
            except ValueError as exc:
                raise ValueError(f"{where}: {exc}") from None
            paths.append(path)
        return paths

    async def _compact(self, request_id: str | None, frame: Frame) -> None:
        await self.jobs.enqueue(Job("compact", id=request_id))

    async def _abort(self, request_id: str | None, frame: Frame) -> None:
        # Answered first: the aborted turn's turn_end and done follow it.
        await self.session.respond(request_id, "abort")
        await self.jobs.abort()

    async def _get_state(self, request_id: str | None, frame: Frame) -> None:
        session = self.session
        messages = await session.transcript()
        await session.respond(
            request_id,
            "get_state",
            {
                "provider": session.runtime.engine.provider.name,
                "model": session.current_model(),
                "cwd": str(session.workspace),
                "message_count": len(messages),
                "busy": self.jobs.pending > 0,
                "usage": session.totals.wire(),
            },
        )

    async def _get_messages(self, request_id: str | None, frame: Frame) -> None:
        messages = await self.session.transcript()
        await self.session.respond(request_id, "get_messages", {"messages": messages})

    async def _clear(self, request_id: str | None, frame: Frame) -> None:
        if self.jobs.pending:
            await self.session.fail(request_id, "clear", BUSY)
            return
        self.session.thread_id = None  # the next prompt starts a new thread; this one stays
        await self.session.respond(request_id, "clear")

    async def _set_model(self, request_id: str | None, frame: Frame) -> None:
        from appserver.providers.base import ProviderUnavailable

        session = self.session
        model = frame.get("model")
        if not isinstance(model, str) or not model:
            await session.fail(request_id, "set_model", "'model' must be a non-empty string")
            return
        provider = session.runtime.engine.provider
        try:
            known = [info.id for info in await provider.list_models()]
        except ProviderUnavailable as exc:
            await session.fail(request_id, "set_model", f"cannot list models: {exc.message}")
            return
        if model not in known:
            await session.fail(
                request_id, "set_model", f'unknown model "{model}" for provider {provider.name}'
            )
            return
        session.model = model
        if session.thread_id is not None:
            thread = await session.runtime.threads.get(session.thread_id)
            config = dict(thread.configuration or {})
            config["model"] = model
            await session.runtime.threads.configure(session.thread_id, config)
        await session.respond(request_id, "set_model", {"model": model})

    async def _set_reasoning(self, request_id: str | None, frame: Frame) -> None:
        await self.session.respond(request_id, "set_reasoning")  # accepted; nothing to set

    async def _get_models(self, request_id: str | None, frame: Frame) -> None:
        from appserver.providers.base import ProviderUnavailable

        provider = self.session.runtime.engine.provider
        try:
            infos = await provider.list_models()
        except ProviderUnavailable as exc:
            await self.session.fail(request_id, "get_models", f"cannot list models: {exc.message}")
            return
        models = [
            {
                "id": info.id,
                "provider": provider.name,
                # Unknown to the providers' model lists: zot's zero values.
                "context_window": 0,
                "max_output": 0,
                "reasoning": False,
            }
            for info in infos
        ]
        await self.session.respond(request_id, "get_models", {"models": models})
