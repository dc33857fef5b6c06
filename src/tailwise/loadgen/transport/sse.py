"""Server-Sent Events framing (the WHATWG event-stream format), incremental and total.

:class:`SSEParser` turns the bytes of a ``text/event-stream`` body, in whatever
pieces the network delivers them, into events ``(type, data)``. The same
bytes give the same events however they are split (a property test checks
this), and no input makes it raise: malformed UTF-8 is replaced, unknown
fields are ignored, as the format prescribes.

The format, in short: lines end with CRLF, LF or CR; ``:`` starts a comment;
``field: value`` (one space after the colon is dropped); ``data`` lines of one
event are joined with ``\\n``; a blank line dispatches the event; ``event``
sets its type (default ``message``). An event cut off by the end of the
stream (no blank line after it) is not dispatched: :meth:`SSEParser.close`
reports it, since for an LLM stream that means truncation.
"""

from __future__ import annotations

_BOM = b"\xef\xbb\xbf"


class SSEParser:
    """Feed bytes, get complete events; one parser per response."""

    __slots__ = (
        "_data",
        "_event",
        "_held",
        "_partial",
        "_pieces",
        "_pieces_bytes",
        "_skip_lf",
        "_started",
        "idle",
        "last_id",
    )

    def __init__(self) -> None:
        self._partial = b""  # an unterminated line carried to the next read
        # Reads with no line end, held as they came (joined once, at the next line end):
        # an endless line costs each read its own length, not the whole line's again.
        self._pieces: list[bytes] = []
        self._pieces_bytes = 0
        self._skip_lf = False  # the last read ended in CR: an LF next is the same line end
        self._data: list[bytes] = []
        self._held = 0  # bytes in _data: with _partial, what an unfinished event holds
        self._event = b""
        self._started = False
        self.last_id = ""
        # Between events: nothing held, the stream's start (a BOM) already read. Kept up
        # to date by feed(), so that a caller may read the next event without it.
        self.idle = False

    def skip_start(self, first: bytes) -> None:
        """The stream begins with ``first``: if that cannot begin a BOM, its start is read.

        Lets a caller read the stream's first event without :meth:`feed` (see ``idle``).
        """
        if not self._started and not self._partial and first[:1] not in (b"", _BOM[:1]):
            self._started = True
            self.idle = True

    @property
    def pending_bytes(self) -> int:
        """Bytes held for an event not yet complete (a caller bounds this; see http.py)."""
        return len(self._partial) + self._pieces_bytes + self._held

    def feed(self, chunk: bytes) -> list[tuple[str, str]]:
        """Events completed by ``chunk``, in order."""
        if not chunk:
            return []  # an empty read changes nothing (it must not clear the CR state)
        if self._started and not self._skip_lf and b"\n" not in chunk and b"\r" not in chunk:
            self._pieces.append(chunk)  # the unfinished line goes on: nothing to split
            self._pieces_bytes += len(chunk)
            self.idle = False
            return []
        if self._pieces:
            self._partial += b"".join(self._pieces)
            self._pieces = []
            self._pieces_bytes = 0
        if not self._started:
            if len(self._partial) + len(chunk) < len(_BOM) and _BOM.startswith(
                self._partial + chunk
            ):
                self._partial += chunk  # too short to tell whether a BOM starts the stream
                return []
            self._started = True
            chunk = self._partial + chunk
            self._partial = b""
            if chunk.startswith(_BOM):
                chunk = chunk[len(_BOM) :]
        if self._skip_lf:
            self._skip_lf = False
            if chunk[:1] == b"\n":
                chunk = chunk[1:]
        buf = self._partial + chunk if self._partial else chunk
        lines = buf.splitlines(keepends=True)
        if lines and not lines[-1].endswith((b"\n", b"\r")):
            self._partial = lines.pop()
        else:
            self._partial = b""
        if lines and lines[-1].endswith(b"\r"):
            self._skip_lf = True
        events: list[tuple[str, str]] = []
        for line in lines:
            self._line(line.rstrip(b"\r\n"), events)
        self.idle = not (self._partial or self._data or self._skip_lf or self._event)
        return events

    def _line(self, line: bytes, events: list[tuple[str, str]]) -> None:
        if not line:
            if self._data:
                data = b"\n".join(self._data).decode("utf-8", "replace")
                events.append((self._event.decode("utf-8", "replace") or "message", data))
            self._data = []
            self._held = 0
            self._event = b""
            return
        if line[:1] == b":":
            return  # a comment (keep-alive pings)
        field, colon, value = line.partition(b":")
        if colon and value[:1] == b" ":
            value = value[1:]
        if field == b"data":
            self._data.append(value)
            self._held += len(value) + 1  # its line end: endless empty data lines are bounded
        elif field == b"event":
            self._event = value
        elif field == b"id" and b"\0" not in value:
            self.last_id = value.decode("utf-8", "replace")
        # "retry" and unknown fields are ignored, as the format requires

    def close(self) -> bool:
        """End of stream. True if an event (or a line) was left incomplete: truncated."""
        return bool(self._data or self._pieces_bytes or self._partial.strip(b"\r\n"))
