"""Prometheus text exposition (format 0.0.4), dependency-free.

An instrumentation concern, so it lives here: the in-process trackers
(:mod:`tailwise.instrument.prometheus`, prefix ``tailwise_``) and the demo
targets (:mod:`tailwise.server.apps`, the default prefix ``tailwise_demo_``)
both write through it. Samples of one family are kept together under one
``HELP`` and ``TYPE`` however many sources add to it, as the format requires.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

Labels = Mapping[str, str]


class Exposition:
    """Collects metric families and renders them; every name gets ``prefix``."""

    def __init__(self, prefix: str = "tailwise_demo_") -> None:
        self.prefix = prefix
        self._families: dict[str, tuple[str, list[str]]] = {}  # name -> (head, samples)

    def _family(self, name: str, kind: str, help_text: str) -> tuple[str, list[str]]:
        full = self.prefix + name
        if full not in self._families:
            head = f"# HELP {full} {_help(help_text)}\n# TYPE {full} {kind}"
            self._families[full] = (head, [])
        return full, self._families[full][1]

    def sample(
        self, name: str, kind: str, value: float, help_text: str, labels: Labels | None = None
    ) -> None:
        """One gauge or counter sample (a counter's name gets ``_total``)."""
        family = name + "_total" if kind == "counter" else name
        full, lines = self._family(family, kind, help_text)
        lines.append(f"{full}{_labels(labels)} {_num(value)}")

    def gauge(self, name: str, value: float, help_text: str, labels: Labels | None = None) -> None:
        self.sample(name, "gauge", value, help_text, labels)

    def counter(
        self, name: str, value: float, help_text: str, labels: Labels | None = None
    ) -> None:
        self.sample(name, "counter", value, help_text, labels)

    def labelled_counter(
        self, name: str, label: str, values: Mapping[str, int], known: Iterable[str], help_text: str
    ) -> None:
        """A counter per label value; ``known`` values appear even at zero."""
        for key in sorted({*known, *values}):
            self.counter(name, values.get(key, 0), help_text, {label: key})

    def histogram(
        self,
        name: str,
        bounds: Sequence[float],
        counts: Sequence[int],
        total: int,
        sum_value: float,
        help_text: str,
        labels: Labels | None = None,
    ) -> None:
        """``counts[i]`` observations fell in ``(bounds[i-1], bounds[i]]``; the rest above."""
        full, lines = self._family(name, "histogram", help_text)
        base = dict(labels or {})
        cumulative = 0
        for bound, n in zip(bounds, counts, strict=True):
            cumulative += n
            lines.append(f"{full}_bucket{_labels({**base, 'le': _num(bound)})} {cumulative}")
        lines.append(f"{full}_bucket{_labels({**base, 'le': '+Inf'})} {total}")
        lines.append(f"{full}_sum{_labels(base)} {_num(sum_value)}")
        lines.append(f"{full}_count{_labels(base)} {total}")

    def render(self) -> str:
        blocks = [
            head + "".join("\n" + s for s in lines) for head, lines in self._families.values()
        ]
        return "\n".join(blocks) + "\n" if blocks else ""


def _num(value: float) -> str:
    v = float(value)
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "+Inf" if v > 0 else "-Inf"
    # 15 significant digits: no float noise from unit conversions (0.18703974299999998)
    return format(v, ".15g") if not v.is_integer() else str(int(v))


def _help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _labels(labels: Labels | None) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{_escape(str(v))}"' for k, v in labels.items())
    return "{" + inner + "}"


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def parse(text: str) -> dict[str, float]:
    """Sample name (with labels) -> value; comments skipped. For tests and the demo."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out


# -- reading another server's exposition ---------------------------------------

Sample = tuple[str, dict[str, str], float]  # (name, labels, value)

MAX_LINE_CHARS = 16_384  # a longer line is skipped, not parsed (a label bomb)
MAX_LABELS = 32


SLICE_CHARS = 1 << 16  # text split into lines a slice at a time (~0.1 ms a slice)
PACE_LINES = 256  # lines read between two calls of ``pace`` (~0.3 ms of parsing)


def lines_of(text: str, slice_chars: int = SLICE_CHARS) -> Iterator[str]:
    """``text.splitlines()``, a slice at a time: no single call over an 8 MB text holds
    the interpreter lock for tens of milliseconds (a reader thread beside an event loop)."""
    start, n = 0, len(text)
    while start < n:
        end = text.find("\n", min(start + slice_chars, n))
        end = n if end < 0 else end + 1
        yield from text[start:end].splitlines()
        start = end


def parse_samples(
    text: str,
    keep: Callable[[str], bool] | None = None,
    max_samples: int = 100_000,
    prefixes: tuple[str, ...] | None = None,
    pace: Callable[[], None] | None = None,
) -> tuple[list[Sample], int]:
    """The samples of an exposition whose name ``keep`` accepts (and that starts with one of
    ``prefixes``, checked first and cheaply), and the malformed line count.

    Bounded for text from a server we do not control: at most ``max_samples``
    samples are kept, a line over :data:`MAX_LINE_CHARS` or with more than
    :data:`MAX_LABELS` labels is counted as malformed, and nothing raises.
    Optional timestamps are ignored; label values are unescaped. ``pace`` is called every
    :data:`PACE_LINES` lines (a reader thread gives the interpreter lock back there).
    """
    out: list[Sample] = []
    bad = 0
    for k, line in enumerate(lines_of(text)):
        if pace is not None and k % PACE_LINES == PACE_LINES - 1:
            pace()
        if prefixes is not None and not line.startswith(prefixes):
            continue  # most lines of a server's exposition are of no interest: not parsed
        if not line or line[0] == "#" or line.isspace():
            continue
        name_end = _name_end(line)
        if keep is not None and not keep(line[:name_end]):
            continue
        sample = _parse_line(line, name_end) if len(line) <= MAX_LINE_CHARS else None
        if sample is None:
            bad += 1
            continue
        out.append(sample)
        if len(out) >= max_samples:
            break
    return out, bad


def _name_end(line: str) -> int:
    m = _NAME_END.search(line)
    return m.start() if m else len(line)


def _parse_line(line: str, name_end: int) -> Sample | None:
    name = line[:name_end]
    if not name or not _NAME.fullmatch(name):
        return None
    labels: dict[str, str] = {}
    rest = line[name_end:]
    if rest.startswith("{"):
        parsed = _parse_labels(rest)
        if parsed is None:
            return None
        labels, rest = parsed
    fields = rest.split()
    if not 1 <= len(fields) <= 2:
        return None
    try:
        value = float(fields[0])  # accepts NaN, +Inf, -Inf, 1e3
    except ValueError:
        return None
    return name, labels, value


def _parse_labels(text: str) -> tuple[dict[str, str], str] | None:
    """``{a="x",b="y\\"z"} rest`` -> ({a: x, b: y"z}, " rest"); None when malformed."""
    labels: dict[str, str] = {}
    pos = 1
    while True:
        while pos < len(text) and text[pos] in " ,":
            pos += 1
        if pos < len(text) and text[pos] == "}":
            return labels, text[pos + 1 :]
        m = _LABEL.match(text, pos)
        if m is None or len(labels) >= MAX_LABELS:
            return None
        labels[m.group(1)] = _unescape(m.group(2))
        pos = m.end()


def _unescape(value: str) -> str:
    if "\\" not in value:
        return value
    return re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), value)


_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
_NAME_END = re.compile(r"[{ \t]")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"')
