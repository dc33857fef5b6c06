"""Prometheus text exposition (format 0.0.4) for the demo targets' server-side truth."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class Exposition:
    """Collects metric families and renders them; names get the ``tailwise_demo_`` prefix."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def _head(self, name: str, kind: str, help_text: str) -> str:
        full = f"tailwise_demo_{name}"
        self.lines.append(f"# HELP {full} {help_text}")
        self.lines.append(f"# TYPE {full} {kind}")
        return full

    def gauge(self, name: str, value: float, help_text: str) -> None:
        full = self._head(name, "gauge", help_text)
        self.lines.append(f"{full} {_num(value)}")

    def counter(self, name: str, value: float, help_text: str) -> None:
        full = self._head(name + "_total", "counter", help_text)
        self.lines.append(f"{full} {_num(value)}")

    def labelled_counter(
        self, name: str, label: str, values: Mapping[str, int], known: Iterable[str], help_text: str
    ) -> None:
        """A counter per label value; ``known`` values appear even at zero."""
        full = self._head(name + "_total", "counter", help_text)
        for key in sorted({*known, *values}):
            self.lines.append(f'{full}{{{label}="{key}"}} {values.get(key, 0)}')

    def histogram(
        self,
        name: str,
        bounds: Sequence[float],
        counts: Sequence[int],
        total: int,
        sum_value: float,
        help_text: str,
    ) -> None:
        """``counts[i]`` observations fell in ``(bounds[i-1], bounds[i]]``; the rest above."""
        full = self._head(name, "histogram", help_text)
        cumulative = 0
        for bound, n in zip(bounds, counts, strict=True):
            cumulative += n
            self.lines.append(f'{full}_bucket{{le="{_num(bound)}"}} {cumulative}')
        self.lines.append(f'{full}_bucket{{le="+Inf"}} {total}')
        self.lines.append(f"{full}_sum {_num(sum_value)}")
        self.lines.append(f"{full}_count {total}")

    def render(self) -> str:
        return "\n".join(self.lines) + "\n"


def _num(value: float) -> str:
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


def parse(text: str) -> dict[str, float]:
    """Sample name (with labels) -> value; comments skipped. For tests and the demo."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            out[name] = float(value)
    return out
