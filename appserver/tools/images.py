"""Recognising image files by their first bytes, and reading one back for the
model: what ``view_image`` and the turn's image inputs (``runtime.inputs``)
share. Only real images (PNG, JPEG, GIF, WebP, by magic number) pass, so
neither is a way to read arbitrary files."""

from __future__ import annotations

import base64
import hashlib
import os
from pathlib import Path

from appserver.providers.base import ImagePart
from appserver.tools.nofollow import PathChanged, open_regular

_MAGIC = [
    (b"\x89PNG\r\n\x1a\n", "image/png", "png"),
    (b"\xff\xd8\xff", "image/jpeg", "jpg"),
    (b"GIF87a", "image/gif", "gif"),
    (b"GIF89a", "image/gif", "gif"),
]


def sniff_image(data: bytes) -> tuple[str, str] | None:
    """``(media_type, extension)`` for PNG/JPEG/GIF/WebP bytes, else ``None``."""
    for magic, media_type, ext in _MAGIC:
        if data.startswith(magic):
            return media_type, ext
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp", "webp"
    return None


def image_part(data: bytes, media_type: str) -> ImagePart:
    """``data`` as the model-facing image part."""
    return ImagePart(media_type=media_type, data_base64=base64.b64encode(data).decode())


def digest(data: bytes) -> str:
    """The SHA-256 of ``data`` in hex (how a viewed image is recognised later)."""
    return hashlib.sha256(data).hexdigest()


def read_image(path: Path, max_bytes: int) -> tuple[bytes, str] | None:
    """``(bytes, media_type)`` of the image at ``path``, opened without
    following links; ``None`` if it is gone, not a regular file, larger than
    ``max_bytes`` or not an image."""
    try:
        with open(open_regular(path, os.O_RDONLY), "rb") as handle:
            data = handle.read(max_bytes + 1)
    except (PathChanged, OSError):
        return None
    sniffed = sniff_image(data)
    if len(data) > max_bytes or sniffed is None:
        return None
    return data, sniffed[0]


def viewed_image(entry: object, max_bytes: int) -> ImagePart | None:
    """The image a stored ``view_image`` result names (``{path, mimeType,
    sha256}``), read again; ``None`` if it is gone or no longer the image that
    was viewed (another file at that path is not what the model saw)."""
    if not isinstance(entry, dict):
        return None
    path, expected = entry.get("path"), entry.get("sha256")
    if not isinstance(path, str) or not isinstance(expected, str):
        return None
    read = read_image(Path(path), max_bytes)
    if read is None or digest(read[0]) != expected:
        return None
    return image_part(*read)
