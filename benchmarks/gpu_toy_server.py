"""A toy OpenAI-compatible streaming chat server that does real GPU work for every token.

For ``benchmarks/gpu_telemetry_device.sh``: a target whose GPU use and power
follow its load, on a machine with no network (no model to download). The
"model" is a stack of random-weight MLP layers (``x = tanh(x W1) W2``, width
``--width``, 4x inside, four distinct layers applied in turn) in bfloat16 on
CUDA; one engine step runs every active sequence through ``--layers`` of them
at once (continuous batching: a new request's prompt, up to 512 rows, joins
the next step as its prefill; every running sequence decodes one row a step).
Decode is memory-bound, like an LLM's: each layer reads its weights from HBM
whatever the batch. ``--step auto:8ms`` picks the layer count whose single-
sequence step takes about 8 ms on this GPU.

A token is the argmax of the step's output over a 64-word vocabulary: the
stream's words come from the GPU's arithmetic, read back once a step (the
step's only host synchronisation, in a worker thread, never on the event loop).

Without torch (or with ``--device cpu``) the same engine runs on NumPy with a
narrow float32 stack: a CPU dry run of the whole pipeline. ``--fake-dcgm``
then serves ``/dcgm`` in a DCGM exporter's format, with a made-up power of
``60 W + 240 W x (share of time the engine computed)`` and its energy counter,
so ``--gpu-metrics dcgm=...`` has something to read on a machine without a GPU.

Routes: ``POST /v1/chat/completions`` (streamed as Server-Sent Events over
chunked transfer encoding when ``stream``, with ``usage`` in a last chunk when
``stream_options.include_usage``; else one JSON answer), ``GET /v1/models``,
``GET /health``, ``GET /metrics`` (running and waiting sequences and generated
tokens in the names of tailwise's demo server, so ``--server-metrics`` reads
them). It binds 127.0.0.1, prints ``listening on URL`` and exits after
``--lifetime``.

Run: ``python3 benchmarks/gpu_toy_server.py --port 0 --lifetime 200s``.
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import json
import math
import signal
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tailwise.server import RequestProtocol

VOCAB = [f" w{i}" for i in range(64)]
MAX_PREFILL_ROWS = 512
MAX_STEP_ROWS = 4096
MAX_TOKENS = 4096


class Model:
    """The layer stack on one device; :meth:`step` blocks (run it in a worker thread)."""

    def __init__(self, device: str, width: int, layers: int, seed: int = 0) -> None:
        self.device, self.width, self.layers = device, width, layers
        self.torch: Any = None
        if device != "numpy":
            import torch

            self.torch = torch
            g = torch.Generator(device=device).manual_seed(seed)
            dtype = torch.bfloat16 if device.startswith("cuda") else torch.float32
            kw: dict[str, Any] = {"device": device, "dtype": dtype, "generator": g}
            self.w1 = [torch.randn(width, 4 * width, **kw) / math.sqrt(width) for _ in range(4)]
            self.w2 = [torch.randn(4 * width, width, **kw) / math.sqrt(4 * width) for _ in range(4)]
            self.x = torch.randn(MAX_STEP_ROWS, width, **kw)
        else:
            import numpy as np

            rng = np.random.default_rng(seed)
            self.np = np
            self.w1 = [
                rng.standard_normal((width, 4 * width), dtype=np.float32) / math.sqrt(width)
                for _ in range(4)
            ]
            self.w2 = [
                rng.standard_normal((4 * width, width), dtype=np.float32) / math.sqrt(4 * width)
                for _ in range(4)
            ]
            self.x = rng.standard_normal((MAX_STEP_ROWS, width), dtype=np.float32)

    def step(self, rows: int) -> list[int]:
        """One engine step over ``rows`` rows; the token id of each row (synchronises)."""
        rows = max(1, min(rows, MAX_STEP_ROWS))
        if self.torch is not None:
            with self.torch.inference_mode():
                h = self.x[:rows]
                for i in range(self.layers):
                    h = self.torch.tanh(h @ self.w1[i % 4]) @ self.w2[i % 4]
                ids: list[int] = h[:, :64].float().argmax(dim=1).tolist()
            return ids
        h = self.x[:rows]
        for i in range(self.layers):
            h = self.np.tanh(h @ self.w1[i % 4]) @ self.w2[i % 4]
        return [int(v) for v in h[:, :64].argmax(axis=1)]

    def time_step(self, rows: int, repeats: int = 5) -> float:
        self.step(rows)
        t = time.perf_counter()
        for _ in range(repeats):
            self.step(rows)
        return (time.perf_counter() - t) / repeats


def build_model(device: str, width: int, step: str) -> tuple[Model, str]:
    """The model, with its layer count from ``--step`` (``N`` layers, or ``auto:8ms``)."""
    if step.startswith("auto:"):
        target_s = float(step[5:].removesuffix("ms")) / 1e3
        model = Model(device, width, 8)
        per_layer = model.time_step(1) / 8
        layers = max(1, min(4000, round(target_s / max(per_layer, 1e-7))))
        model.layers = layers
    else:
        layers = int(step)
        model = Model(device, width, layers)
    note = f"{device} width {width}, {layers} layers: step " + ", ".join(
        f"{model.time_step(rows) * 1e3:.2f} ms at {rows} rows" for rows in (1, 32, 512)
    )
    return model, note


class Seq:
    __slots__ = ("chat_id", "done", "include_usage", "max_tokens", "prompt", "sent", "stream", "t")

    def __init__(self, t: Any, stream: bool, prompt: int, max_tokens: int, usage: bool) -> None:
        self.t, self.stream, self.prompt = t, stream, prompt
        self.max_tokens, self.include_usage = max_tokens, usage
        self.sent: list[str] = []
        self.done = False
        self.chat_id = f"chatcmpl-toy-{id(self):x}"


class Engine:
    """Waiting prompts and running sequences; one step at a time on one worker thread."""

    def __init__(self, model: Model, model_name: str) -> None:
        self.model, self.name = model, model_name
        self.waiting: list[Seq] = []
        self.running: list[Seq] = []
        self.wake = asyncio.Event()
        self.pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="toy-gpu")
        self.generated = 0
        self.busy_s = 0.0
        self.started = time.monotonic()

    def add(self, s: Seq) -> None:
        self.waiting.append(s)
        self.wake.set()

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            if not self.waiting and not self.running:
                self.wake.clear()
                await self.wake.wait()
            # Every running sequence decodes one row; a new one prefills its prompt (at most
            # 512 rows) and takes its first token from its last row.
            batch, last_rows = list(self.running), list(range(len(self.running)))
            rows = len(batch)
            while self.waiting:
                need = min(max(self.waiting[0].prompt, 1), MAX_PREFILL_ROWS)
                if rows + need > MAX_STEP_ROWS:
                    break
                batch.append(self.waiting.pop(0))
                rows += need
                last_rows.append(rows - 1)
            t = time.monotonic()
            ids = await loop.run_in_executor(self.pool, self.model.step, rows)
            self.busy_s += time.monotonic() - t
            for s, row in zip(batch, last_rows, strict=True):
                self.emit(s, VOCAB[ids[row] % len(VOCAB)])
            self.running = [s for s in batch if not s.done]

    def emit(self, s: Seq, word: str) -> None:
        if s.t.is_closing():
            s.done = True
            return
        s.sent.append(word)
        self.generated += 1
        if s.stream:
            s.t.write(_event(_chunk(s, {"content": word})))
        if len(s.sent) >= s.max_tokens:
            s.done = True
            self.finish(s)

    def finish(self, s: Seq) -> None:
        usage = {
            "prompt_tokens": s.prompt,
            "completion_tokens": len(s.sent),
            "total_tokens": s.prompt + len(s.sent),
        }
        if s.stream:
            end = _event(_chunk(s, {}, "length"))
            if s.include_usage:
                end += _event({"id": s.chat_id, "object": "chat.completion.chunk",
                               "model": self.name, "choices": [], "usage": usage})  # fmt: skip
            s.t.write(end + _event(b"[DONE]") + b"0\r\n\r\n")
            return
        message = {"role": "assistant", "content": "".join(s.sent)}
        body = json.dumps({
            "id": s.chat_id, "object": "chat.completion", "model": self.name,
            "choices": [{"index": 0, "message": message, "finish_reason": "length"}],
            "usage": usage,
        }).encode()  # fmt: skip
        s.t.write(_json_head(len(body)) + body)

    def busy_share(self) -> float:
        return min(1.0, self.busy_s / max(time.monotonic() - self.started, 1e-9))


def _chunk(s: Seq, delta: dict[str, str], finish: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {"id": s.chat_id, "object": "chat.completion.chunk", "model": "toy", "choices": [choice]}


def _event(obj: object) -> bytes:
    data = b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


def _json_head(n: int, status: bytes = b"200 OK") -> bytes:
    return b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (
        status,
        n,
    )


def _text(status: bytes, body: bytes, kind: bytes = b"text/plain; version=0.0.4") -> bytes:
    return b"HTTP/1.1 %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n\r\n%s" % (
        status,
        kind,
        len(body),
        body,
    )


STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)


class FakeDcgm:
    """A made-up GPU for a CPU dry run: power from the engine's busy share, its integral."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.energy_mj = 0.0
        self.last = time.monotonic()

    def text(self) -> bytes:
        now = time.monotonic()
        watts = 60.0 + 240.0 * self.engine.busy_share()
        self.energy_mj += watts * (now - self.last) * 1e3
        self.last = now
        labels = 'gpu="0",UUID="GPU-00000000-toy0-0000-0000-000000000000",pci_bus_id="00000000:00:00.0",device="nvidia0",modelName="toy CPU stand-in",Hostname="localhost"'  # noqa: E501
        rows = [
            ("DCGM_FI_DEV_GPU_UTIL", "gauge", f"{round(100 * self.engine.busy_share())}"),
            ("DCGM_FI_DEV_POWER_USAGE", "gauge", f"{watts:.6f}"),
            ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter", f"{int(self.energy_mj)}"),
            ("DCGM_FI_DEV_FB_USED", "gauge", "1024"),
            ("DCGM_FI_DEV_FB_FREE", "gauge", "15360"),
        ]
        out = []
        for name, kind, value in rows:
            out += [f"# HELP {name} {name}", f"# TYPE {name} {kind}", f"{name}{{{labels}}} {value}"]
        return ("\n".join(out) + "\n").encode()


