"""Kafka's request and response messages, decoded and encoded from Kafka's own message
definitions (the JSON files under `messages/`, copied unchanged from Apache Kafka's
clients/src/main/resources/common/message): the formats are defined once, by Kafka.

`codec(name, version)` compiles one message at one version into a reader and a writer of plain
dicts keyed by Kafka's field names (`{"Acks": -1, "TopicData": [...]}`), flexible versions included
(KIP-482: compact strings, arrays and bytes, tagged fields). A field the version does not carry
reads as its default and is not written; a `records` field reads as a memoryview into the frame.
Compiled once per (message, version) and cached: a field costs one closure call.
"""

from __future__ import annotations

import functools
import json
import re
import uuid
from collections.abc import Callable
from importlib import resources
from typing import Any, Final

from tidelog.common.kafka_wire.primitives import (
    FLOAT64,
    INT8,
    INT16,
    INT32,
    INT64,
    UINT16,
    ZERO_UUID,
    MalformedFrameError,
    Reader,
    write_uvarint,
)

__all__ = ["MessageCodec", "codec", "valid_versions"]

Message = dict[str, Any]
ReadField = Callable[[Reader], Any]
WriteField = Callable[[bytearray, Any], None]

_COMMENT: Final = re.compile(r"^\s*//.*$", re.MULTILINE)
_FIXED: Final = {"int8": INT8, "int16": INT16, "uint16": UINT16, "int32": INT32, "int64": INT64, "float64": FLOAT64}


@functools.cache
def _definition(name: str) -> dict[str, Any]:
    text = resources.files("tidelog.common.kafka_wire").joinpath("messages", f"{name}.json").read_text()
    loaded: dict[str, Any] = json.loads(_COMMENT.sub("", text))
    return loaded


def _versions(spec: str | None, version: int) -> bool:
    """Whether `version` is in a Kafka version range: "3+", "0-4", "none"."""
    if spec is None or spec == "none":
        return False
    low, plus, high = spec.partition("+")
    if plus:
        return version >= int(low)
    low, dash, high = spec.partition("-")
    return int(low) <= version <= int(high) if dash else version == int(low)


def valid_versions(name: str) -> tuple[int, int]:
    low, _, high = _definition(name)["validVersions"].partition("-")
    return int(low), int(high or low)


def _default(field: dict[str, Any], kind: str, nullable: bool) -> Any:
    given = field.get("default")
    if kind.startswith("[]"):
        return []
    if kind in _FIXED:
        if given is None or given == "":
            return 0.0 if kind == "float64" else 0
        return float(given) if kind == "float64" else int(str(given), 0)
    if kind == "bool":
        return str(given).lower() == "true"
    if kind in ("string",):
        return None if (given == "null" and nullable) else (given or "")
    if kind in ("bytes", "records"):
        return None if nullable else b""
    if kind == "uuid":
        return ZERO_UUID
    return None  # a struct: filled in by the caller


