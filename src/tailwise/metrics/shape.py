"""The shape of a summary.json read back from disk, checked before anything renders it.

A saved summary may be truncated, corrupt or edited by hand (``"requests":
null``, a count that is a string of HTML). Reports, comparisons and calibration
index into it freely, so it is checked once at the door: every section they
read is the right kind of JSON value, numbers are finite, counts are whole and
non-negative. A summary that fails gets one line naming the key and the
expected form (:class:`~tailwise.errors.BadInput`), never a traceback.

:func:`read_summary` is the one door: every reader of a saved run (``report``,
``compare``, the sweep and knee pages, ``plan cost``) reads ``summary.json``
through it, at most :data:`SUMMARY_MAX_BYTES`, and gets a
:class:`~tailwise.metrics.schema.Summary`, never the file's dict.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from tailwise.errors import BadInput
from tailwise.files import read_bounded_text
from tailwise.metrics.catalog import CATALOG
from tailwise.metrics.schema import SCHEMA, JsonObject, Summary

COUNTS = ("scheduled", "sent", "ok", "failed", "timed_out", "cancelled", "not_sent")
DISTRIBUTIONS = tuple(m.summary_key for m in CATALOG)
NUMBER_SECTIONS = ("window", "rates", "littles_law", "tokens")
VERDICTS = frozenset({"pass", "fail", "inconclusive", "invalid"})
SUMMARY_MAX_BYTES = 16 * 1024 * 1024


def read_summary(
    file: Path, field: str, *, checked: bool = True, where: str | None = None
) -> Summary:
    """A run's summary.json as a :class:`Summary`: read up to :data:`SUMMARY_MAX_BYTES`,
    parsed (JSON nested past the interpreter's depth refused) and, when ``checked``, its
    shape checked (:func:`check_summary`, naming ``where``: ``"FIELD (summary.json)"``
    unless given); else one-line BadInput naming ``field``. ``checked=False``: a reader
    of one added section only (``plan cost``'s ``gpu``)."""
    text = read_bounded_text(file, field, SUMMARY_MAX_BYTES)
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise BadInput(field, str(file), f"a readable summary.json ({exc})") from None
    if checked:
        check_summary(doc, where or f"{field} (summary.json)")
    try:
        return Summary.from_json(doc)
    except RecursionError:  # a section nested nearly as deep as json reads: copied deeper
        raise BadInput(field, str(file), "a readable summary.json (nested too deep)") from None


def read_summary_or_none(file: Path) -> Summary | None:
    """A step's or a trial's summary.json when it is there and whole, else None (its page
    says its files were not found)."""
    if not file.is_file():
        return None
    try:
        return read_summary(file, str(file))
    except BadInput:
        return None


def check_summary(doc: Any, where: str) -> JsonObject:
    """``doc`` as a summary, or BadInput naming ``where`` and the first key out of shape."""
    if not isinstance(doc, dict):
        raise BadInput(where, type(doc).__name__, "summary.json holding a JSON object")
    schema = doc.get("schema", SCHEMA)
    if schema != SCHEMA:  # another tool's file, or a future format: not read as ours
        raise BadInput(
            where, schema if isinstance(schema, str) else _kind(schema), f'schema "{SCHEMA}"'
        )
    requests = _section(doc, "requests", where, required=True)
    for key in COUNTS:
        _count(requests.get(key), f"{where} requests.{key}")
    errors = requests.get("errors", {})
    if not isinstance(errors, dict):
        raise BadInput(f"{where} requests.errors", _kind(errors), "an object of kind: count")
    for kind, n in errors.items():
        _count(n, f"{where} requests.errors.{kind}")
    for name in NUMBER_SECTIONS:
        for key, value in _section(doc, name, where).items():
            at = f"{where} {name}.{key}"
            if isinstance(value, dict):  # rates.ci: [lo, hi] per rate
                for sub, pair in value.items():
                    _pair_or_number(pair, f"{at}.{sub}")
            elif not (name == "tokens" and isinstance(value, str)):  # tokens_counted_by
                _number(value, at, optional=True)
    for name in DISTRIBUTIONS:
        _distribution(_section(doc, name, where), f"{where} {name}")
    verdict = doc.get("verdict")
    if verdict is not None and (not isinstance(verdict, str) or verdict not in VERDICTS):
        raise BadInput(f"{where} verdict", verdict, "pass, fail, inconclusive or invalid")
    for key in ("verdict_reason", "target", "mode", "source"):
        if doc.get(key) is not None and not isinstance(doc[key], str):
            raise BadInput(f"{where} {key}", _kind(doc[key]), "a string")
    slos = doc.get("slos", [])
    if not isinstance(slos, list) or not all(isinstance(s, dict) for s in slos):
        raise BadInput(f"{where} slos", _kind(slos), "a list of objects")
    return doc


def _section(doc: dict[str, Any], name: str, where: str, *, required: bool = False) -> Any:
    value = doc.get(name)
    if value is None and not required:
        return {}
    if not isinstance(value, dict):
        raise BadInput(f"{where} {name}", _kind(value), "a JSON object")
    return value


def _distribution(dist: dict[str, Any], where: str) -> None:
    for key, value in dist.items():
        if key == "ci":
            if not isinstance(value, dict):
                raise BadInput(f"{where}.ci", _kind(value), "an object of [lo, hi] pairs")
            for q, pair in value.items():
                _pair_or_number(pair, f"{where}.ci.{q}")
        elif key == "count":
            _count(value, f"{where}.count")
        elif not isinstance(value, dict):  # ci_note and other notes are left alone
            _number(value, f"{where}.{key}", optional=True)


def _pair_or_number(value: Any, where: str) -> None:
    if isinstance(value, list):
        if len(value) != 2:
            raise BadInput(where, f"a list of {len(value)}", "[lo, hi] or null")
        for bound in value:
            _number(bound, where, optional=True)
    else:
        _number(value, where, optional=True)


def _count(value: Any, where: str) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise BadInput(where, _kind(value), "a whole number >= 0")


def _number(value: Any, where: str, *, optional: bool) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise BadInput(where, _kind(value), "a finite number or null")


def _kind(value: Any) -> Any:
    """What to quote back: a scalar as it is (sanitised by BadInput), else its type."""
    return (
        value
        if isinstance(value, str | int | float | bool) or value is None
        else type(value).__name__
    )
