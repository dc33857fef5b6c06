"""Rerank and score (``--api rerank``, ``tei-rerank``, ``score``): bodies, answers, real runs.

The answers real servers give (vLLM's documented examples, TEI's schema: see
``tests/fixtures/rerank/README.md``) are read for their usage and errors; loopback runs
against ``serve-demo --kind llm`` check the wire end to end and the demo's cost law
(``step_base + per_prefill_token x sum of pair tokens``, one engine step when the pairs
fit the batch); a small server in this file answers hostile bodies.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tailwise.errors import BadInput
from tailwise.loadgen.llm import apis
from tailwise.loadgen.llm.apis.rerank import RanksDocuments, classify_ranking
from tailwise.loadgen.llm.stream import MALFORMED, MAX_TOKEN_COUNT
from tailwise.loadgen.prepare import documents
from tests.clirun import run_cli
from tests.wire import ThreadedServer

FIXTURES = Path(__file__).parent.parent / "fixtures" / "rerank"


# -- answers of real servers ---------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "tokens"),
    [
        ("vllm_rerank.json", 56),  # usage.total_tokens only (vLLM's documented example)
        ("vllm_rerank_usage.json", 42),  # prompt_tokens and total_tokens (newer vLLM)
        ("vllm_score.json", None),  # "usage": {} in vLLM's documented example
        ("tei_rerank.json", None),  # a bare list: TEI reports no usage in the body
    ],
)
def test_real_answers_are_read_for_their_input_tokens(name: str, tokens: int | None) -> None:
    chunk = classify_ranking((FIXTURES / name).read_bytes())
    assert chunk.error is None
    assert chunk.prompt_tokens == tokens
    assert chunk.completion_tokens is None  # nothing generated: output tokens stay unknown


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("vllm_error.json", "The model `bge` does not exist."),
        ("tei_error.json", "`texts` cannot be empty"),
    ],
)
def test_real_error_answers_are_errors_with_the_servers_message(name: str, message: str) -> None:
    assert classify_ranking((FIXTURES / name).read_bytes()).error == message


@pytest.mark.parametrize(
    "body",
    [
        b"not json",
        b"[1, 2]",  # ranks that are not objects
        b'[{"index": "0", "score": 1}]',  # index a string
        b'[{"index": true, "score": 1}]',  # a bool is not an index
        b'[{"index": -1, "score": 1}]',
        b'[{"index": 0, "score": "high"}]',
        b'{"results": [{"index": 0}]}',  # no relevance_score
        b'{"results": {"index": 0}}',  # not a list
        b'{"data": [{"index": 0, "score": 1}], "usage": []}',
        b'{"results": [], "usage": {"total_tokens": -5}}',
        b'{"results": [], "usage": {"total_tokens": 1e30}}',
        b'{"results": [], "usage": {"prompt_tokens": %d}}' % (MAX_TOKEN_COUNT + 1),
        b'{"results": [], "usage": {"total_tokens": "56"}}',
        b"7",
        b"{}",  # neither results nor data
        b"[" * 100_000 + b"]" * 100_000,  # deeper than the parser goes
    ],
)
def test_hostile_answers_are_malformed_never_a_crash(body: bytes) -> None:
    assert classify_ranking(body).error == MALFORMED


def test_a_large_valid_answer_is_read_whole() -> None:
    ranks = [{"index": i, "relevance_score": 0.5} for i in range(100_000)]
    body = json.dumps({"results": ranks, "usage": {"total_tokens": 9}}).encode()
    assert classify_ranking(body).prompt_tokens == 9


# -- bodies and documents -------------------------------------------------------------


def test_each_kind_builds_its_servers_body_byte_for_byte() -> None:
    bodies = {
        name: json.dumps(
            apis.get(name).ranking_body("m", "q w", ["a", "b c"]),  # type: ignore[attr-defined]
            separators=(",", ":"),
        )
        for name in ("rerank", "tei-rerank", "score")
    }
    assert bodies == {
        "rerank": '{"model":"m","query":"q w","documents":["a","b c"]}',
        "tei-rerank": '{"query":"q w","texts":["a","b c"]}',
        "score": '{"model":"m","text_1":"q w","text_2":["a","b c"]}',
    }
    assert [apis.get(n).path for n in ("rerank", "tei-rerank", "score")] == [
        "/v1/rerank",
        "/rerank",
        "/score",
    ]
    assert all(isinstance(apis.get(n), RanksDocuments) for n in ("rerank", "score"))
    assert not isinstance(apis.get("openai-embeddings"), RanksDocuments)


def test_document_counts_and_lengths_follow_their_specs_and_the_seed() -> None:
    queries: list[apis.Prompt] = ["one two three"] * 200
    drawn = documents.rankings(queries, "uniform:2-9", "5", seed=7)
    counts = [len(r.documents) for r in drawn]
    assert set(counts) == set(range(2, 10))  # 200 draws cover every count of 2..9
    assert all(len(d.split()) == 5 for r in drawn for d in r.documents)
    assert all(r.words == len(r.documents) * (3 + 5) for r in drawn)  # the query per pair
    assert drawn == documents.rankings(queries, "uniform:2-9", "5", seed=7)
    assert drawn != documents.rankings(queries, "uniform:2-9", "5", seed=8)
    assert documents.rankings(queries[:3], None, None, 0)[0].words == 10 * (3 + 128)


def test_a_draw_beyond_the_bound_is_cut_to_it() -> None:
    drawn = documents.sample_bounded("lognormal:50,3", "--documents", 2000, 100, random.Random(1))
    assert max(drawn) == 100 and min(drawn) >= 1  # sigma 3: many draws above 100, cut


def test_the_words_bound_keeps_fewer_distinct_bodies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(documents, "MAX_PROMPT_WORDS", 1_000)
    drawn = documents.rankings(["q"] * 50, "10", "9", seed=0)  # 100 words a body
    assert len(drawn) == 10
    with pytest.raises(BadInput, match=r"--documents: got '201'.*1,005 words"):
        documents.rankings(["q"] * 50, "201", "4", seed=0)  # one body of 201 x (1 + 4)


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--documents", "0"], "--documents"),
        (["--documents", "-3"], "--documents"),
        (["--documents", "many"], "--documents"),
        (["--documents", "2.5"], "--documents"),
        (["--documents", "20000"], "--documents"),
        (["--documents", "uniform:5-20000"], "--documents"),
        (["--documents", "normal:x"], "--documents"),
        (["--document-tokens", "200000"], "--document-tokens"),
        (["--document-tokens", "lognormal:0,1"], "--document-tokens"),
    ],
)
def test_bad_document_values_exit_2_with_one_line_naming_the_field(
    args: list[str], field: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", "http://127.0.0.1:9", "--api", "rerank", "--model", "m", *args]
    code, _, err = run_cli(argv, capsys)
    assert code == 2
    (line,) = err.strip().splitlines()
    assert line.startswith(f"tailwise: error: {field}: got ")


def test_documents_with_a_kind_that_sends_none_is_refused(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["run", "http://127.0.0.1:9", "--api", "openai-chat", "--model", "m"]
    code, _, err = run_cli([*argv, "--documents", "5"], capsys)
    assert code == 2
    assert err.strip() == (
        "tailwise: error: --documents: got '5', expected only with --api rerank, score or "
        "tei-rerank (the kinds that send documents)"
    )


# -- loopback runs against the demo server ----------------------------------------------

STEP_BASE_MS, PER_TOKEN_MS = 2.0, 0.2  # the demo's law, large against a busy machine's noise
QUERY_WORDS, DOC_WORDS = 4, 32


def _run(
    url: str, api: str, docs: int, out: Path, capsys: pytest.CaptureFixture[str], *more: str
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    argv = ["run", url, "--api", api, "--model", "tailwise-demo", "--rate", "20/s"]
    argv += ["--requests", "20", "--input-tokens", str(QUERY_WORDS), "--documents", str(docs)]
    argv += ["--document-tokens", str(DOC_WORDS), "--server-metrics", "off", "--warmup", "0s"]
    code, _, err = run_cli([*argv, "--out", str(out), *more], capsys)
    assert code in (0, 5), err
    summary = json.loads((out / "summary.json").read_text())
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    return summary, records


@pytest.mark.parametrize("api", ["rerank", "tei-rerank", "score"])
def test_a_run_follows_the_demo_cost_law(
    api: str,
    demo_target: Callable[..., str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = demo_target("llm", "--step-base", f"{STEP_BASE_MS}ms", "--per-prefill-token", "200us")
    runs = {docs: _run(url, api, docs, tmp_path / str(docs), capsys) for docs in (2, 16)}
    for docs, (summary, records) in runs.items():
        assert summary["requests"]["ok"] == summary["requests"]["scheduled"] == 20
        assert "ttft_ms" not in summary or not summary["ttft_ms"]  # TTFT is not defined
        pair_tokens = docs * (QUERY_WORDS + DOC_WORDS)
        expected = None if api == "tei-rerank" else pair_tokens  # TEI: no usage
        assert {r["input_tokens"] for r in records} == {expected}
        # The engine sleeps the law's step: no request can be faster (less the 2 ms the
        # engine's timeline may catch up), however busy the machine.
        law_ms = STEP_BASE_MS + PER_TOKEN_MS * pair_tokens
        fastest_ms = min(r["done_ns"] - r["sent_ns"] for r in records) / 1e6
        assert fastest_ms >= law_ms - 2.5, (docs, fastest_ms, law_ms)
    # 16 pairs cost 117 ms against 16 ms for 2: more documents, longer, by the law's margin
    few, many = runs[2][0]["latency_ms"]["p50"], runs[16][0]["latency_ms"]["p50"]
    assert many > few


def test_a_wrong_model_is_booked_as_the_servers_404(
    demo_target: Callable[..., str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = demo_target("llm")
    argv = ["run", url, "--api", "score", "--model", "nope", "--rate", "50/s", "--requests", "10"]
    argv += ["--no-preflight", "--server-metrics", "off", "--out", str(tmp_path / "r")]
    code, _, err = run_cli(argv, capsys)
    s = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert s["requests"]["failed"] == s["requests"]["scheduled"] == 10, err
    assert s["requests"]["errors"] == {"http_4xx": 10}
    records = (tmp_path / "r" / "records.jsonl").read_text().splitlines()
    assert {json.loads(line)["status"] for line in records} == {404}
    assert code != 0
    # With the preflight (the default), the same mistake stops before the run, naming it
    code, _, err = run_cli([*argv[:10], "--out", str(tmp_path / "r2")], capsys)
    assert code == 7 and "404" in err and "The model `nope` does not exist." in err


# -- hostile servers ---------------------------------------------------------------------


class FixedAnswer(ThreadedServer):
    """An HTTP/1.1 keep-alive server on 127.0.0.1, in a thread, giving every request one
    status and body."""

    def __init__(self, status: int, body: bytes) -> None:
        super().__init__()
        self.status, self.body = status, body

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            length = re.search(rb"(?i)content-length:\s*(\d+)", head)
            await reader.readexactly(int(length.group(1)) if length else 0)
            writer.write(
                b"HTTP/1.1 %d X\r\nContent-Type: application/json\r\n"
                b"Content-Length: %d\r\n\r\n%s" % (self.status, len(self.body), self.body)
            )
            await writer.drain()


_HUGE_OK = json.dumps({"results": [{"index": 0, "relevance_score": 0.5}] * 80_000}).encode()
_TOO_BIG = json.dumps({"results": [{"index": 0, "relevance_score": 0.5}] * 200_000}).encode()


@pytest.mark.parametrize(
    ("status", "body", "errors"),
    [
        (200, (FIXTURES / "tei_error.json").read_bytes(), {"stream_error": 5}),
        (200, b"<html>oops</html>", {"malformed_chunk": 5}),
        (200, b'{"results": [{"index": "zero", "relevance_score": 1}]}', {"malformed_chunk": 5}),
        (200, _HUGE_OK, {}),  # 3 MiB of ranks: read, bounded, fine
        (200, _TOO_BIG, {"too_large": 5}),  # over the 4 MiB bound of an answer
        (500, b'{"error": "boom", "error_type": "Backend"}', {"http_5xx": 5}),
        (422, (FIXTURES / "tei_error.json").read_bytes(), {"http_4xx": 5}),
    ],
)
def test_hostile_answers_are_booked_never_a_crash(
    status: int,
    body: bytes,
    errors: dict[str, int],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    with FixedAnswer(status, body) as url:
        argv = ["run", url, "--api", "tei-rerank", "--model", "m", "--rate", "50/s"]
        argv += ["--requests", "5", "--documents", "3", "--document-tokens", "4"]
        argv += ["--no-preflight", "--server-metrics", "off", "--out", str(tmp_path / "r")]
        run_cli(argv, capsys)
    s = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert s["requests"]["scheduled"] == 5
    assert s["requests"]["errors"] == errors
    assert s["requests"]["ok"] == 5 - sum(errors.values())


def _post(url: str, body: object) -> tuple[int, Any]:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(url, json.dumps(body).encode(), method="POST")
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_the_demo_answers_each_shape_and_refuses_what_could_never_run(
    demo_target: Callable[..., str],
) -> None:
    url = demo_target("llm", "--max-num-seqs", "4", "--max-waiting", "4")
    docs = ["a b", "the fox", "the quick fox"]
    status, doc = _post(f"{url}/v1/rerank", {"query": "the fox", "documents": docs, "top_n": 2})
    assert status == 200
    assert [r["index"] for r in doc["results"]] == [1, 2]  # best first, cut to top_n
    assert doc["usage"] == {"prompt_tokens": 4 + 4 + 5, "total_tokens": 13}
    status, doc = _post(f"{url}/rerank", {"query": "the fox", "texts": docs})
    assert status == 200 and [r["index"] for r in doc] == [1, 2, 0]  # TEI: a bare list
    assert classify_ranking(json.dumps(doc).encode()).error is None
    for path in ("/score", "/v1/score"):
        status, doc = _post(f"{url}{path}", {"text_1": "the fox", "text_2": docs})
        assert status == 200 and [d["score"] for d in doc["data"]] == [0.0, 1.0, 1.0]
    status, doc = _post(f"{url}/v1/rerank", {"query": "q", "documents": ["d"] * 9})
    assert status == 400 and "at most 8 pairs" in doc["error"]["message"]  # 4 + 4
    for bad in ({"query": 3, "documents": docs}, {"query": "q", "documents": []}):
        status, doc = _post(f"{url}/v1/rerank", bad)
        assert status == 400 and doc["error"]["type"] == "invalid_request_error"
