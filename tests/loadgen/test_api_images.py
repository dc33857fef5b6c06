"""Chat with images: the PNG encoder, bodies with image parts, dataset images, and the demo
server's image tokens, end to end over loopback."""

from __future__ import annotations

import base64
import json
import math
import struct
import urllib.error
import urllib.request
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import tailwise
from tailwise.errors import BadInput
from tailwise.imagefmt import PNG_SIGNATURE, dimensions, encode_png, sniff
from tailwise.loadgen.prepare import images
from tailwise.loadgen.prepare.plan import RunOptions, prepare
from tests.clirun import run_cli

URL = "http://127.0.0.1:9"  # prepare opens no connection


def chunks(png: bytes) -> list[tuple[bytes, bytes, int]]:
    """(type, data, stored CRC) of every chunk, read independently of the encoder."""
    assert png[:8] == PNG_SIGNATURE
    out, at = [], 8
    while at < len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        kind, data = png[at + 4 : at + 8], png[at + 8 : at + 8 + length]
        (crc,) = struct.unpack(">I", png[at + 8 + length : at + 12 + length])
        out.append((kind, data, crc))
        at += 12 + length
    return out


def test_the_png_encoder_writes_a_valid_png_that_round_trips() -> None:
    width, height = 5, 3
    pixels = bytes(range(3 * width * height))
    png = encode_png(width, height, [pixels[:15], pixels[15:]], level=9)  # blocks of 1, 2 rows
    parts = chunks(png)
    assert parts[0][0] == b"IHDR" and parts[-1][0] == b"IEND"
    for kind, data, crc in parts:
        assert zlib.crc32(kind + data) & 0xFFFFFFFF == crc
    assert struct.unpack(">IIBBBBB", parts[0][1]) == (5, 3, 8, 2, 0, 0, 0)
    raw = zlib.decompress(b"".join(d for k, d, _ in parts if k == b"IDAT"))
    rows = [raw[i * 16 : (i + 1) * 16] for i in range(height)]
    assert len(raw) == height * (1 + 3 * width) and all(r[0] == 0 for r in rows)
    assert b"".join(r[1:] for r in rows) == pixels
    assert sniff(png) == "png" and dimensions(png) == (5, 3)
    with pytest.raises(ValueError, match="rows"):
        encode_png(width, height, [pixels[:15]])


def test_header_readers_know_jpeg_and_webp_and_refuse_text() -> None:
    app0 = b"\xff\xe0" + struct.pack(">H", 16) + b"JFIF\0" + bytes(9)
    sof = b"\xff\xc2" + struct.pack(">HBHHB", 11, 8, 480, 640, 1) + bytes(3)
    assert dimensions(b"\xff\xd8" + app0 + sof + b"\xff\xd9") == (640, 480)
    vp8x = b"RIFF" + bytes(4) + b"WEBPVP8X" + bytes(8) + (299).to_bytes(3, "little")
    assert dimensions(vp8x + (199).to_bytes(3, "little")) == (300, 200)
    assert sniff(b"hello, world") is None and dimensions(b"\x89PNG\r\n\x1a\n") is None


def test_synthetic_images_are_seeded_distinct_and_of_the_size_asked() -> None:
    a, b = images.synthetic_png(48, 20, 7, 0), images.synthetic_png(48, 20, 7, 1)
    assert a == images.synthetic_png(48, 20, 7, 0) and a != b
    assert a != images.synthetic_png(48, 20, 8, 0)
    assert dimensions(a) == (48, 20) and dimensions(b) == (48, 20)


def bodies(**kw: Any) -> list[dict[str, Any]]:
    given: dict[str, Any] = {"api": "openai-chat", "model": "m", "rate": "1/s", "requests": 4}
    p = prepare(RunOptions(urls=[URL], **(given | kw)))
    return [json.loads(r.split(b"\r\n\r\n", 1)[1]) for r in p.payloads[0]]


