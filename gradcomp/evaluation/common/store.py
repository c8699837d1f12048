"""Tidy measurement tables on disk that never lose a measured row.

`ResultTable(path, key_columns)` appends each row as soon as it is measured. CSV (the
default): one line per row, appended, flushed and fsynced; the header is written once, and a
row with new columns rewrites the file atomically with the union of the columns. Parquet
(suffix ``.parquet``, needs pyarrow or fastparquet): every append rewrites the file
atomically (temporary file, fsync, os.replace). `done_keys()` lets an interrupted sweep skip
what it finished. A crash in the middle of an append leaves at most a torn last line; a line
damaged anywhere else (a wrong number of fields, NUL bytes: a disk or a hand edit) is
dropped by reading, with a warning naming the file and the line. Nothing is thrown away: the
next append moves every damaged line, torn last line included, to a side file
``<name>.quarantine`` next to the table (appended to, never overwritten; named in the
warning) and then rewrites the table atomically without them, so that every reader (pandas
too) sees clean rows and the sweep measures the lost keys again.

Values are stored as text the way `str` writes them (None and NaN as an empty cell, read back
as NaN); keys are compared in that form, so 1024 and "1024" are the same key. A key column
added to a table's kind later has a default (`defaults`): rows stored without it (a table
written before, or an empty cell) read as holding the default, so old tables keep their keys.

Several processes may append to one table (two sweeps with the same `--out`): every append
holds an exclusive lock (`fcntl.flock`) on the side file ``.<name>.lock`` next to the table,
so a rewrite (a new column, a quarantine) never drops another writer's row, and a row whose
key another writer stored meanwhile is not stored twice (`append` warns and returns False).
An append reads the stored keys again only when the file is not as this table's own last
append left it (device, inode, size, modification time), so an append does not grow with
the rows stored before it.
A failed write (a full disk) cuts the file back to its rows before the append and raises an
OSError naming the table.
"""
from __future__ import annotations

import csv
import fcntl
import io
import math
import os
import tempfile
import warnings
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pandas as pd

from ...checks import check_file


