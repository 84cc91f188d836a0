"""Small checkpoint files, written atomically: temp file, fsync, rename, fsync of the folder.

Text format, as Kafka's checkpoint files:

    <version>
    <number of entries>
    <entry fields separated by spaces>   (one line per entry)

A reader never sees a half-written file: the rename is the commit point. A file that does not
parse raises CorruptCheckpointError so the caller can fall back to recovering from the log.
"""

from __future__ import annotations

import ctypes
import functools
import os
from collections.abc import Iterable, Sequence
from pathlib import Path

__all__ = [
    "CorruptCheckpointError",
    "read_checkpoint",
    "read_small_file",
    "sync_file",
    "sync_filesystems",
    "write_atomically",
    "write_checkpoint",
]

VERSION = 0
_SMALL_READ_BYTES = 1 << 16


class CorruptCheckpointError(Exception):
    pass


def fsync_directory(directory: Path) -> None:
    descriptor = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def write_atomically(path: Path, data: bytes, *, sync: bool = True) -> None:
    """Replace `path` with `data` whole. Without `sync`, a crash of the process keeps it (the page
    cache holds it) but a crash of the machine may not: for files the caller syncs later."""
    temporary = path.with_name(path.name + ".tmp")
    with open(temporary, "wb") as file:
        file.write(data)
        if sync:
            file.flush()
            os.fsync(file.fileno())
    os.replace(temporary, path)
    if sync:
        fsync_directory(path.parent)


def sync_filesystems(folders: Iterable[Path]) -> None:
    """Make everything written to the file systems holding `folders` durable, one syncfs(2) each:
    a broker closing 10,000 logs syncs once instead of 10,000 times (os.sync() where the C
    library has no syncfs)."""
    devices: dict[int, Path] = {}
    for folder in folders:
        devices.setdefault(os.stat(folder).st_dev, folder)
    syncfs = getattr(_libc(), "syncfs", None)
    for folder in devices.values():
        if syncfs is None:
            os.sync()
            return
        descriptor = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            if syncfs(descriptor) != 0:
                error = ctypes.get_errno()
                raise OSError(error, f"syncfs {folder}: {os.strerror(error)}")
        finally:
            os.close(descriptor)


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def sync_file(path: Path) -> None:
    """fsync a file written without `sync`, and the folder holding its name."""
    descriptor = os.open(path, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)
    fsync_directory(path.parent)


def write_checkpoint(path: Path, entries: Sequence[Sequence[int]], *, sync: bool = True) -> None:
    lines = [str(VERSION), str(len(entries))]
    lines.extend(" ".join(str(field) for field in entry) for entry in entries)
    write_atomically(path, ("\n".join(lines) + "\n").encode(), sync=sync)


def read_small_file(path: Path | str) -> bytes | None:
    """The bytes of a small file, or None when there is none. Three system calls where
    `Path.read_bytes` makes eight: a broker opening 10,000 logs reads some 40,000 of these."""
    try:
        descriptor = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        parts = [os.read(descriptor, _SMALL_READ_BYTES)]
        while len(parts[-1]) == _SMALL_READ_BYTES:  # a regular file reads short only at its end
            parts.append(os.read(descriptor, _SMALL_READ_BYTES))
    finally:
        os.close(descriptor)
    return parts[0] if len(parts) == 1 else b"".join(parts)


def read_checkpoint(path: Path, fields: int) -> list[tuple[int, ...]] | None:
    """Entries of the checkpoint at `path`, or None when there is none."""
    data = read_small_file(path)
    if data is None:
        return None
    try:
        text = data.decode("ascii")
    except UnicodeDecodeError as error:
        raise CorruptCheckpointError(f"{path}: not a text checkpoint") from error
    lines = text.splitlines()
    try:
        if len(lines) < 2 or int(lines[0]) != VERSION:
            raise ValueError("bad version line")
        count = int(lines[1])
        if count != len(lines) - 2:
            raise ValueError(f"says {count} entries, holds {len(lines) - 2}")
        entries = [tuple(int(field) for field in line.split()) for line in lines[2:]]
        if any(len(entry) != fields for entry in entries):
            raise ValueError(f"an entry does not have {fields} fields")
    except ValueError as error:
        raise CorruptCheckpointError(f"{path}: {error}") from error
    return entries
