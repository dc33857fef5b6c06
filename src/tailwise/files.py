"""Files in and out: bounded reads, YAML without bombs, writes that are never half done.

* :func:`read_bounded_text` reads a user's file only up to a size limit, so a
  stray multi-gigabyte file is refused instead of read.
* :func:`safe_yaml` is ``yaml.safe_load`` behind a structure check on the event
  stream (no Python objects built yet): the nesting depth and the node count
  *after aliases are expanded* are bounded, which stops "billion laughs" (a
  581-byte file of nested anchors that expands to 10^9 nodes) and a stack of
  5,000 brackets alike.
* :func:`atomic_write_text` writes to a temporary name beside the target and
  renames it over the target (atomic on POSIX), so an interrupted or failed
  write leaves the old file or none, never a truncated one. A failure to write
  (disk full, read-only directory) is :class:`OutputError`: one line naming the
  file and the reason; exit code 9 for a full disk (this machine failed), 2 for a
  place that cannot be written (a bad ``--out``).
* :class:`SpaceReserve` holds disk space for a run's last files while it runs.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO, cast

from tailwise import credentials, limits
from tailwise.errors import (
    NO_SPACE_ERRNOS,
    BadInput,
    ExitCode,
    HostFailure,
    TailwiseError,
    one_line,
)
from tailwise.limits import (
    LIMITS_DOC,
    MAX_SCENARIO_BYTES,
    MAX_YAML_DEPTH,
    MAX_YAML_NODES,
    within,
)


class OutputError(TailwiseError):
    """An output could not be written (disk full, read-only, a missing directory). Its
    exit code says whose fault: 9 (:attr:`ExitCode.HOST`) when the disk is full (no
    space, quota, file-size limit, an I/O error), 2 (bad input) otherwise."""

    def __init__(self, path: Path | str, exc: OSError, note: str = "") -> None:
        self.reason = exc.strerror or type(exc).__name__
        self.os_error = exc
        self.field, self.given = "--out", str(path)
        self.expected = f"a writable place for this file ({self.reason})"
        self.expected += f"; {note}" if note else ""
        super().__init__(one_line(self.field, self.given, self.expected))
        self.path = Path(path)
        self.exit_code = ExitCode.HOST if exc.errno in NO_SPACE_ERRNOS else ExitCode.BAD_INPUT


def read_bounded_bytes(
    path: Path | str, field: str, limit: int | None = None, given: str | None = None
) -> bytes:
    """The bytes of ``path``, refused when there are more than ``limit``: a regular file
    by its size, before anything is read; anything else (a device such as ``/dev/zero``,
    a pipe) by reading at most ``limit + 1`` bytes (:data:`MAX_INPUT_FILE_BYTES` when not
    given). Memory stays within ``limit``."""
    limit = limits.MAX_INPUT_FILE_BYTES if limit is None else limit
    shown = given if given is not None else str(path)
    try:
        with open(path, "rb") as fh:
            info = os.fstat(fh.fileno())
            if stat.S_ISDIR(info.st_mode):
                raise IsADirectoryError(errno.EISDIR, "Is a directory")
            if stat.S_ISREG(info.st_mode) and info.st_size > limit:
                data = b""
                too_large = True
            else:
                data = fh.read(limit + 1)
                too_large = len(data) > limit
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise BadInput(field, shown, f"a readable file ({reason})") from None
    if too_large:
        raise BadInput(
            field,
            f"{shown} (larger)",
            f"a file of at most {limit >> 20} MiB (limits: {LIMITS_DOC})",
        )
    return data


def read_bounded_utf8(
    path: Path | str, field: str, limit: int | None = None, given: str | None = None
) -> str:
    """:func:`read_bounded_bytes` as UTF-8 text (a UTF-8 BOM at its start dropped)."""
    data = read_bounded_bytes(path, field, limit, given)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError:
        shown = given if given is not None else str(path)
        raise BadInput(field, shown, "a readable UTF-8 file (UnicodeDecodeError)") from None


def read_bounded_text(path: Path, field: str, limit: int = MAX_SCENARIO_BYTES) -> str:
    """The UTF-8 text of ``path``, refused when it is larger than ``limit`` bytes."""
    try:
        with path.open("rb") as fh:
            data = fh.read(limit + 1)
        text = data.decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        raise BadInput(field, str(path), f"a readable UTF-8 file ({reason})") from None
    within(field, len(data), limit, "bytes in a scenario file", given=f"{path} (larger)")
    return text


def safe_yaml(text: str, field: str, where: str) -> Any:
    """``yaml.safe_load(text)`` once the document's depth and expanded size are in bounds."""
    import yaml

    depth = 0
    sizes: dict[str, int] = {}  # anchor -> nodes under it, aliases expanded
    open_nodes: list[tuple[str | None, int]] = []  # (anchor, total when it opened)
    total = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent):
            total += sizes.get(event.anchor, 1)
        elif isinstance(event, yaml.ScalarEvent):
            total += 1
            if event.anchor is not None:
                sizes[event.anchor] = 1
        elif isinstance(event, yaml.CollectionStartEvent):
            total += 1
            depth += 1
            if depth > MAX_YAML_DEPTH:
                raise BadInput(field, where, f"YAML nested at most {MAX_YAML_DEPTH} levels deep")
            open_nodes.append((event.anchor, total))
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1
            anchor, began = open_nodes.pop()
            if anchor is not None:
                sizes[anchor] = total - began + 1
        if total > MAX_YAML_NODES:
            raise BadInput(
                field,
                where,
                f"YAML of at most {MAX_YAML_NODES:,} values with aliases expanded "
                "(nested anchors can expand a small file a billion-fold)",
            )
    return yaml.safe_load(text)


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file and a rename."""
    with atomic_writer(path) as fh:
        fh.write(text)


@contextlib.contextmanager
def atomic_writer(path: Path) -> Iterator[TextIO]:
    """A UTF-8 text file that appears at ``path`` whole when the block ends, or not at all.

    An OSError inside the block or while renaming (disk full, read-only) becomes
    :class:`OutputError`; the temporary file is removed, an older ``path`` is left as it was.
    """
    tmp: str | None = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            # Every secret value the process was given is scrubbed from what it writes.
            yield cast(TextIO, _Scrubbing(fh)) if credentials.known() else fh
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise OutputError(path, exc) from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


class _Scrubbing:
    """A file whose ``write`` scrubs the known secret values (:mod:`tailwise.credentials`)."""

    def __init__(self, inner: TextIO) -> None:
        self._inner = inner

    def write(self, text: str) -> int:
        return self._inner.write(credentials.scrub(text))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


RESERVE_BYTES = 1 << 20  # held for a run's last files (summary.json, client.json, latency.hlog)


class SpaceReserve:
    """Disk space held back for the files a run writes last, so a disk that fills up
    during the run (the records, the spill file) still takes ``summary.json``.

    An unlinked temporary file in the run directory, allocated when the run starts
    (``RESERVE_BYTES``, or a quarter of the free space if that is less) and given back
    (closed) before the summary is written; a killed run leaves nothing behind. Where
    the file system cannot allocate it, there is no reserve and nothing else changes.
    """

    def __init__(self, directory: Path, nbytes: int = RESERVE_BYTES) -> None:
        self._file: Any = None
        self.bytes = 0
        held = None
        try:
            size = min(nbytes, shutil.disk_usage(directory).free // 4)
            if size <= 0:
                return
            held = tempfile.TemporaryFile(dir=directory, prefix=".tailwise-reserve-")  # noqa: SIM115
            os.posix_fallocate(held.fileno(), 0, size)
        except (OSError, AttributeError):  # no room, or no fallocate on this platform
            if held is not None:
                held.close()
            return
        self._file, self.bytes = held, size

    def release(self) -> None:
        """Give the space back (idempotent)."""
        if self._file is not None:
            with contextlib.suppress(OSError):
                self._file.close()
            self._file = None


# What tailwise writes into a run, sweep or simulation directory: finding one of these
# means the directory holds an earlier run, which --out overwrites only with --force.
OUTPUT_NAMES = (
    "summary.json",
    "records.jsonl",
    "run.json",
    "sweep.json",
    "knee.json",
    "replications.json",
    "vary.json",
)


def output_directory(path: Path, *, force: bool, field: str = "--out", create: bool = True) -> Path:
    """Create ``path`` (or take it as it is) once it is known to be writable and, unless
    ``force``, free of an earlier run. Checked before anything starts, so a read-only
    or occupied directory costs no traffic and no simulation. With ``create=False``
    nothing is made yet (a command whose later checks may still refuse its input):
    the nearest existing directory on the path must be writable."""
    earlier = [n for n in OUTPUT_NAMES if (path / n).exists()] if path.is_dir() else []
    if earlier and not force:
        raise BadInput(
            field,
            str(path),
            f"a new or empty run directory (it holds {earlier[0]} from an earlier run; "
            "--force overwrites it)",
        )
    if not create:
        existing = next((p for p in (path, *path.parents) if p.exists()), Path("."))
        if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
            why = "not a directory" if not existing.is_dir() else "Permission denied"
            raise BadInput(field, str(path), f"a directory tailwise can write to ({why})")
        return path
    try:
        path.mkdir(parents=True, exist_ok=True)
        # A probe file: a read-only directory or a full disk fails here, not mid-run.
        fd, probe = tempfile.mkstemp(prefix=".tailwise-probe-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        # A full disk is this machine's failure, not a bad --out (exit 9, not 2).
        error = HostFailure if exc.errno in NO_SPACE_ERRNOS else BadInput
        raise error(field, str(path), f"a directory tailwise can write to ({reason})") from None
    return path


def yaml_line(text: str, path: tuple[object, ...]) -> int | None:
    """The 1-based line of the node at ``path`` (mapping keys and list indices) in a YAML
    document, or of the deepest node on the way there; None when the text is not YAML
    (TOML) or the path leaves it at once. For error messages only: the text has passed
    :func:`safe_yaml` already."""
    import yaml

    try:
        node = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return None
    line = None
    for step in path:
        if isinstance(node, yaml.MappingNode):
            found = [(k, v) for k, v in node.value if k.value == str(step)]
            if not found:
                break
            key, node = found[0]
            line = key.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode) and isinstance(step, int):
            if not 0 <= step < len(node.value):
                break
            node = node.value[step]
            line = node.start_mark.line + 1
        else:
            break
    return line
