"""Multi-turn sessions: conversations that arrive open-loop and carry their history.

``--turns N --think TIME`` turns each arrival of the schedule into a session
of N chat turns. Turn 0 is due at the session's scheduled instant; turn k+1 is
due ``--think`` after turn k's answer ended, and its body is the conversation
so far: every user message and every answer the server actually streamed
(the assistant's text, appended as a message), then the next user message.
So a server's prefix cache sees what a chat client would send it.

Latency is measured from each turn's *intended* instant (the previous answer's
end plus the think time), the open-loop rule applied within a session: a turn
that waits for the client (the in-flight cap, a late timer) counts that wait.
A turn that fails ends its session (a client would not go on); a turn due
after the plan's end is not sent, as in any run. Rows exist for turns that
came due, so the accounting identity holds as for any run; a later turn's
``parent`` in ``records.jsonl`` is the seq of its session's previous turn.

The per-seq bodies are rendered when a turn comes due and dropped when it
ends: :class:`TurnPayloads` stands where the transport expects its list of
pre-rendered requests (it indexes them by seq).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tailwise.clock import now_ns
from tailwise.errors import BadInput
from tailwise.files import read_bounded_utf8
from tailwise.loadgen.engine.attack import Engine
from tailwise.loadgen.llm.openai import MAX_DATASET_ROWS
from tailwise.loadgen.transport import Transport
from tailwise.loadgen.transport.targets import Target, render
from tailwise.metrics import derive
from tailwise.metrics.percentiles import distribution_ms
from tailwise.records import BLOCK_ROWS, RecordBlock, Records

MAX_TURNS = 1000
NO_SEQ = 1 << 62  # the transport takes seq modulo the payloads' length: this keeps it whole


@dataclass
class SessionPlan:
    """What each session says: turn k of session s uses prompt ``(s * turns + k) % n``."""

    turns: int
    think_ns: int
    bodies: list[dict[str, Any]]  # the first-turn request bodies, as JSON objects
    method: str
    headers: list[tuple[str, str]]
    history: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    pending: dict[int, bytes] = field(default_factory=dict)  # seq -> JSON body
    answers: dict[int, str] = field(default_factory=dict)  # seq -> streamed answer
    session_of: list[int] = field(default_factory=list)  # by seq
    turn_of: list[int] = field(default_factory=list)  # by seq
    # ShareGPT conversations (--prompts): session s replays row s's human turns, each
    # with its recorded answer's length (words) as max_tokens.
    conversations: list[list[tuple[str, int | None]]] | None = None
    default_max_tokens: list[int] = field(default_factory=list)  # where none was recorded

    def turns_of(self, session: int) -> int:
        if self.conversations is None:
            return self.turns
        return min(self.turns, len(self.conversations[session % len(self.conversations)]))

    def body(self, seq: int, session: int, turn: int) -> None:
        """Render turn ``turn`` of ``session`` as request ``seq`` (its history so far)."""
        base = self.bodies[(session * self.turns + turn) % len(self.bodies)]
        user = base["messages"][-1]
        if self.conversations is not None:
            text, out = self.conversations[session % len(self.conversations)][turn]
            user = {"role": "user", "content": text}
            if out is None and self.default_max_tokens:
                drawn = self.default_max_tokens
                out = drawn[(session * self.turns + turn) % len(drawn)]
            base = {**base, "max_tokens": out} if out is not None else base
        messages = [*self.history.get(session, []), user]
        self.history[session] = messages
        self.pending[seq] = json.dumps({**base, "messages": messages}).encode()
        self.session_of.append(session)
        self.turn_of.append(turn)

    def answered(self, seq: int, text: str) -> None:
        self.answers[seq] = text

    def carry(self, seq: int, session: int) -> None:
        """The answer of ``seq`` joins its session's history (the next turn sends it)."""
        text = self.answers.pop(seq, "")
        self.history[session] = [*self.history[session], {"role": "assistant", "content": text}]

    def end(self, session: int) -> None:
        self.history.pop(session, None)


def parse_turns(text: int | str) -> int:
    try:
        turns = int(str(text).strip())
    except ValueError:
        turns = 0
    if not 1 <= turns <= MAX_TURNS:
        raise BadInput("--turns", text, f"a whole number of turns from 1 to {MAX_TURNS}")
    return turns