class _Compiler:
    def __init__(self, definition: dict[str, Any], version: int) -> None:
        self.version = version
        self.flexible = _versions(definition.get("flexibleVersions"), version)
        self.common = {struct["name"]: struct["fields"] for struct in definition.get("commonStructs", ())}

    def struct(self, fields: list[dict[str, Any]]) -> tuple[ReadField, WriteField, Callable[[], Message]]:
        version, flexible = self.version, self.flexible
        plain: list[tuple[str, ReadField, WriteField]] = []
        tagged: dict[int, tuple[str, ReadField, WriteField, Any]] = {}
        defaults: dict[str, Callable[[], Any]] = {}
        for field in fields:
            # (Kafka's generator capitalises names: a few definitions spell one "timeoutMs")
            name, kind = field["name"][:1].upper() + field["name"][1:], field["type"]
            nullable = _versions(field.get("nullableVersions"), version)
            read, write, default = self.field(field, kind, nullable)
            defaults[name] = default
            if not _versions(field["versions"], version):
                continue
            if flexible and _versions(field.get("taggedVersions"), version):
                tagged[int(field["tag"])] = (name, read, write, default())
            else:
                plain.append((name, read, write))
        tags_in_order = sorted(tagged.items())

        def make_default() -> Message:
            return {name: default() for name, default in defaults.items()}

        def read_struct(reader: Reader) -> Message:
            message = make_default()
            for name, read_field, _ in plain:
                message[name] = read_field(reader)
            if flexible:
                for _ in range(reader.uvarint()):
                    tag, size = reader.uvarint(), reader.uvarint()
                    known = tagged.get(tag)
                    if known is None:
                        reader.raw(size)  # an unknown tag is skipped, as Kafka does
                        continue
                    end = reader.position + size
                    message[known[0]] = known[1](reader)
                    if reader.position != end:
                        raise MalformedFrameError(
                            f"tagged field {tag} is {size} bytes but read as {reader.position - end + size}"
                        )
            return message

        def write_struct(out: bytearray, message: Message) -> None:
            for name, _, write_field in plain:
                if name in message:
                    write_field(out, message[name])
                else:
                    write_field(out, defaults[name]())
            if flexible:
                present = [(tag, entry) for tag, entry in tags_in_order if message.get(entry[0], entry[3]) != entry[3]]
                write_uvarint(out, len(present))
                for tag, (name, _, write_field, _) in present:
                    body = bytearray()
                    write_field(body, message[name])
                    write_uvarint(out, tag)
                    write_uvarint(out, len(body))
                    out += body

        return read_struct, write_struct, make_default

    def field(
        self, field: dict[str, Any], kind: str, nullable: bool
    ) -> tuple[ReadField, WriteField, Callable[[], Any]]:
        compact = self.flexible and field.get("flexibleVersions") != "none"
        if kind.startswith("[]"):
            return self._array(field, kind[2:], nullable, compact)
        if kind in _FIXED:
            layout = _FIXED[kind]
            value = _default(field, kind, nullable)
            return (
                (lambda reader: reader.fixed(layout)),
                (lambda out, item: out.extend(layout.pack(item))),
                lambda: value,
            )
        if kind == "bool":
            value = _default(field, kind, nullable)
            return (lambda reader: reader.boolean()), (lambda out, item: out.append(1 if item else 0)), lambda: value
        if kind == "uuid":
            return (lambda reader: reader.uuid_value()), (lambda out, item: out.extend(item.bytes)), lambda: ZERO_UUID
        if kind == "string":
            value = _default(field, kind, nullable)
            return (
                lambda reader: reader.string(compact, nullable),
                functools.partial(_write_string, compact=compact),
                lambda: value,
            )
        if kind in ("bytes", "records"):
            value = _default(field, kind, nullable)
            if kind == "records":
                return (
                    lambda reader: reader.records(compact),
                    functools.partial(_write_bytes, compact=compact),
                    lambda: value,
                )
            return (
                lambda reader: reader.blob(compact, nullable),
                functools.partial(_write_bytes, compact=compact),
                lambda: value,
            )
        # A struct field (not an array): its own fields, or a common struct's.
        sub_fields = field.get("fields") or self.common[kind]
        read, write, make_default = self.struct(sub_fields)
        return read, write, make_default

    def _array(
        self, field: dict[str, Any], element: str, nullable: bool, compact: bool
    ) -> tuple[ReadField, WriteField, Callable[[], Any]]:
        if element in _FIXED or element in ("string", "bool", "uuid", "bytes"):
            read_item, write_item, _ = self.field({"name": field["name"]}, element, nullable=False)
        else:
            read_item, write_item, _ = self.struct(field.get("fields") or self.common[element])

        def read_array(reader: Reader) -> list[Any] | None:
            size = reader.array_length(compact)
            if size < 0:
                if nullable:
                    return None
                raise MalformedFrameError(f"{field['name']} may not be null")
            return [read_item(reader) for _ in range(size)]

        def write_array(out: bytearray, items: list[Any] | None) -> None:
            if items is None:
                if compact:
                    out.append(0)
                else:
                    out.extend(INT32.pack(-1))
                return
            if compact:
                write_uvarint(out, len(items) + 1)
            else:
                out.extend(INT32.pack(len(items)))
            for item in items:
                write_item(out, item)

        return read_array, write_array, list


def _write_length(out: bytearray, length: int, *, compact: bool, wide: bool) -> None:
    """A length prefix; -1 for null (compact: the unsigned varint of length + 1, 0 for null)."""
    if compact:
        write_uvarint(out, length + 1)
    else:
        out.extend((INT32 if wide else INT16).pack(length))


def _write_string(out: bytearray, value: str | None, *, compact: bool) -> None:
    if value is None:
        _write_length(out, -1, compact=compact, wide=False)
        return
    encoded = value.encode()
    _write_length(out, len(encoded), compact=compact, wide=False)
    out += encoded


def _write_bytes(out: bytearray, value: bytes | memoryview | None, *, compact: bool) -> None:
    if value is None:
        _write_length(out, -1, compact=compact, wide=True)
        return
    _write_length(out, len(value), compact=compact, wide=True)
    out += value


class MessageCodec:
    """One message at one version: `read(reader)` → dict, `write(out, dict)`, `default()`."""

    def __init__(self, name: str, version: int) -> None:
        definition = _definition(name)
        low, high = valid_versions(name)
        if not low <= version <= high:
            raise ValueError(f"{name} has versions {low}-{high}, not {version}")
        compiler = _Compiler(definition, version)
        self.name, self.version, self.flexible = name, version, compiler.flexible
        self.read, self.write, self.default = compiler.struct(definition["fields"])

    def decode(self, buffer: bytes | memoryview) -> Message:
        reader = Reader(buffer)
        message: Message = self.read(reader)
        if reader.remaining():
            raise MalformedFrameError(f"{reader.remaining()} bytes left after {self.name} v{self.version}")
        return message

    def encode(self, message: Message) -> bytes:
        out = bytearray()
        self.write(out, message)
        return bytes(out)


@functools.cache
def codec(name: str, version: int) -> MessageCodec:
    return MessageCodec(name, version)


def topic_uuid(topic_id: str) -> uuid.UUID:
    """A Tidelog topic id as Kafka's UUID (the zero UUID when it is not one)."""
    try:
        return uuid.UUID(topic_id)
    except ValueError:
        return ZERO_UUID
