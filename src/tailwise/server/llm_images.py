"""The demo LLM server's image tokens: what an ``image_url`` content part costs.

The law: an image of W x H pixels is ``ceil(W / 32) * ceil(H / 32)`` prompt tokens
(:func:`image_tokens`), one token per 32 x 32-pixel patch, as a vision encoder of
16-pixel patches whose 2 x 2 neighbours are merged into one token (Qwen2-VL's rule,
with 14-pixel patches, gives one token per 28 x 28 pixels). No resizing: a
1024 x 1024 image is 1,024 tokens. The tokens join the prompt's prefill, so they cost
``--per-prefill-token`` each in the engine's step law, count against
``--max-model-len``, and are in the answer's ``usage.prompt_tokens``.

Only ``data:image/...;base64,`` URLs are read (the demo fetches nothing); the width
and height come from the image's header (PNG IHDR, JPEG start of frame, WebP), never
from decoding pixels. Anything else is refused (:class:`ImageRefused`, a 400).
"""

from __future__ import annotations

import base64
import binascii
import math
from typing import Any

from tailwise.imagefmt import dimensions, sniff

PATCH_PX = 32
MAX_IMAGES = 64  # per request; the body itself is bounded by the app
_HEAD_CHARS = 64  # base64 characters holding a PNG's or WebP's size (48 bytes)


class ImageRefused(ValueError):
    """An image part the demo cannot read: the message says which and why."""


def image_tokens(width: int, height: int) -> int:
    """Prompt tokens of one ``width`` x ``height`` image: one per 32 x 32 patch."""
    return math.ceil(width / PATCH_PX) * math.ceil(height / PATCH_PX)


def request_image_tokens(body: dict[str, Any]) -> int:
    """The image tokens of a chat body: every ``image_url`` part of every message."""
    urls = [url for m in _messages(body) for url in _image_urls(m)]
    if len(urls) > MAX_IMAGES:
        raise ImageRefused(f"at most {MAX_IMAGES} images per request, got {len(urls)}")
    return sum(image_tokens(*_size(url, i)) for i, url in enumerate(urls))


def _messages(body: dict[str, Any]) -> list[Any]:
    messages = body.get("messages")
    return messages if isinstance(messages, list) else []


def _image_urls(message: object) -> list[object]:
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return []
    out: list[object] = []
    for part in content:
        if isinstance(part, dict) and part.get("type") == "image_url":
            image = part.get("image_url")
            out.append(image.get("url") if isinstance(image, dict) else image)
    return out


def _size(url: object, index: int) -> tuple[int, int]:
    """(width, height) of image ``index``, read from its data URL's header bytes."""
    where = f"image {index}"
    if not isinstance(url, str) or not url.startswith("data:image/"):
        raise ImageRefused(f"{where}: expected a data:image/...;base64, URL (nothing is fetched)")
    head, sep, payload = url.partition(",")
    if not sep or not head.endswith(";base64"):
        raise ImageRefused(f"{where}: expected ;base64, data")
    try:
        data = base64.b64decode(payload[:_HEAD_CHARS], validate=True)
        if sniff(data) == "jpeg":  # the frame header may sit after EXIF: read it all
            data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise ImageRefused(f"{where}: invalid base64") from None
    size = dimensions(data)
    if size is None:
        raise ImageRefused(f"{where}: not a PNG, JPEG or WebP image with a readable size")
    return size