def parts_of(body: dict[str, Any]) -> list[dict[str, Any]]:
    content = body["messages"][-1]["content"]
    assert isinstance(content, list)
    return content


def png_of(part: dict[str, Any]) -> bytes:
    head, _, payload = part["image_url"]["url"].partition(",")
    assert head == "data:image/png;base64"
    return base64.b64decode(payload)


def test_bodies_carry_n_images_of_the_size_asked_after_the_text() -> None:
    got = bodies(images="3", image_size="64x48")
    assert len(got) == 256
    for body in got[:8]:
        parts = parts_of(body)
        assert [p["type"] for p in parts] == ["text", "image_url", "image_url", "image_url"]
        assert all(dimensions(png_of(p)) == (64, 48) for p in parts[1:])
    urls = [p["image_url"]["url"] for b in got for p in parts_of(b)[1:]]
    # 768 image slots, 64 distinct images (MAX_DISTINCT_IMAGES), reused round robin
    assert len(set(urls)) == images.MAX_DISTINCT_IMAGES == 64
    assert urls[0] == urls[64] != urls[1]


def test_a_count_distribution_varies_the_images_per_request() -> None:
    counts = [len(parts_of(b)) - 1 for b in bodies(images="uniform:1-4", image_size="8x8")]
    assert set(counts) == {1, 2, 3, 4}


def test_run_json_and_the_nonce_know_the_images(tmp_path: Path) -> None:
    p = prepare(
        RunOptions(
            urls=[URL], api="openai-chat", model="m", rate="1/s", images="2", image_size="8x8"
        )
    )
    assert p.images is not None and p.images.counts[:3] == (2, 2, 2)
    assert p.nonce is not None
    first = p.payloads[0][0]
    assert first.find(p.nonce) < first.find(b"image_url")  # the transport replaces the first


