"""Chat with images: ``--images N --image-size WxH``, and images named in a dataset row.

Images travel as OpenAI content parts in the user message, after its text:
``{"type": "text", "text": ...}`` then ``{"type": "image_url", "image_url": {"url":
"data:image/png;base64,..."}}`` per image. Only ``--api openai-chat`` carries them.

Synthetic images are PNGs drawn here (:func:`synthetic_png`): a seeded gradient, a
seeded wave and a little seeded noise, so every image of a run is different (a server
cannot answer one from a cache of another) and the same seed gives the same images.
They are made while the run is prepared, never on the send path: request bodies are
rendered whole before the clock starts, as every body is.

Memory is bounded three ways, each refused or applied before anything is sent:

* one request's images: at most :data:`MAX_IMAGES_PER_REQUEST`, each side at most
  :data:`MAX_SIDE_PX`, and :data:`MAX_REQUEST_IMAGE_BYTES` of image files in all;
* distinct synthetic images: at most :data:`MAX_DISTINCT_IMAGES`, and
  :data:`MAX_DISTINCT_IMAGE_BYTES` of PNG; beyond that the images are reused round
  robin (request ``i``'s ``k``-th image is image ``(slots before it) % distinct``);
* all request bodies together: at most :data:`MAX_BODY_IMAGE_BYTES` of base64 image
  data over every target; synthetic prompts (which are used in turn anyway) are
  cut to fewer distinct bodies to fit, a dataset or a trace that cannot fit is refused.
"""

from __future__ import annotations

import base64
import math
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from tailwise.errors import BadInput
from tailwise.imagefmt import dimensions, encode_png
from tailwise.loadgen.llm.apis import Prompt, chat
from tailwise.loadgen.llm.openai import sample_lengths

MAX_IMAGES_PER_REQUEST = 64
MAX_SIDE_PX = 4096
MAX_REQUEST_IMAGE_BYTES = 8 << 20  # image file bytes in one request, before base64
MAX_DISTINCT_IMAGES = 64  # each made while preparing (~10-60 ms for 512x512)
MAX_DISTINCT_IMAGE_BYTES = 64 << 20
MAX_BODY_IMAGE_BYTES = 256 << 20  # base64 image data held in all rendered request bodies
IMAGE_KINDS = (chat.KIND.name,)  # the --api kinds whose bodies carry image parts
COUNT_FORM = (
    f"a whole number of images per request from 0 to {MAX_IMAGES_PER_REQUEST}, or "
    "uniform:A-B, normal:MEAN,SD or lognormal:MEDIAN,SIGMA (draws clipped to "
    f"1..{MAX_IMAGES_PER_REQUEST})"
)
SIZE_FORM = f"WIDTHxHEIGHT in pixels, each 1 to {MAX_SIDE_PX}, e.g. 512x512"
_SIZE = re.compile(r"\s*(\d{1,6})\s*[xX]\s*(\d{1,6})\s*")
_BAND_PX = 1 << 18  # pixels drawn at a time: a 4096-wide image in bands of 64 rows
_LEVEL_STEP = 8.0  # colour steps: flat runs deflate compresses
_SPECKLE_SHARE = 0.01  # pixels of a random colour: no two images alike, yet small files


def image_counts(text: object, n: int, rng: random.Random) -> list[int]:
    """``--images``: ``n`` per-request image counts (a number, or a length distribution)."""
    spec = str(text).strip()
    if spec.isdigit():
        count = int(spec)
        if count > MAX_IMAGES_PER_REQUEST:
            raise BadInput("--images", text, COUNT_FORM)
        return [count] * n
    if ":" not in spec:
        raise BadInput("--images", text, COUNT_FORM)
    try:
        drawn = sample_lengths(spec, "--images", n, rng)
    except BadInput:
        raise BadInput("--images", text, COUNT_FORM) from None
    return [min(k, MAX_IMAGES_PER_REQUEST) for k in drawn]


def image_size(text: object) -> tuple[int, int]:
    """``--image-size WxH``: (width, height) in pixels."""
    match = _SIZE.fullmatch(str(text))
    if match is None:
        raise BadInput("--image-size", text, SIZE_FORM)
    width, height = int(match[1]), int(match[2])
    if not (1 <= width <= MAX_SIDE_PX and 1 <= height <= MAX_SIDE_PX):
        raise BadInput("--image-size", text, SIZE_FORM)
    return width, height


