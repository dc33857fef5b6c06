"""Image files without an imaging library: a minimal PNG encoder and header readers.

The load generator writes synthetic PNGs for ``--images`` and checks the image files a
dataset names; the demo LLM server reads each image's width and height to charge its
image tokens. Both need only this: PNG written as 8-bit RGB (colour type 2, filter 0
on every row, one zlib stream split into IDAT chunks), and the type and pixel size of
a PNG, JPEG or WebP file read from its first bytes (JPEG: the first SOF marker).
Nothing here decodes pixels.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterable

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
MIME = {"png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp"}
IDAT_BYTES = 1 << 16  # compressed bytes per IDAT chunk (any size is valid; decoders join them)
MAX_SIDE_PX = 1 << 24  # a header claiming more is not an image this toolkit will believe
# JPEG start-of-frame markers (baseline, progressive, ...): C4, C8 and CC are not frames.
_SOF = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def png_chunk(kind: bytes, data: bytes) -> bytes:
    """One PNG chunk: length, type, data, CRC-32 of type and data."""
    crc = zlib.crc32(kind + data) & 0xFFFFFFFF
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)


def encode_png(width: int, height: int, row_blocks: Iterable[bytes], level: int = 6) -> bytes:
    """A PNG of ``width`` x ``height`` 8-bit RGB pixels from blocks of whole rows.

    Each block holds some rows of ``3 * width`` bytes, top to bottom; together they must
    be exactly ``height`` rows (a mismatch is a bug, raised). Rows are compressed as
    they come, so a caller can generate a large image a band at a time."""
    if not (1 <= width <= MAX_SIDE_PX and 1 <= height <= MAX_SIDE_PX):
        raise ValueError(f"PNG size {width}x{height} out of range")
    stride = 3 * width
    packer = zlib.compressobj(level)
    compressed: list[bytes] = []
    rows = 0
    for block in row_blocks:
        if len(block) % stride:
            raise ValueError("a row block is not a whole number of rows")
        n = len(block) // stride
        # filter type 0 (none) before every row
        filtered = b"".join(b"\0" + block[i * stride : (i + 1) * stride] for i in range(n))
        compressed.append(packer.compress(filtered))
        rows += n
    if rows != height:
        raise ValueError(f"{rows} rows given for a PNG {height} rows high")
    compressed.append(packer.flush())
    stream = b"".join(compressed)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idats = [
        png_chunk(b"IDAT", stream[k : k + IDAT_BYTES]) for k in range(0, len(stream), IDAT_BYTES)
    ]
    return PNG_SIGNATURE + png_chunk(b"IHDR", ihdr) + b"".join(idats) + png_chunk(b"IEND", b"")


def sniff(data: bytes) -> str | None:
    """The image type by its magic bytes: "png", "jpeg", "webp", or None."""
    if data.startswith(PNG_SIGNATURE):
        return "png"
    if data.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    return None


def dimensions(data: bytes) -> tuple[int, int] | None:
    """(width, height) in pixels from the file's header; None when it cannot be read."""
    kind = sniff(data)
    if kind == "png":
        size = _png_size(data)
    elif kind == "jpeg":
        size = _jpeg_size(data)
    elif kind == "webp":
        size = _webp_size(data)
    else:
        return None
    if size is None or not all(1 <= side <= MAX_SIDE_PX for side in size):
        return None
    return size


def _png_size(data: bytes) -> tuple[int, int] | None:
    if len(data) < 24 or data[12:16] != b"IHDR":  # IHDR is always the first chunk
        return None
    width, height = struct.unpack(">II", data[16:24])
    return int(width), int(height)


def _jpeg_size(data: bytes) -> tuple[int, int] | None:
    """Walk the marker segments to the first start-of-frame; its height then width."""
    at = 2
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            return None
        marker = data[at + 1]
        if marker == 0xFF:  # fill byte
            at += 1
            continue
        if marker in (0x01, *range(0xD0, 0xD8)):  # markers without a length
            at += 2
            continue
        (length,) = struct.unpack(">H", data[at + 2 : at + 4])
        if length < 2:
            return None
        if marker in _SOF:
            if at + 9 > len(data):
                return None
            height, width = struct.unpack(">HH", data[at + 5 : at + 9])
            return int(width), int(height)
        at += 2 + length
    return None


def _webp_size(data: bytes) -> tuple[int, int] | None:
    chunk = data[12:16]
    if chunk == b"VP8X" and len(data) >= 30:  # 24-bit canvas size minus one
        width = 1 + int.from_bytes(data[24:27], "little")
        height = 1 + int.from_bytes(data[27:30], "little")
        return width, height
    if chunk == b"VP8L" and len(data) >= 25 and data[20] == 0x2F:  # 14-bit sizes minus one
        bits = int.from_bytes(data[21:25], "little")
        return 1 + (bits & 0x3FFF), 1 + ((bits >> 14) & 0x3FFF)
    if chunk == b"VP8 " and len(data) >= 30 and data[23:26] == b"\x9d\x01\x2a":
        width, height = struct.unpack("<HH", data[26:30])
        return int(width) & 0x3FFF, int(height) & 0x3FFF
    return None
