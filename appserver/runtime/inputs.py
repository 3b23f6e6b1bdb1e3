"""Turning ``turn/start`` input parts into what the model sees.

``text`` stays as is. ``fileRef`` inlines a workspace file (capped).
``localImage`` reads an image file in the workspace. Both decide "in the
workspace" with the tools' one rule (``tools.sandbox.in_workspace``): a path
that resolves outside it, symlinks followed, is not read, and neither is
anything in the server's state directory ``.craft/`` (its config holds API
keys), except that ``localImage`` may read the server's own image store
(``.craft/attachments/images/``, where the faces and image URLs put what
they receive). The file is then opened without following links
(``tools.nofollow``), so a link swapped in after the check is not read.
``image`` fetches an http(s) URL,
refusing private, loopback and link-local addresses (checked at connect
time, so DNS rebinding cannot sneak past), with a timeout and size cap, and
stores the bytes once under ``.craft/attachments/images/``. Any failure
becomes a text placeholder (``[image:<url>]``, ``[localImage:<path>]``),
as in DotCraft, so a bad attachment never fails the turn.

Parts are ``protocol.turns`` models, except that a text part may come as its
wire data (``{"type": "text", "text": ...}``): a face that sends only text
builds no model, and its one-shot loads no pydantic.
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from appserver.providers.base import ImagePart
from appserver.runtime.errors import InvalidInput
from appserver.tools.base import ToolError
from appserver.tools.images import image_part, read_image, sniff_image
from appserver.tools.nofollow import PathChanged, open_regular
from appserver.tools.sandbox import ResolvedPath, Sandbox

if TYPE_CHECKING:
    from appserver.protocol.turns import FileRefPart, LocalImagePart

log = logging.getLogger("appserver.inputs")

MAX_FILE_BYTES = 256 * 1024
MAX_IMAGE_BYTES = 10 * 1024 * 1024
IMAGE_TIMEOUT = 15.0


@dataclass
class Materialized:
    """One user message, as stored (``native``/``materialized`` parts) and as sent."""

    display_text: str
    native_parts: list[dict[str, Any]]
    materialized_parts: list[dict[str, Any]] = field(default_factory=list)
    images: list[dict[str, Any]] = field(default_factory=list)
    instructions: list[str] = field(default_factory=list)


# A resolver turns a skillRef/commandRef part into materialized parts and
# extra system instructions; it raises to refuse (InvalidInput, or its family's error).
Resolver = Callable[[Any], Awaitable["Resolved"]]


@dataclass
class Resolved:
    parts: list[dict[str, Any]] = field(default_factory=list)
    instructions: list[str] = field(default_factory=list)


class InputMaterializer:
    def __init__(self, workspace: Path, attachments: Path, allow_private_urls: bool = False):
        self.workspace = workspace.resolve()
        self.sandbox = Sandbox(self.workspace)
        self.attachments = attachments
        self.allow_private_urls = allow_private_urls
        # Filled by the skills and commands families: part type -> resolver.
        self.resolvers: dict[str, Resolver] = {}

    def reject_unsupported(self, parts: Iterable[Any]) -> None:
        """:class:`InvalidInput` for reference parts no installed family can resolve."""
        models = [part for part in parts if not _is_text_data(part)]
        if not models:
            return
        from appserver.protocol.turns import CommandRefPart, SkillRefPart

        for part in models:
            if isinstance(part, SkillRefPart | CommandRefPart) and part.type not in self.resolvers:
                what = "skills" if isinstance(part, SkillRefPart) else "commands"
                raise InvalidInput(f"{part.type} '{part.name}': {what} are not available")

    async def materialize(self, parts: list[Any]) -> Materialized:
        if all(_is_text_data(part) for part in parts):
            texts = [str(part["text"]) for part in parts]
            return Materialized(
                display_text=" ".join(texts).strip(),
                native_parts=[{"type": "text", "text": text} for text in texts],
                materialized_parts=[{"type": "text", "text": text} for text in texts],
            )
        from appserver.protocol.turns import (
            CommandRefPart,
            FileRefPart,
            ImageUrlPart,
            LocalImagePart,
            SkillRefPart,
            TextPart,
        )

        parts = [TextPart(type="text", text=p["text"]) if _is_text_data(p) else p for p in parts]
        native = [part.to_wire() for part in parts]
        display = " ".join(part.text for part in parts if isinstance(part, TextPart)).strip()
        result = Materialized(display_text=display, native_parts=native)
        for part in parts:
            if isinstance(part, TextPart):
                result.materialized_parts.append({"type": "text", "text": part.text})
            elif isinstance(part, FileRefPart):
                text = await anyio.to_thread.run_sync(self._read_file, part)
                result.materialized_parts.append({"type": "text", "text": text})
            elif isinstance(part, LocalImagePart):
                if self._image_path(part.path) is None:
                    placeholder = f"[localImage:{part.path}: outside the workspace]"
                    result.materialized_parts.append({"type": "text", "text": placeholder})
                    continue
                image = await anyio.to_thread.run_sync(self._local_image, part)
                self._add_image(result, image, f"[localImage:{part.path}]")
            elif isinstance(part, ImageUrlPart):
                image = await self._remote_image(part.url)
                self._add_image(result, image, f"[image:{part.url}]")
            elif isinstance(part, SkillRefPart | CommandRefPart):
                self.reject_unsupported([part])
                resolved = await self.resolvers[part.type](part)
                result.materialized_parts.extend(resolved.parts)
                result.instructions.extend(resolved.instructions)
        if not result.display_text:
            result.display_text = " ".join(
                str(p.get("path") or p.get("url") or "") for p in native
            ).strip()
        return result

    @staticmethod
    def _add_image(result: Materialized, image: dict[str, Any] | None, placeholder: str) -> None:
        if image is None:
            result.materialized_parts.append({"type": "text", "text": placeholder})
        else:
            result.materialized_parts.append({"type": "localImage", **image})
            result.images.append(image)

    def _resolve(self, path: str) -> ResolvedPath | None:
        """``path`` (relative to the workspace) resolved, or ``None`` if it
        cannot be a path at all (empty, a NUL byte)."""
        try:
            return self.sandbox.resolve(path)
        except (ToolError, ValueError, OSError):
            return None

    def _inside(self, path: str) -> Path | None:
        """``path`` resolved if it lies in the workspace (the tools' rule:
        ``.craft/`` is outside), else ``None``."""
        resolved = self._resolve(path)
        return resolved.path if resolved is not None and resolved.inside else None

    def _image_path(self, path: str) -> Path | None:
        """``path`` resolved if a ``localImage`` may read it: in the workspace,
        or in the server's own image store (only sniffed images are read, so
        the store is no way to reach the rest of ``.craft/``)."""
        resolved = self._resolve(path)
        if resolved is None:
            return None
        store = Path(os.path.realpath(self.attachments))
        return resolved.path if resolved.inside or resolved.path.is_relative_to(store) else None

    def _read_file(self, part: FileRefPart) -> str:
        shown = part.display_path or part.path
        path = self._inside(part.path)
        if path is None:
            return f"[fileRef:{shown}: outside the workspace]"
        try:
            with open(open_regular(path, os.O_RDONLY), "rb") as handle:
                data = handle.read(MAX_FILE_BYTES + 1)
        except PathChanged:
            return f"[fileRef:{shown}: changed while being read]"
        except OSError as exc:
            return f"[fileRef:{shown}: {exc.strerror or 'unreadable'}]"
        truncated = len(data) > MAX_FILE_BYTES
        text = data[:MAX_FILE_BYTES].decode("utf-8", errors="replace")
        note = f"\n[... truncated at {MAX_FILE_BYTES} bytes]" if truncated else ""
        return f'<file path="{shown}">\n{text}{note}\n</file>'

    def _local_image(self, part: LocalImagePart) -> dict[str, Any] | None:
        path = self._image_path(part.path)
        if path is None:
            return None
        read = read_image(path, MAX_IMAGE_BYTES)  # only real images: no way to read other files
        if read is None:
            return None
        image: dict[str, Any] = {"path": str(path), "mimeType": read[1]}
        if part.file_name:
            image["fileName"] = part.file_name
        return image

    async def _remote_image(self, url: str) -> dict[str, Any] | None:
        # Imported on first use: the HTTP stack costs start-up time that turns
        # without image URLs (and one-shot faces) need not pay.
        from appserver.tools.fetching import FetchRefused, fetch_public

        try:
            fetched = await fetch_public(
                url,
                timeout=IMAGE_TIMEOUT,
                max_bytes=MAX_IMAGE_BYTES,
                allow_private=self.allow_private_urls,
            )
        except FetchRefused as exc:
            log.info("image %s not fetched: %s", url, exc)
            return None
        data = fetched.data
        sniffed = sniff_image(data)
        if sniffed is None:
            return None
        digest = hashlib.sha256(data).hexdigest()
        path = self.attachments / f"{digest}.{sniffed[1]}"
        if not path.exists():
            await anyio.to_thread.run_sync(_write_file, path, data)
        return {"path": str(path), "mimeType": sniffed[0], "sourceUrl": url}


def _write_file(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def load_image(image: dict[str, Any]) -> ImagePart | None:
    """The model-facing image for a stored ``images`` entry (``None`` if gone)."""
    try:
        data = Path(str(image["path"])).read_bytes()
    except (OSError, KeyError):
        return None
    sniffed = sniff_image(data)
    if sniffed is None:
        return None
    return image_part(data, sniffed[0])


def _is_text_data(part: Any) -> bool:
    """A text part given as its wire data (see the module's docstring)."""
    return type(part) is dict and part.get("type") == "text" and isinstance(part.get("text"), str)