def synthetic_png(width: int, height: int, seed: int, index: int) -> bytes:
    """Image ``index`` of a run seeded ``seed``: a PNG of ``width`` x ``height``.

    Bands of colour (a seeded gradient and wave, in steps of :data:`_LEVEL_STEP`) and 1%
    seeded speckles: every image differs pixel by pixel, and the file is about 0.1-0.25
    bytes a pixel, a photo's size as JPEG (pure noise would be 3 bytes a pixel)."""
    rng = np.random.default_rng([seed, index, 0x1A6E])
    base = rng.uniform(40.0, 215.0, size=3)
    slope = rng.uniform(-40.0, 40.0, size=(2, 3))
    freq = rng.uniform(0.5, 6.0, size=2)
    phase = rng.uniform(0.0, 2 * math.pi, size=3)
    xs = np.arange(width, dtype=np.float32) / width
    rows = max(1, _BAND_PX // width)

    def bands() -> Iterator[bytes]:
        for top in range(0, height, rows):
            ys = np.arange(top, min(top + rows, height), dtype=np.float32)[:, None] / height
            angle = 2 * math.pi * (freq[0] * xs[None, :] + freq[1] * ys)
            px = base + slope[0] * xs[None, :, None] + slope[1] * ys[:, :, None]
            px = np.floor((px + 30.0 * np.sin(angle[:, :, None] + phase)) / _LEVEL_STEP)
            px *= _LEVEL_STEP
            speckle = rng.random(px.shape[:2]) < _SPECKLE_SHARE
            px[speckle] = rng.uniform(0.0, 255.0, size=(int(speckle.sum()), 3))
            yield np.clip(px, 0, 255).astype(np.uint8).tobytes()

    return encode_png(width, height, bands())


def data_url(image: bytes, kind: str = "png") -> str:
    """The ``data:`` URL of an image file's bytes."""
    return f"data:image/{kind};base64," + base64.b64encode(image).decode("ascii")


def image_part(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def with_images(prompt: Prompt, urls: list[str]) -> Prompt:
    """``prompt`` as chat messages whose last user message ends with ``urls`` as image parts.

    A text prompt becomes one user message: a text part, then the images (text first,
    so a prompt's nonce is the first thing in the body that the transport replaces)."""
    if not urls:
        return prompt
    parts = [image_part(u) for u in urls]
    if isinstance(prompt, str):
        return [{"role": "user", "content": [{"type": "text", "text": prompt}, *parts]}]
    messages = [dict(m) for m in prompt]
    users = [i for i, m in enumerate(messages) if m.get("role") == "user"]
    last = users[-1] if users else len(messages) - 1
    content = messages[last].get("content")
    if isinstance(content, list):
        messages[last]["content"] = [*content, *parts]
    else:
        text = "" if content is None else str(content)
        messages[last]["content"] = [{"type": "text", "text": text}, *parts]
    return messages


def attach(
    prompts: list[Prompt],
    max_tokens: list[int],
    *,
    api: str,
    count: object,
    size: object,
    seed: int,
    targets: int,
    rows: list[list[str]] | None = None,
    fixed: bool = False,
) -> tuple[list[Prompt], list[int]]:
    """Prompts (and their output budgets) with their images attached.

    ``rows``: each prompt's own images (data URLs, from a dataset), before the synthetic
    ones. ``fixed``: the prompts are a dataset's or a trace's, which cannot be cut to
    fewer bodies; synthetic prompts can (they are used in turn)."""
    width, height = image_size(size)
    counts = image_counts(count, len(prompts), random.Random(seed ^ 0x1A6E))
    own = rows if rows is not None else [[] for _ in prompts]
    if not any(counts) and not any(own):
        return prompts, max_tokens
    if api not in IMAGE_KINDS:
        field, given = ("--images", count) if any(counts) else ("--api", api)
        raise BadInput(field, given, f"--api {' or '.join(IMAGE_KINDS)} to send images")
    first = synthetic_png(width, height, seed, 0) if any(counts) else b""
    per_body = [
        _b64_bytes(urls) + k * _b64_len(len(first)) for urls, k in zip(own, counts, strict=True)
    ]
    field = "--images" if any(counts) else "--prompts"
    n = _bodies_within_budget(per_body, targets, fixed, field)
    _check_request_bytes(own[:n], counts[:n], len(first), size)
    urls = _synthetic_urls(first, sum(counts[:n]), width, height, seed)
    out: list[Prompt] = []
    slot = 0
    for prompt, mine, k in zip(prompts[:n], own[:n], counts[:n], strict=True):
        drawn = [urls[(slot + j) % len(urls)] for j in range(k)]
        slot += k
        out.append(with_images(prompt, [*mine, *drawn]))
    return out, max_tokens[:n]


def _b64_len(nbytes: int) -> int:
    return 4 * ((nbytes + 2) // 3)


def _b64_bytes(urls: list[str]) -> int:
    return sum(len(u) for u in urls)


def _bodies_within_budget(per_body: list[int], targets: int, fixed: bool, field: str) -> int:
    """How many bodies fit :data:`MAX_BODY_IMAGE_BYTES` over all targets: the first ``n``
    of synthetic prompts (at least one), every body of a dataset or trace or a refusal."""
    budget = MAX_BODY_IMAGE_BYTES // max(1, targets)
    total, n = 0, 0
    for nbytes in per_body:
        if total + nbytes > budget and n > 0:
            break
        total += nbytes
        n += 1
    if n < len(per_body) and fixed:
        need = sum(per_body) * max(1, targets)
        raise BadInput(
            field,
            f"{need >> 20} MiB of base64 images in {len(per_body)} bodies x {targets} targets",
            f"at most {MAX_BODY_IMAGE_BYTES >> 20} MiB in all (fewer rows, --requests or "
            "--duration, fewer or smaller images)",
        )
    return n


def _check_request_bytes(own: list[list[str]], counts: list[int], png: int, size: object) -> None:
    """One request's image files stay within :data:`MAX_REQUEST_IMAGE_BYTES`."""
    for i, (urls, k) in enumerate(zip(own, counts, strict=True)):
        nbytes = sum(_file_bytes(u) for u in urls) + k * png
        if nbytes > MAX_REQUEST_IMAGE_BYTES:
            raise BadInput(
                "--image-size" if k else "--prompts",
                f"{nbytes / 2**20:.1f} MiB of images in request body {i}"
                + (f" ({k} of {size}, {png >> 10} KiB each)" if k else ""),
                f"at most {MAX_REQUEST_IMAGE_BYTES >> 20} MiB of image files per request",
            )


def _synthetic_urls(first: bytes, slots: int, width: int, height: int, seed: int) -> list[str]:
    """The distinct synthetic images' data URLs: as many as the slots need, within bounds."""
    if slots == 0:
        return []
    distinct = min(slots, MAX_DISTINCT_IMAGES, max(1, MAX_DISTINCT_IMAGE_BYTES // len(first)))
    pngs = [first, *(synthetic_png(width, height, seed, i) for i in range(1, distinct))]
    return [data_url(p) for p in pngs]


@dataclass(frozen=True)
class ImageLoad:
    """The images each request body carries (body ``i`` is sent as requests ``i, i + n, ...``)."""

    counts: tuple[int, ...]  # images per body
    nbytes: tuple[int, ...]  # image file bytes per body (before base64)
    distinct: int
    sizes: tuple[str, ...]  # "WxH" of the distinct images, sorted (at most 16)


def load(prompts: list[Prompt]) -> ImageLoad | None:
    """What images ``prompts`` carry; None when none does."""
    per = [_image_urls(p) for p in prompts]
    if not any(per):
        return None
    distinct = {u for urls in per for u in urls}
    sizes: set[str] = set()
    for u in list(distinct)[:MAX_DISTINCT_IMAGES]:
        dims = dimensions(base64.b64decode(u.partition(",")[2]))
        sizes.add(f"{dims[0]}x{dims[1]}" if dims else "unknown")
    return ImageLoad(
        counts=tuple(len(urls) for urls in per),
        nbytes=tuple(sum(_file_bytes(u) for u in urls) for urls in per),
        distinct=len(distinct),
        sizes=tuple(sorted(sizes)[:16]),
    )


def run_doc(images: ImageLoad) -> dict[str, Any]:
    """run.json's ``images``: per request body, as prepared."""
    return {
        "bodies": len(images.counts),
        "per_request": _spread(list(images.counts)),
        "bytes_per_request": _spread(list(images.nbytes)),
        "distinct": images.distinct,
        "sizes": list(images.sizes),
    }


def figures(images: ImageLoad, seqs: npt.NDArray[np.int64]) -> dict[str, Any]:
    """summary.json's ``images``: what the requests ``seqs`` (the window's, sent) carried."""
    body = seqs % len(images.counts)
    counts = np.asarray(images.counts, dtype=np.int64)[body]
    nbytes = np.asarray(images.nbytes, dtype=np.int64)[body]
    doc = run_doc(images)
    if len(seqs):
        doc["per_request"] = _spread(counts.tolist())
        doc["bytes_per_request"] = _spread(nbytes.tolist())
    doc.update(requests=len(seqs), images_total=int(counts.sum()), bytes_total=int(nbytes.sum()))
    return doc


def text_lines(section: dict[str, Any]) -> list[str]:
    """The terminal's line for a run with images."""
    per, size = section["per_request"], section["bytes_per_request"]
    count = (
        f"{per['mean']:g}"
        if per["min"] == per["max"]
        else f"{per['mean']:g} ({per['min']}-{per['max']})"
    )
    return [
        f"images    {count} per request, {size['mean'] / 1024:.1f} KiB per request; "
        f"{section['distinct']} distinct, {', '.join(section['sizes'])}; "
        f"{section['images_total']} sent in the window"
    ]


def _file_bytes(url: str) -> int:
    payload = url.partition(",")[2]
    return len(payload) * 3 // 4 - payload[-2:].count("=")


def _spread(values: list[int]) -> dict[str, float]:
    return {"min": min(values), "mean": round(sum(values) / len(values), 2), "max": max(values)}


def _image_urls(prompt: Prompt) -> list[str]:
    if isinstance(prompt, str):
        return []
    out: list[str] = []
    for message in prompt:
        content = message.get("content")
        for part in content if isinstance(content, list) else []:
            if isinstance(part, dict) and part.get("type") == "image_url":
                url = (part.get("image_url") or {}).get("url")
                if isinstance(url, str):
                    out.append(url)
    return out


def asked(count: object) -> bool:
    """Whether ``--images`` asks for any synthetic image (anything but 0 or empty)."""
    return str(count).strip() not in ("", "0")