def session_plan(
    raw_bodies: list[bytes], turns: int, think_ns: int, method: str, headers: list[tuple[str, str]]
) -> SessionPlan:
    """A plan from the first-turn chat bodies ``prepare`` rendered (one user message each)."""
    bodies = [json.loads(b) for b in raw_bodies]
    if not all(isinstance(b.get("messages"), list) and b["messages"] for b in bodies):
        raise BadInput("--turns", turns, "chat bodies (--api openai-chat) for sessions")
    return SessionPlan(turns, think_ns, bodies, method, headers)


def read_conversations(path: str) -> list[list[tuple[str, int | None]]] | None:
    """The human turns of each ShareGPT row of a ``--prompts`` file, with the length in
    words of the answer recorded after each (None: no answer recorded); None when no row
    is a ShareGPT conversation (the file's prompts are then used one a turn)."""
    out: list[list[tuple[str, int | None]]] = []
    try:
        lines = read_bounded_utf8(path, "--prompts").splitlines()[:MAX_DATASET_ROWS]
    except BadInput:
        return None  # read_dataset, which ran first, has said what is wrong
    for line in lines:
        try:
            row = json.loads(line) if line.strip() else None
        except (ValueError, RecursionError):
            return None
        turns = row.get("conversations") if isinstance(row, dict) else None
        if isinstance(turns, list):
            conv = _human_turns(turns)
            if conv:
                out.append(conv)
    return out or None


def _human_turns(turns: list[Any]) -> list[tuple[str, int | None]]:
    conv: list[tuple[str, int | None]] = []
    for t in turns:
        if not isinstance(t, dict) or not isinstance(t.get("value"), str):
            continue
        if t.get("from") in ("human", "user"):
            conv.append((t["value"], None))
        elif t.get("from") in ("gpt", "assistant") and conv and conv[-1][1] is None:
            conv[-1] = (conv[-1][0], max(1, len(t["value"].split())))
    return conv


class TurnPayloads:
    """The request bytes of each turn for one target, rendered when the transport asks."""

    def __init__(self, plan: SessionPlan, target: Target) -> None:
        self.plan = plan
        self.target = target

    def __len__(self) -> int:
        return NO_SEQ

    def __getitem__(self, seq: int) -> bytes:
        body = self.plan.pending.get(seq, b"{}")
        return render(self.target, self.plan.method, self.plan.headers, body)


