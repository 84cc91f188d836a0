"""Whether the protos still speak to what was released: the descriptors of `proto/tidelog/v1`
compared with those of the last release (`proto/released/`), as `buf breaking` does for the
wire and for the generated code. A release's clients and services keep working with the next
one's only if every message, field, enum value, service and method they know is still there,
under the same number, type, name and cardinality.

    python -m tidelog.dev.proto_compatibility            # list breaking changes (exit 1 if any)
    python -m tidelog.dev.proto_compatibility --release  # take the current protos as released

What is allowed: adding messages, fields (new numbers), enum values, services and methods;
removing a field or enum value whose number (and name) is then reserved. tests/layout runs it.
"""

from __future__ import annotations

import sys
import tempfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Final, TypeAlias

from google.protobuf import descriptor_pb2, json_format

__all__ = ["RELEASED", "breaking_changes", "compile_protos", "load_released"]

ROOT: Final = Path(__file__).resolve().parents[3]
PROTO_ROOT: Final = ROOT / "proto"
RELEASED: Final = PROTO_ROOT / "released" / "tidelog-v1.json"  # the FileDescriptorSet of the last release

Field: TypeAlias = descriptor_pb2.FieldDescriptorProto
Messages: TypeAlias = dict[str, descriptor_pb2.DescriptorProto]


def compile_protos(proto_root: Path = PROTO_ROOT, *, source_info: bool = False) -> descriptor_pb2.FileDescriptorSet:
    """The descriptors of every `tidelog/v1/*.proto` under `proto_root`, as protoc builds them
    (with `source_info`, the comments and where each element is)."""
    from grpc_tools import protoc  # noqa: PLC0415 - a build tool (the test extra), not a runtime dependency

    sources = sorted(str(path) for path in proto_root.glob("tidelog/v1/*.proto"))
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "descriptors.binpb"
        options = ["--include_source_info"] if source_info else []
        status = protoc.main(["protoc", f"-I{proto_root}", *options, f"--descriptor_set_out={out}", *sources])
        if status != 0:
            raise RuntimeError(f"protoc failed with status {status}")
        return descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())


def load_released(path: Path = RELEASED) -> descriptor_pb2.FileDescriptorSet:
    return json_format.Parse(path.read_text(), descriptor_pb2.FileDescriptorSet())


def _messages(
    prefix: str, messages: Iterable[descriptor_pb2.DescriptorProto]
) -> Iterator[tuple[str, descriptor_pb2.DescriptorProto]]:
    for message in messages:
        name = f"{prefix}.{message.name}"
        yield name, message
        yield from _messages(name, message.nested_type)


def _all_messages(files: descriptor_pb2.FileDescriptorSet) -> Messages:
    return {name: message for file in files.file for name, message in _messages(file.package, file.message_type)}


def _enums(files: descriptor_pb2.FileDescriptorSet) -> dict[str, descriptor_pb2.EnumDescriptorProto]:
    found = {}
    for file in files.file:
        for enum in file.enum_type:
            found[f"{file.package}.{enum.name}"] = enum
        for name, message in _messages(file.package, file.message_type):
            for enum in message.enum_type:
                found[f"{name}.{enum.name}"] = enum
    return found


def _type_of(field: Field) -> str:
    name: str = field.type_name.lstrip(".") if field.type_name else Field.Type.Name(field.type)
    return name


def _shape(field: Field) -> str:
    if field.label == Field.LABEL_REPEATED:
        return "repeated"
    return "optional" if field.proto3_optional else "singular"


def _reserved(message: descriptor_pb2.DescriptorProto, number: int) -> bool:
    return any(span.start <= number < span.end for span in message.reserved_range)


def breaking_changes(old: descriptor_pb2.FileDescriptorSet, new: descriptor_pb2.FileDescriptorSet) -> list[str]:
    """What in `new` breaks a peer built from `old`; empty when it is compatible."""
    problems: list[str] = []
    old_messages, new_messages = _all_messages(old), _all_messages(new)
    for name, message in old_messages.items():
        now = new_messages.get(name)
        if now is None:
            problems.append(f"message {name} removed")
            continue
        fields = {field.number: field for field in now.field}
        for field in message.field:
            current = fields.get(field.number)
            where = f"{name}.{field.name} (#{field.number})"
            if current is None:
                if not _reserved(now, field.number) or field.name not in now.reserved_name:
                    problems.append(f"field {where} removed without reserving its number and name")
                continue
            if _type_of(current) != _type_of(field):
                problems.append(f"field {where} changed type {_type_of(field)} → {_type_of(current)}")
            if current.name != field.name:
                problems.append(f"field {where} renamed to {current.name} (generated code and JSON break)")
            if _shape(current) != _shape(field):
                problems.append(f"field {where} changed from {_shape(field)} to {_shape(current)}")
            if current.HasField("oneof_index") != field.HasField("oneof_index"):
                problems.append(f"field {where} moved into or out of a oneof")
    old_enums, new_enums = _enums(old), _enums(new)
    for name, enum in old_enums.items():
        now_enum = new_enums.get(name)
        if now_enum is None:
            problems.append(f"enum {name} removed")
            continue
        values = {value.number: value.name for value in now_enum.value}
        reserved = [(span.start, span.end) for span in now_enum.reserved_range]  # inclusive end for enums
        for value in enum.value:
            if value.number not in values:
                if not any(start <= value.number <= end for start, end in reserved):
                    problems.append(f"enum value {name}.{value.name} (= {value.number}) removed without reserving it")
            elif values[value.number] != value.name:
                problems.append(f"enum value {name} = {value.number} renamed {value.name} → {values[value.number]}")
    old_services = {f"{file.package}.{service.name}": service for file in old.file for service in file.service}
    new_services = {f"{file.package}.{service.name}": service for file in new.file for service in file.service}
    for name, service in old_services.items():
        now_service = new_services.get(name)
        if now_service is None:
            problems.append(f"service {name} removed")
            continue
        methods = {method.name: method for method in now_service.method}
        for method in service.method:
            current_method = methods.get(method.name)
            if current_method is None:
                problems.append(f"method {name}.{method.name} removed")
                continue
            for part in ("input_type", "output_type", "client_streaming", "server_streaming"):
                if getattr(current_method, part) != getattr(method, part):
                    problems.append(
                        f"method {name}.{method.name}: {part} {getattr(method, part)} → {getattr(current_method, part)}"
                    )
    return problems


def main(argv: list[str] | None = None) -> int:
    arguments = sys.argv[1:] if argv is None else argv
    current = compile_protos()
    for file in current.file:
        file.ClearField("source_code_info")  # comments are not part of the contract
    if arguments == ["--release"]:
        RELEASED.parent.mkdir(parents=True, exist_ok=True)
        RELEASED.write_text(json_format.MessageToJson(current, indent=1, sort_keys=True) + "\n")
        print(f"wrote {RELEASED}", file=sys.stderr)
        return 0
    problems = breaking_changes(load_released(), current)
    for problem in problems:
        print(problem)
    return 1 if problems else 0


if __name__ == "__main__":
    raise SystemExit(main())