def write_atomic(path, data: str | bytes) -> Path:
    """Write `data` to `path` through a temporary file in the same folder and os.replace, so
    readers see the old file or the new one, never a part."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    raw = data.encode() if isinstance(data, str) else bytes(data)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with named(path), os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    _fsync_dir(path.parent)
    return path


@contextmanager
def named(path):
    """Inside, an OSError that names no file (ENOSPC from a write, say) is raised again
    naming `path`."""
    try:
        yield
    except OSError as exc:
        if exc.filename is not None:
            raise
        raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def text(value) -> str:
    """A cell as stored: None and NaN are empty, everything else is `str(value)`."""
    if value is None or (pd.api.types.is_scalar(value) and not isinstance(value, str)
                         and pd.isna(value)):
        return ""
    return str(value)


def _fields(line: str, header: list[str]) -> list[str] | None:
    """The fields of a stored line; None when it is damaged (not one field per header
    column, NUL bytes, bad quoting)."""
    if "\x00" in line:
        return None
    try:
        fields = next(csv.reader([line]), [])
    except csv.Error:
        return None
    return fields if len(fields) == len(header) else None


def _line(fields) -> str:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerow(fields)
    return buf.getvalue()


class ResultTable:
    """Rows on disk at `path` (.csv, or .parquet), identified by `key_columns`; `defaults`:
    {column: value} that rows stored without the column read as (module docstring)."""

    def __init__(self, path, key_columns=(), defaults=None):
        self.path = Path(path)
        self.key_columns = tuple(key_columns)
        self.defaults = dict(defaults or {})
        self.parquet = self.path.suffix.lower() == ".parquet"
        self._scanned = False  # the whole file was checked for damaged lines by an append
        self._known: tuple | None = None  # (the file's `_mark` after this table's last append,
        #                                    the keys on disk then)

    @property
    def lock(self) -> Path:
        """The side file whose lock every append holds."""
        return self.path.with_name(f".{self.path.name}.lock")

    @property
    def quarantine(self) -> Path:
        """The side file that damaged lines are moved to."""
        return self.path.with_name(self.path.name + ".quarantine")

    def __repr__(self) -> str:
        return f"ResultTable({str(self.path)!r}, {self.key_columns!r}, {self.defaults!r})"

    # -- writing --------------------------------------------------------------------------
    def append(self, row: dict) -> bool:
        """Add one measured row and make it durable before returning True; False (with a
        warning) when a row of the same key is on disk already (another writer's)."""
        for k, v in row.items():
            if "\n" in text(v) or "\r" in text(v):
                raise ValueError(f"{self.path}: column {k!r} holds a line break; a stored "
                                 f"value must be one line")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._locked():
            if self.key_columns and self.key(row) in self._stored_keys():
                warnings.warn(f"{self.path}: a row with key {self.key(row)} is stored already "
                              "(another run writing to this table measured it); kept that "
                              "one", stacklevel=2)
                return False
            if self.parquet:
                frame = pd.concat([self.frame(), pd.DataFrame([row])], ignore_index=True)
                buf = io.BytesIO()
                frame.to_parquet(buf, index=False)
                write_atomic(self.path, buf.getvalue())
                return True
            header = self._repair()
            new = [c for c in row if c not in header]
            if header and new:
                header = self._widen(header, new)
            prefix = "" if header else _line(list(row))
            header = header or list(row)
            keys = self._stored_keys() if self.key_columns else set()
            self._known = None  # (until the line is on disk)
            self._write_line(prefix + _line([text(row.get(c)) for c in header]))
            if self.key_columns:
                keys.add(self.key(row))
                self._known = self._mark(), keys
        return True

    def _mark(self) -> tuple | None:
        """What tells whether the file changed: its device, inode, size and modification time
        (None when it does not exist)."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return None
        return st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns

    def _stored_keys(self) -> set[tuple[str, ...]]:
        """`done_keys()`, read again only when the file is not as this table's last append left
        it (another writer, a rewrite, an edit): so a long sweep's appends do not each read
        every row before theirs. Called with the lock held."""
        if self._known is None or self._known[0] != self._mark():
            self._known = self._mark(), self.done_keys()
        return self._known[1]

    @contextmanager
    def _locked(self):
        """Hold the exclusive lock of this table (blocking until other writers let go)."""
        with named(self.lock), open(self.lock, "a") as f:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(f.fileno(), fcntl.LOCK_UN)

    def _write_line(self, line: str) -> None:
        """Append `line` durably; when that fails (a full disk), cut the file back to what it
        held before, so that no torn line stays behind."""
        data = line.encode()
        with named(self.path):
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                size = os.fstat(fd).st_size
                try:
                    while data:
                        data = data[os.write(fd, data):]
                    os.fsync(fd)
                except OSError:
                    os.ftruncate(fd, size)
                    raise
            finally:
                os.close(fd)

    def _repair(self) -> list[str]:
        """Move damaged lines to the quarantine (the whole file on this table's first append,
        later only a torn last line); return the header ([] for an empty file)."""
        if not self.path.exists() or self.path.stat().st_size == 0:
            return []
        with open(self.path, "rb") as f:
            f.seek(-1, os.SEEK_END)
            torn = f.read(1) != b"\n"
        if torn or not self._scanned:
            self._quarantine()
        self._scanned = True
        with open(self.path, "rb") as f:
            first = f.readline().decode()
        return next(csv.reader([first])) if first.strip() else []

    def _quarantine(self) -> None:
        """Append the damaged lines to `quarantine` (durably), then rewrite the table
        atomically without them; a crash between the two leaves a line in both, never in
        neither."""
        with open(self.path, newline="") as f:
            lines = f.read().split("\n")
        torn = lines.pop()
        header = next(csv.reader([lines[0]])) if lines else []
        keep, damaged = lines[:1], []
        for number, line in enumerate(lines[1:], start=2):
            if _fields(line, header):
                keep.append(line)
            elif line:  # an empty line holds no measurement: dropped
                damaged.append((number, line))
        if torn:
            damaged.append((len(lines) + 1, torn))
        if not damaged and len(keep) == len(lines):
            return
        if damaged:
            with open(self.quarantine, "a", newline="") as f:
                f.write("".join(line + "\n" for _, line in damaged))
                f.flush()
                os.fsync(f.fileno())
            numbers = ", ".join(str(n) for n, _ in damaged)
            warnings.warn(f"{self.path}: moved {len(damaged)} damaged line(s) (line "
                          f"{numbers}; a torn or corrupted write) to {self.quarantine}; "
                          "their measurements are taken again", stacklevel=4)
        write_atomic(self.path, "".join(line + "\n" for line in keep))

    def _widen(self, header: list[str], new: list[str]) -> list[str]:
        header = header + new
        rows = [r + [""] * len(new) for r in self._records()[1]]
        write_atomic(self.path, "".join(_line(r) for r in [header, *rows]))
        return header

    # -- reading --------------------------------------------------------------------------
    def _records(self) -> tuple[list[str], list[list[str]]]:
        """Header and the complete rows, as stored text; torn or malformed lines are dropped
        with a warning naming the file."""
        if not self.path.exists():
            return [], []
        with open(self.path, newline="") as f:
            lines = f.read().split("\n")
        torn = lines.pop()  # "" when the file ends with a complete line
        if torn:
            warnings.warn(f"{self.path}: dropped a torn last line (an interrupted write): "
                          f"{torn[:80]!r}", stacklevel=3)
        if not lines:
            return [], []
        header, rows = next(csv.reader([lines[0]])), []
        for number, line in enumerate(lines[1:], start=2):
            fields = _fields(line, header)
            if fields:
                rows.append(fields)
            elif line:
                warnings.warn(f"{self.path}:{number}: dropped a malformed line (not "
                              f"{len(header)} fields like the header; the next append moves "
                              f"it to {self.quarantine})", stacklevel=3)
        return header, rows

    def frame(self, keys=None) -> pd.DataFrame:
        """The table (types inferred, empty cells NaN); only the rows whose key is in `keys`
        when given."""
        if self.parquet:
            frame = pd.read_parquet(self.path) if self.path.exists() else pd.DataFrame()
            for column, value in self.defaults.items() if len(frame.columns) else ():
                frame[column] = frame[column].fillna(value) if column in frame else value
            if keys is not None:
                frame = frame[[self.key(r) in keys for r in frame.to_dict("records")]]
            return frame.reset_index(drop=True)
        header, rows = self._filled(*self._records())
        if not header:
            return pd.DataFrame()
        if keys is not None:
            index = self._key_index(header)
            rows = [r for r in rows if tuple(r[i] for i in index) in keys]
        return pd.read_csv(io.StringIO("".join(_line(r) for r in [header, *rows])),
                           keep_default_na=False, na_values=[""])

    def key(self, row: dict) -> tuple[str, ...]:
        """`row`'s key as stored (a column of `defaults` it lacks or leaves empty: the
        default)."""
        missing = [c for c in self.key_columns if c not in row and c not in self.defaults]
        if missing:
            raise KeyError(f"{self.path}: the row lacks key column(s) {', '.join(missing)}")
        return tuple(text(row.get(c)) or text(self.defaults.get(c)) for c in self.key_columns)

    def _filled(self, header: list[str], rows: list[list[str]]
                ) -> tuple[list[str], list[list[str]]]:
        """`header` and `rows` (`_records`') with every column of `defaults` present, its empty
        cells the default."""
        for column, value in self.defaults.items() if header else ():
            if column not in header:
                header, rows = [*header, column], [[*r, ""] for r in rows]
            i = header.index(column)
            rows = [[*r[:i], r[i] or text(value), *r[i + 1:]] for r in rows]
        return header, rows

    def _key_index(self, header: list[str]) -> list[int]:
        missing = [c for c in self.key_columns if c not in header]
        if missing:
            raise ValueError(f"{self.path} has no column(s) {', '.join(missing)}: it was "
                             f"written with other key columns than {self.key_columns}")
        return [header.index(c) for c in self.key_columns]

    def done_keys(self) -> set[tuple[str, ...]]:
        """The keys of the rows already on disk."""
        if self.parquet:
            return {self.key(r) for r in self.frame().to_dict("records")}
        header, rows = self._filled(*self._records())
        if not header:
            return set()
        index = self._key_index(header)
        return {tuple(r[i] for i in index) for r in rows}


def as_table(out, key_columns, defaults=None) -> ResultTable | None:
    """`out` as a ResultTable with `key_columns` (and `defaults`, `ResultTable`'s): a path, a
    ResultTable or None (None)."""
    if out is None:
        return None
    if isinstance(out, ResultTable):
        if out.key_columns != tuple(key_columns):
            raise ValueError(f"out={out!r} has key columns {out.key_columns}; this benchmark "
                             f"needs {tuple(key_columns)}")
        return out
    return ResultTable(out, key_columns, defaults)


def read_table(path, option: str, what: str) -> pd.DataFrame:
    """A measurement table the user names (`option`, e.g. "costs": `what`, e.g. "a `gradcomp
    bench compress` CSV"), read like `ResultTable.frame` (torn and damaged lines dropped with
    a warning); a missing, empty or row-less file is a ValueError naming the option and it."""
    path = check_file(path, option, what)
    try:
        frame = ResultTable(path).frame()
    except (ValueError, UnicodeDecodeError, OSError) as e:
        raise ValueError(f"{option}={str(path)!r} is not allowed: it cannot be read as a table "
                         f"({e}); give {what}") from None
    if frame.empty:
        raise ValueError(f"{option}={str(path)!r} is not allowed: the file holds no rows; "
                         f"give {what}")
    frame.attrs["source"] = f"{option}={str(path)!r}"  # for the messages of its readers
    return frame


def strict_json(value):
    """`value` as JSON can hold it: a NaN or infinite number as None (null), numpy scalars as
    Python's, tuples as lists."""
    if isinstance(value, dict):
        return {key: strict_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(item) for item in value]
    if isinstance(value, (np.bool_, bool)):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    return value