def test_bodies_are_cut_to_the_memory_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    one = len(images.data_url(images.synthetic_png(32, 32, 0, 0)))
    monkeypatch.setattr(images, "MAX_BODY_IMAGE_BYTES", 10 * one + one // 2)
    assert len(bodies(images="1", image_size="32x32")) == 10  # synthetic prompts: fewer bodies
    monkeypatch.setattr(images, "MAX_REQUEST_IMAGE_BYTES", one)
    with pytest.raises(BadInput, match=r"^--image-size: .*at most 0 MiB of image files"):
        bodies(images="4", image_size="32x32")


@pytest.mark.parametrize(
    ("kw", "field"),
    [
        ({"images": "65"}, "--images"),
        ({"images": "-1"}, "--images"),
        ({"images": "two"}, "--images"),
        ({"images": "uniform:3-1"}, "--images"),
        ({"images": "1", "image_size": "0x10"}, "--image-size"),
        ({"images": "1", "image_size": "4097x10"}, "--image-size"),
        ({"images": "1", "image_size": "512"}, "--image-size"),
        ({"images": "1", "api": "openai-completions"}, "--images"),
        ({"images": "1", "api": None, "model": None}, "--images"),
        ({"images": "1", "turns": 2}, "--turns"),
    ],
)
def test_bad_image_options_are_one_line(kw: dict[str, Any], field: str) -> None:
    opts: dict[str, Any] = {"api": "openai-chat", "model": "m", **kw}
    with pytest.raises(BadInput) as exc:
        prepare(RunOptions(urls=[URL], rate="1/s", **opts))
    assert exc.value.field == field and "\n" not in str(exc.value)


def test_the_cli_says_bad_image_options_in_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["run", URL, "--api", "openai-chat", "--model", "m", "--requests", "1"]
    code, _, err = run_cli([*argv, "--images", "2", "--image-size", "9000x9000"], capsys)
    assert code == 2
    assert (
        err.strip()
        .splitlines()[-1]
        .endswith(
            "--image-size: got '9000x9000', expected WIDTHxHEIGHT in pixels, each 1 to 4096, "
            "e.g. 512x512"
        )
    )


# -- images named in a dataset row ---------------------------------------------------


def dataset(tmp_path: Path, rows: list[dict[str, Any]]) -> str:
    path = tmp_path / "prompts.jsonl"
    path.write_text("".join(json.dumps(r) + "\n\n" for r in rows))  # blank lines are skipped
    return str(path)


def test_dataset_rows_name_files_and_data_urls(tmp_path: Path) -> None:
    (tmp_path / "img").mkdir()
    png = images.synthetic_png(100, 70, 0, 3)
    (tmp_path / "img" / "a.png").write_bytes(png)
    jpeg_as_webp = (
        "data:image/webp;base64,"
        + base64.b64encode(
            b"\xff\xd8\xff\xc0" + struct.pack(">HBHHB", 11, 8, 20, 30, 1) + bytes(3)
        ).decode()
    )
    path = dataset(
        tmp_path,
        [
            {"prompt": "look at this", "images": ["img/a.png", str(tmp_path / "img" / "a.png")]},
            {"messages": [{"role": "user", "content": "and this"}], "images": [jpeg_as_webp]},
            {"prompt": "no image"},
        ],
    )
    got = bodies(prompts=path)
    first, second, third = got
    assert [dimensions(png_of(p)) for p in parts_of(first)[1:]] == [(100, 70), (100, 70)]
    assert parts_of(first)[0]["text"].endswith("look at this")
    url = parts_of(second)[1]["image_url"]["url"]
    assert url.startswith("data:image/jpeg;base64,")  # the bytes' type, not the URL's claim
    assert isinstance(third["messages"][0]["content"], str)


def test_dataset_images_need_the_chat_api(tmp_path: Path) -> None:
    (tmp_path / "a.png").write_bytes(images.synthetic_png(8, 8, 0, 0))
    path = dataset(tmp_path, [{"prompt": "x", "images": ["a.png"]}])
    with pytest.raises(BadInput, match=r"^--api: got 'openai-completions'"):
        bodies(prompts=path, api="openai-completions")


def hostile_rows(tmp_path: Path) -> list[tuple[Any, str]]:
    (tmp_path / "notes.png").write_text("not an image at all\n")
    with open(tmp_path / "huge.png", "wb") as fh:  # sparse: 9 MiB claimed, nothing written
        fh.truncate(9 << 20)
    return [
        (["missing.png"], "a readable file"),
        (["notes.png"], "a PNG, JPEG or WebP image"),
        (["huge.png"], "a file of at most 8 MiB"),
        (["http://example.com/cat.png"], "a local file path or a data: URL"),
        (["data:image/png;base64,@@@@"], "valid base64"),
        (["data:text/plain;base64,aGk="], "a data:image/TYPE;base64"),
        ("cat.png", "a list of image file paths"),
        ([3], "a list of image file paths"),
    ]


def test_hostile_dataset_images_are_one_line_naming_row_and_entry(tmp_path: Path) -> None:
    for entries, expected in hostile_rows(tmp_path):
        path = dataset(tmp_path, [{"prompt": "fine"}, {"prompt": "bad", "images": entries}])
        with pytest.raises(BadInput) as exc:
            bodies(prompts=path)
        message = str(exc.value)
        where = f"{path}:3 images" + ("[0]" if isinstance(entries, list) else "")
        assert message.startswith(where) and expected in message, message
        assert "\n" not in message


def test_a_hostile_dataset_image_exits_2_through_the_cli(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "notes.png").write_text("plain text\n")
    path = dataset(tmp_path, [{"prompt": "bad", "images": ["notes.png"]}])
    argv = ["run", URL, "--api", "openai-chat", "--model", "m", "--prompts", path]
    code, _, err = run_cli([*argv, "--requests", "1"], capsys)
    assert code == 2
    last = err.strip().splitlines()[-1]
    assert last.startswith(f"tailwise: error: {path}:1 images[0]: got 'notes.png', expected a PNG")


# -- the demo server's image tokens, over loopback ------------------------------------------


def law(width: int, height: int) -> int:
    """The demo's law, written again here: one token per 32 x 32 patch."""
    return math.ceil(width / 32) * math.ceil(height / 32)


def post(url: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    req = urllib.request.Request(
        url + "/v1/chat/completions",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_demo_counts_image_tokens_and_refuses_unreadable_images(
    demo_target: Callable[..., str],
) -> None:
    url = demo_target("llm", "--max-model-len", "65536")
    png = images.data_url(images.synthetic_png(100, 70, 0, 0))
    parts = [{"type": "text", "text": "two words"}, images.image_part(png)]
    message = {"role": "user", "content": parts}
    status, answer = post(url, {"model": "tailwise-demo", "max_tokens": 2, "messages": [message]})
    assert status == 200 and answer["usage"]["prompt_tokens"] == 2 + law(100, 70) == 14
    for bad, why in [
        ("http://127.0.0.1:1/cat.png", "expected a data:image"),
        ("data:image/png;base64,!!!!", "invalid base64"),
        ("data:image/png;base64," + base64.b64encode(b"plain text").decode(), "not a PNG"),
    ]:
        message = {"role": "user", "content": [images.image_part(bad)]}
        status, answer = post(url, {"model": "tailwise-demo", "messages": [message]})
        assert status == 400 and why in answer["error"]["message"]


def records(directory: Path) -> list[dict[str, Any]]:
    lines = (directory / "records.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def test_images_raise_ttft_and_their_tokens_are_in_the_usage(
    demo_target: Callable[..., str], tmp_path: Path
) -> None:
    # 4 images of 512x512 are 1,024 prompt tokens: 205 ms of prefill at 200 us a token,
    # against ~3 ms for the 17 words of text; far beyond what a busy machine adds.
    url = demo_target(
        "llm", "--per-prefill-token", "200us", "--max-model-len", "65536",
        "--kv-cache-tokens", "1000000",
    )  # fmt: skip
    common = {"api": "openai-chat", "model": "tailwise-demo", "rate": "4/s", "requests": 6}
    common |= {"max_tokens": 4, "input_tokens": 16, "warmup": "0s", "arrival": "constant"}
    plain = tailwise.run(url, out=str(tmp_path / "plain"), **common)
    seen = tailwise.run(url, out=str(tmp_path / "img"), images="4", image_size="512x512", **common)
    assert plain.summary["requests"]["ok"] == seen.summary["requests"]["ok"] == 6
    assert seen.summary["ttft_ms"]["p50"] > plain.summary["ttft_ms"]["p50"]
    section = seen.summary["images"]
    words = {r["seq"]: r["input_tokens"] for r in records(tmp_path / "plain")}
    for row in records(tmp_path / "img"):
        assert row["input_tokens"] == words[row["seq"]] + 4 * law(512, 512)
        assert row["bytes_out"] > section["bytes_per_request"]["min"] * 4 // 3  # base64 PNGs
    assert section["per_request"] == {"min": 4, "mean": 4.0, "max": 4}
    assert section["images_total"] == 24 and section["sizes"] == ["512x512"]
    assert "images" not in plain.summary


def test_a_dataset_image_reaches_the_demo_server(
    demo_target: Callable[..., str], tmp_path: Path
) -> None:
    url = demo_target("llm", "--max-model-len", "65536")
    (tmp_path / "a.png").write_bytes(images.synthetic_png(100, 70, 1, 0))
    path = dataset(tmp_path, [{"prompt": "three short words", "images": ["a.png", "a.png"]}])
    res = tailwise.run(
        url, api="openai-chat", model="tailwise-demo", prompts=path, requests=2,
        rate="10/s", max_tokens=2, unique_prompts=False, out=str(tmp_path / "r"),
    )  # fmt: skip
    assert res.summary["requests"]["ok"] == 2
    assert {r["input_tokens"] for r in records(tmp_path / "r")} == {3 + 2 * law(100, 70)}
