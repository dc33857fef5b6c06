"""Images named in a ``--prompts`` dataset row: ``"images": ["cat.png", "data:image/..."]``.

Each entry is a local file path (relative paths are read from the dataset file's own
directory) or a ``data:image/...;base64,`` URL. Every image is read once while the run
is prepared, bounded (:data:`MAX_IMAGE_FILE_BYTES` a file, the per-request and
all-bodies bounds of :mod:`~tailwise.loadgen.prepare.images`), and type-checked by its magic
bytes: PNG, JPEG or WebP, whatever its name or the URL's media type say. Anything
else is one line naming the row and the entry (``prompts.jsonl:7 images[1]``), exit 2.

Rows are numbered as :func:`tailwise.loadgen.llm.openai.read_dataset` numbers them (blank
lines skipped, at most ``MAX_DATASET_ROWS``), so row ``i``'s images go with prompt ``i``.
"""

from __future__ import annotations

import base64
import binascii
import json
from pathlib import Path

from tailwise.errors import BadInput
from tailwise.files import read_bounded_bytes, read_bounded_utf8
from tailwise.imagefmt import sniff
from tailwise.loadgen.llm.openai import MAX_DATASET_ROWS
from tailwise.loadgen.prepare.images import (
    MAX_IMAGES_PER_REQUEST,
    MAX_REQUEST_IMAGE_BYTES,
    data_url,
)

MAX_IMAGE_FILE_BYTES = MAX_REQUEST_IMAGE_BYTES
IMAGE_FORM = "a PNG, JPEG or WebP image (by its first bytes)"
ENTRY_FORM = (
    f"a list of image file paths or data:image/...;base64, URLs (at most {MAX_IMAGES_PER_REQUEST})"
)


def read_row_images(path: str) -> list[list[str]] | None:
    """Each row's images as data URLs; None when no row has an ``images`` field."""
    text = read_bounded_utf8(path, "--prompts")
    if '"images"' not in text:  # the common case: a text-only dataset, parsed once only
        return None
    base = Path(path).parent
    seen: dict[str, str] = {}  # an entry met before: its data URL, read and checked once
    out: list[list[str]] = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        out.append(_row_images(line, f"{path}:{lineno}", base, seen))
        if len(out) >= MAX_DATASET_ROWS:
            break
    return out if any(out) else None


def _row_images(line: str, where: str, base: Path, seen: dict[str, str]) -> list[str]:
    try:
        row = json.loads(line)
    except (ValueError, RecursionError):
        return []  # read_dataset already names a row that is not JSON
    entries = row.get("images") if isinstance(row, dict) else None
    if entries is None:
        return []
    field = f"{where} images"
    if not isinstance(entries, list) or len(entries) > MAX_IMAGES_PER_REQUEST:
        raise BadInput(field, _shown(entries), ENTRY_FORM)
    urls = []
    for k, entry in enumerate(entries):
        if not isinstance(entry, str) or not entry:
            raise BadInput(f"{field}[{k}]", _shown(entry), ENTRY_FORM)
        if entry not in seen:
            seen[entry] = _image_url(entry, f"{field}[{k}]", base)
        urls.append(seen[entry])
    return urls


def _image_url(entry: str, field: str, base: Path) -> str:
    """The checked data URL of one entry: a file read, or a data URL decoded and re-sniffed."""
    if entry.startswith("data:"):
        image = _decode_data_url(entry, field)
    elif "://" in entry:
        raise BadInput(field, entry, "a local file path or a data: URL (nothing is fetched)")
    else:
        file = Path(entry) if Path(entry).is_absolute() else base / entry
        image = read_bounded_bytes(file, field, MAX_IMAGE_FILE_BYTES, given=entry)
    kind = sniff(image)
    if kind is None:
        raise BadInput(field, _shown(entry), IMAGE_FORM)
    return data_url(image, kind)  # the media type its bytes say, whatever the entry said


def _decode_data_url(entry: str, field: str) -> bytes:
    head, sep, payload = entry.partition(",")
    if not sep or not head.startswith("data:image/") or not head.endswith(";base64"):
        raise BadInput(field, _shown(entry), "a data:image/TYPE;base64,... URL")
    if len(payload) > _b64_chars(MAX_IMAGE_FILE_BYTES):
        raise BadInput(
            field,
            f"{_shown(entry)} (larger)",
            f"an image of at most {MAX_IMAGE_FILE_BYTES >> 20} MiB",
        )
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise BadInput(field, _shown(entry), "valid base64 after data:image/TYPE;base64,") from None


def _b64_chars(nbytes: int) -> int:
    return 4 * ((nbytes + 2) // 3)


def _shown(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value)[:60]
    return text[:60] + ("..." if len(text) > 60 else "")