class SessionLoop(Engine):
    """Sessions start open-loop at the schedule's instants; each turn waits for the last."""

    mode = "open"

    def __init__(
        self,
        transport: Transport,
        starts_ns: np.ndarray,
        plan: SessionPlan,
        max_in_flight: int,
        horizon_ns: int | None,
    ) -> None:
        super().__init__(transport, max_in_flight)
        self.starts_ns = starts_ns
        self.plan = plan
        self.horizon_ns = horizon_ns
        self._issued = 0
        self._block: RecordBlock | None = None
        self._waiting = 0  # sessions with a turn still to come (a timer set)
        self.sessions_ended_early = 0  # a turn failed, or the plan ended before its last turn

    def begin(self, t0_ns: int) -> None:
        self.t0 = t0_ns
        loop = asyncio.get_running_loop()
        origin = loop.time() + (t0_ns - now_ns()) / 1e9
        self._waiting = len(self.starts_ns)
        for s, start in enumerate(self.starts_ns.tolist()):
            loop.call_at(origin + start / 1e9, self._due, s, 0, int(start))
        if not self._waiting:
            self._finish()

    def _due(self, session: int, turn: int, intended_ns: int, parent: int = -1) -> None:
        if self.stopping:
            return
        early_ns = self.t0 + intended_ns - now_ns()
        if early_ns > 0:  # the loop's timers fire up to a tick early: never send before due
            asyncio.get_running_loop().call_later(
                early_ns / 1e9, self._due, session, turn, intended_ns, parent
            )
            return
        if self.horizon_ns is not None and intended_ns >= self.horizon_ns:
            self.sessions_ended_early += turn > 0
            self._session_over(session)
            return
        block, j = self._row(intended_ns)
        block.parent[j] = parent  # the session's previous turn (records.jsonl: parent)
        self.plan.body(block.base + j, session, turn)
        if self.in_flight >= self.max_in_flight:
            block.capped[j] = 1
            self.cap_queue.append((block, j))
        else:
            self._send(block, j)

    def _row(self, intended_ns: int) -> tuple[RecordBlock, int]:
        block = self._block
        if block is None or self._issued - block.base >= BLOCK_ROWS:
            block = RecordBlock(self._issued, BLOCK_ROWS)
            block.rows = 0
            self.blocks.append(block)
            self._block = block
        j = self._issued - block.base
        block.rows = j + 1
        block.scheduled_ns[j] = intended_ns
        self._issued += 1
        return block, j

    def on_done(self, block: RecordBlock, j: int) -> None:
        self.in_flight -= 1
        seq = block.base + j
        self.completed.append(seq)
        self.plan.pending.pop(seq, None)
        if self.cap_queue and not self.stopping:
            self._send(*self.cap_queue.popleft())
        session, turn = self.plan.session_of[seq], self.plan.turn_of[seq]
        last = self.plan.turns_of(session)
        if self.stopping or block.error[j] != 0 or turn + 1 >= last:
            self.sessions_ended_early += turn + 1 < last
            self.plan.answers.pop(seq, None)
            self._session_over(session)
        else:
            self.plan.carry(seq, session)
            intended = int(block.done_ns[j]) + self.plan.think_ns
            delay_s = (self.t0 + intended - now_ns()) / 1e9
            asyncio.get_running_loop().call_later(
                max(delay_s, 0.0), self._due, session, turn + 1, intended, seq
            )
        if self.finished_sending.is_set() and self.in_flight == 0:
            self.idle.set()

    def _session_over(self, session: int) -> None:
        self.plan.end(session)
        self._waiting -= 1
        if self._waiting == 0:
            self._finish()

    def _finish(self) -> None:
        self.finished_sending.set()
        if self.in_flight == 0:
            self.idle.set()


def sessions_section(plan: SessionPlan, r: Records, ended_early: int) -> dict[str, Any]:
    """``summary.sessions``: TTFT and latency by turn index over the window's ok turns."""
    turn = np.full(len(r), -1, dtype=np.int64)  # records are in seq order, from seq 0
    known = min(len(r), len(plan.turn_of))
    turn[:known] = plan.turn_of[:known]
    ok = (r.error == 0) & r.in_window
    ttft, latency = derive.ttft_ns(r), derive.latency_ns(r)
    by_turn = []
    for k in range(plan.turns):
        rows = ok & (turn == k)
        by_turn.append(
            {
                "turn": k,
                "ttft_ms": distribution_ms(ttft[rows & (ttft >= 0)]),
                "latency_ms": distribution_ms(latency[rows]),
                "input_tokens_mean": float(r.input_tokens[rows & (r.input_tokens >= 0)].mean())
                if (rows & (r.input_tokens >= 0)).any()
                else None,
            }
        )
    sessions = len(set(plan.session_of))
    return {
        "turns": plan.turns,
        "think_ms": plan.think_ns / 1e6,
        "sessions": sessions,
        "ended_early": ended_early,
        "by_turn": by_turn,
    }


def text_lines(section: dict[str, Any]) -> list[str]:
    """The terminal's lines: sessions, and TTFT and prompt size by turn."""
    lines = [
        f"sessions  {section['sessions']} sessions of {section['turns']} turns, think "
        f"{section['think_ms']:g}ms, {section['ended_early']} ended early"
    ]
    for t in section["by_turn"]:
        ttft = t["ttft_ms"]
        p50 = f"{ttft['p50']:.1f}ms" if ttft.get("p50") is not None else "-"
        p99 = f"{ttft['p99']:.1f}ms" if ttft.get("p99") is not None else "-"
        size = t["input_tokens_mean"]
        prompt = f", prompt {size:.0f} tokens" if size is not None else ""
        lines.append(f"  turn {t['turn']:<3} TTFT p50 {p50}, p99 {p99} (n {ttft['count']}){prompt}")
    return lines