class Http(RequestProtocol):
    def __init__(self, engine: Engine, dcgm: FakeDcgm | None) -> None:
        super().__init__()
        self.engine, self.dcgm = engine, dcgm

    def handle(self, url: bytes, body: bytes) -> None:
        path = url.split(b"?", 1)[0]
        if path.endswith(b"/chat/completions"):
            self.chat(body)
        elif path == b"/v1/models":
            models = {"object": "list", "data": [{"id": self.engine.name, "object": "model"}]}
            data = json.dumps(models).encode()
            self.transport.write(_json_head(len(data)) + data)
        elif path == b"/health":
            self.transport.write(_text(b"200 OK", b""))
        elif path == b"/metrics":
            self.transport.write(_text(b"200 OK", self.metrics()))
        elif path == b"/dcgm" and self.dcgm is not None:
            self.transport.write(_text(b"200 OK", self.dcgm.text()))
        else:
            self.transport.write(_json_head(2, b"404 Not Found") + b"{}")

    def chat(self, body: bytes) -> None:
        try:
            req = json.loads(body or b"{}")
            messages = req.get("messages") or []
            prompt = sum(len(str(m.get("content", "")).split()) for m in messages)
            n = int(req.get("max_completion_tokens") or req.get("max_tokens") or 64)
        except (ValueError, TypeError, AttributeError):
            data = b'{"error":{"message":"bad request body"}}'
            self.transport.write(_json_head(len(data), b"400 Bad Request") + data)
            return
        stream = bool(req.get("stream"))
        opts = req.get("stream_options")
        usage = isinstance(opts, dict) and bool(opts.get("include_usage"))
        if stream:
            self.transport.write(STREAM_HEAD)
        self.engine.add(Seq(self.transport, stream, prompt, max(1, min(n, MAX_TOKENS)), usage))

    def metrics(self) -> bytes:
        e = self.engine
        rows = [
            ("tailwise_demo_running_seqs", "gauge", len(e.running)),
            ("tailwise_demo_queue_depth", "gauge", len(e.waiting)),
            ("tailwise_demo_generation_tokens_total", "counter", e.generated),
        ]
        out = []
        for name, kind, value in rows:
            out += [f"# HELP {name} toy server", f"# TYPE {name} {kind}", f"{name} {value}"]
        return ("\n".join(out) + "\n").encode()


