"""Prometheus text exposition (format 0.0.4), dependency-free.

An instrumentation concern, so it lives here: the in-process trackers
(:mod:`tailwise.instrument.prometheus`, prefix ``tailwise_``) and the demo
targets (:mod:`tailwise.server.apps`, the default prefix ``tailwise_demo_``)
both write through it. Samples of one family are kept together under one
``HELP`` and ``TYPE`` however many sources add to it, as the format requires.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

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
