"""The engines, above a fake transport whose latency law we set."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np

from tailwise.clock import now_ns
from tailwise.loadgen.engine.attack import OpenLoop
from tailwise.loadgen.runner import RunOptions, execute, prepare
from tailwise.loadgen.transport import FakeTransport, OnDone, Transport
from tailwise.metrics import derive
from tailwise.records import RecordBlock

MS = 1_000_000


def run_fake(tmp_path: Path, law, **kw):  # type: ignore[no-untyped-def]
    # The engine's tests count every planned request: no transient cut (--warmup auto
    # would drop a start the busy machine made late, which is its job, not theirs).
    kw.setdefault("warmup", "0s")
    opts = RunOptions(urls=["http://127.0.0.1:9/x"], **kw)
    return execute(prepare(opts), tmp_path, transport=FakeTransport(law))


def test_open_loop_never_sends_early_and_keeps_the_schedule(tmp_path: Path) -> None:
    res = run_fake(
        tmp_path, lambda seq: (2 * MS, 200, ""), rate="500/s", arrival="constant", duration="1s"
    )
    r = res.records
    assert len(r) == 500
    lag = r.sent_ns - r.scheduled_ns
    assert (lag >= 0).all()  # a request is never sent before its intended instant
    assert np.median(lag) < 5 * MS  # nor bunched up: sends follow the schedule
    assert np.array_equal(r.scheduled_ns, np.arange(500) * 2 * MS)
    assert res.summary["requests"]["ok"] == 500 and res.summary["requests"]["accounted"]


def test_in_flight_cap_wait_is_latency_not_lost(tmp_path: Path) -> None:
    # 2 in flight x 50 ms = 40/s capacity, offered 200/s: the client queue grows.
    res = run_fake(
        tmp_path,
        lambda seq: (50 * MS, 200, ""),
        rate="200/s",
        arrival="constant",
        duration="1s",
        max_in_flight=2,
        timeout="1s",
    )
    s, r = res.summary, res.records
    assert s["requests"]["accounted"]
    assert s["generator"]["cap_bound"] == 198  # all but the first two waited
    assert s["requests"]["not_sent"] > 0  # the queue could not drain before the end
    # at the drain deadline the queue is given up and the (at most 2) in flight are cancelled
    assert s["requests"]["errors"]["not_sent:ended"] > 0
    assert s["requests"]["errors"].get("cancelled", 0) <= 2
    ok = r.error == 0
    lat, lag = derive.latency_ns(r)[ok], derive.send_lag_ns(r)[ok]
    assert (lat >= lag + 50 * MS - MS).all()  # the wait is inside the latency
    assert s["send_lag_ms"]["p99"] > 500  # and visible as send lag
    assert (
        s["verdict"] != "invalid"
    )  # waiting on the cap is the target's fault, not the generator's


def test_closed_loop_is_labelled_and_paced_by_the_server(tmp_path: Path) -> None:
    res = run_fake(tmp_path, lambda seq: (10 * MS, 200, ""), concurrency=4, duration="1s")
    s = res.summary
    assert s["mode"] == "closed" and "closed-loop" in s["note"]
    # 4 users x 1 request per ~10 ms: about 400 requests, whatever rate one might have wanted
    assert 250 < s["requests"]["scheduled"] <= 400
    assert s["requests"]["accounted"]


def test_a_plan_over_many_blocks_is_sent_once_in_order(tmp_path: Path) -> None:
    # 9,000 requests are three blocks (4096 + 4096 + 808), each built ahead of need in
    # steps between sends: every planned instant appears exactly once, in seq order.
    kw = {"rate": "30000/s", "arrival": "constant", "requests": 9000, "warmup": "0s"}
    res = run_fake(tmp_path, lambda seq: (MS, 200, ""), **kw)
    p = prepare(RunOptions(urls=["http://127.0.0.1:9/x"], **kw))
    assert p.schedule is not None
    plan = np.concatenate(list(p.schedule.blocks()))
    r = res.records
    assert len(plan) == 9000 and np.array_equal(r.seq, np.arange(9000))
    assert np.array_equal(r.scheduled_ns, plan)
    assert (r.sent_ns >= r.scheduled_ns).all()
    assert res.summary["requests"]["ok"] == 9000 and res.summary["requests"]["accounted"]


async def start_open_loop(transport: Transport, offsets: np.ndarray) -> OpenLoop:
    """An open loop over ``transport`` for the plan ``offsets``, its clock 5 ms from now."""
    engine = OpenLoop(transport, iter([offsets]), max_in_flight=10_000)
    await transport.start(engine.on_done)
    engine.prepare()
    t0 = now_ns() + 5 * MS
    transport.set_origin(t0)
    engine.begin(t0)
    return engine


def test_stop_leaves_the_block_built_ahead_out_of_the_run() -> None:
    """Interrupted mid-plan: no row of the next block, built ahead but never due, joins."""
    transport = FakeTransport(lambda seq: (MS, 200, ""))
    offsets = np.arange(20_000, dtype=np.int64) * 50_000  # 20k/s for 1 s

    async def go() -> OpenLoop:
        engine = await start_open_loop(transport, offsets)
        await asyncio.sleep(0.3)  # into the second block: the third is built ahead
        engine.stop()
        await asyncio.wait_for(engine.idle.wait(), 5)
        return engine

    engine = asyncio.run(go())
    rows = sum(b.rows for b in engine.blocks)
    assert 4096 < rows < 20_000 and len(engine.blocks) == rows // 4096 + 1
    for block in engine.blocks:
        sched = np.frombuffer(block.scheduled_ns, dtype=np.int64)[: block.rows]
        assert np.array_equal(sched, offsets[block.base : block.base + block.rows])
    assert len(engine.completed) == rows == len(set(engine.completed))


class BurstTransport:
    """Holds every answer until ``release_ns``, then delivers them in one callback.

    Each delivery busy-waits ``work_ns`` (the CPU a completion costs): a burst of
    completions that holds the event loop, as after a server or VM pause. Requests
    sent during or after the burst are answered on the next loop turn.
    """

    def __init__(self, release_ns: int, work_ns: int) -> None:
        self.release_ns, self.work_ns = release_ns, work_ns
        self.held: list[tuple[RecordBlock, int]] = []
        self.released = False
        self.held_count = 0
        self.t0 = 0
        self.on_done: OnDone | None = None

    async def start(self, on_done: OnDone) -> None:
        self.on_done = on_done

    def set_origin(self, t0_ns: int) -> None:
        self.t0 = t0_ns
        loop = asyncio.get_running_loop()
        loop.call_later((t0_ns + self.release_ns - now_ns()) / 1e9, self._release)

    def send(self, block: RecordBlock, j: int) -> None:
        if self.released:
            asyncio.get_running_loop().call_soon(self._answer, block, j)
        else:
            self.held.append((block, j))

    def _answer(self, block: RecordBlock, j: int) -> None:
        t = now_ns() - self.t0
        block.first_byte_ns[j] = block.done_ns[j] = t
        block.status[j] = 200
        assert self.on_done is not None
        self.on_done(block, j)

    def _release(self) -> None:
        self.released = True
        self.held_count = len(self.held)
        for block, j in self.held:
            end = now_ns() + self.work_ns
            while now_ns() < end:
                pass
            self._answer(block, j)

    def abort_all(self, kind: str) -> int:
        return 0

    async def close(self) -> None:
        pass


def test_sends_due_during_a_burst_of_completions_are_not_held_behind_it() -> None:
    # 40 answers held until 20 ms, then delivered in one callback costing 0.5 ms each:
    # the loop is busy from 20 to ~40 ms. A request due during the burst goes out at the
    # next completion, so before the burst's last one; a pacer held behind the burst
    # would send it only after the whole callback (up to ~20 ms late).
    transport = BurstTransport(release_ns=20 * MS, work_ns=MS // 2)
    offsets = np.arange(120, dtype=np.int64) * (MS // 2)

    async def go() -> OpenLoop:
        engine = await start_open_loop(transport, offsets)
        await asyncio.wait_for(engine.finished_sending.wait(), 5)
        await asyncio.wait_for(engine.idle.wait(), 5)
        return engine

    engine = asyncio.run(go())
    block = engine.blocks[0]
    sent = np.frombuffer(block.sent_ns, dtype=np.int64)[:120]
    done = np.frombuffer(block.done_ns, dtype=np.int64)[:120]
    held = np.sort(done[: transport.held_count])  # the burst's completion stamps
    assert transport.held_count >= 39 and (sent >= offsets).all()
    # Ordering, not timing: a request due before the burst's second-to-last stamp is
    # sent by the completion after its due time, hence before the last stamp.
    during = (offsets > 20 * MS) & (offsets < held[-2])
    assert during.sum() >= 20  # the burst spanned many sends
    assert (sent[during] < held[-1]).all(), (sent[during] - held[-1]) / MS
    assert len(engine.completed) == 120