async def serve(a: argparse.Namespace) -> None:
    device = a.device
    if device == "auto":
        try:
            import torch

            device = "cuda" if torch.cuda.is_available() else "numpy"
        except ImportError:
            device = "numpy"
    width = a.width or (4096 if device.startswith("cuda") else 256)
    try:
        model, note = build_model(device, width, a.step)
    except Exception as exc:  # a broken torch install: say so, and serve from NumPy
        print(f"# {device} failed ({type(exc).__name__}: {exc}); NumPy instead", file=sys.stderr)
        model, note = build_model("numpy", 256, a.step)
    print(f"# model: {note}", file=sys.stderr, flush=True)
    engine = Engine(model, a.model)
    dcgm = FakeDcgm(engine) if a.fake_dcgm else None
    loop = asyncio.get_running_loop()
    task = loop.create_task(engine.run())
    srv = await loop.create_server(lambda: Http(engine, dcgm), "127.0.0.1", a.port, backlog=4096)
    host, port = srv.sockets[0].getsockname()[:2]
    print(f"listening on http://{host}:{port}", flush=True)
    stop = asyncio.Event()
    with contextlib.suppress(NotImplementedError):
        loop.add_signal_handler(signal.SIGTERM, stop.set)
    try:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), a.lifetime)
    finally:
        srv.close()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        print(
            f"# served: {engine.generated} tokens, engine busy {engine.busy_share():.1%} "
            f"of {time.monotonic() - engine.started:.0f} s",
            file=sys.stderr,
            flush=True,
        )


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="gpu_toy_server.py")
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--device", default="auto", help="auto, cuda, cuda:N, cpu (torch) or numpy")
    ap.add_argument("--width", type=int, default=0, help="0: 4096 on CUDA, 256 elsewhere")
    ap.add_argument("--step", default="auto:8ms", help="layers, or auto:MS for one sequence")
    ap.add_argument("--model", default="toy")
    ap.add_argument("--fake-dcgm", action="store_true", help="serve /dcgm (a CPU dry run)")
    ap.add_argument("--lifetime", type=float, default=200.0, help="seconds")
    a = ap.parse_args(argv)
    # The engine's thread issues a step's GPU calls holding the interpreter lock: hand it
    # back to the event loop (the SSE writes) every 0.5 ms, not Python's default 5 ms.
    sys.setswitchinterval(0.0005)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(a))


if __name__ == "__main__":
    main()
