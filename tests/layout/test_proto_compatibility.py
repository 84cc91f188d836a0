"""The protos against the last release's descriptors (proto/released/), as `buf breaking` checks
them, and the check itself against changes known to break or not."""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
from google.protobuf import descriptor_pb2

from tidelog.dev.proto_compatibility import breaking_changes, compile_protos, load_released

Files = descriptor_pb2.FileDescriptorSet


def _message(files: Files, name: str) -> descriptor_pb2.DescriptorProto:
    return next(message for file in files.file for message in file.message_type if message.name == name)


def test_the_protos_break_nothing_the_last_release_speaks() -> None:
    assert breaking_changes(load_released(), compile_protos()) == []


def _remove_field(files: Files) -> None:
    request = _message(files, "ProduceRequest")
    del request.field[0]


def _remove_field_reserved(files: Files) -> None:
    request = _message(files, "ProduceRequest")
    removed = request.field[0]
    request.reserved_range.add(start=removed.number, end=removed.number + 1)
    request.reserved_name.append(removed.name)
    del request.field[0]


def _retype_field(files: Files) -> None:
    field = _message(files, "ProduceRequest").field[0]
    field.type = descriptor_pb2.FieldDescriptorProto.TYPE_STRING


def _rename_field(files: Files) -> None:
    _message(files, "ProduceRequest").field[0].name = "renamed"


def _make_repeated(files: Files) -> None:
    field = _message(files, "ProduceRequest").field[0]
    field.label = descriptor_pb2.FieldDescriptorProto.LABEL_REPEATED


def _remove_message(files: Files) -> None:
    for file in files.file:
        for index, message in enumerate(file.message_type):
            if message.name == "ProduceRequest":
                del file.message_type[index]
                return


def _remove_method(files: Files) -> None:
    service = next(service for file in files.file for service in file.service if service.name == "Broker")
    del service.method[0]


def _add_field(files: Files) -> None:
    request = _message(files, "ProduceRequest")
    request.field.add(name="added", number=999, type=descriptor_pb2.FieldDescriptorProto.TYPE_INT64)


@pytest.mark.parametrize(
    ("change", "found"),
    [
        (_remove_field, "removed without reserving"),
        (_retype_field, "changed type"),
        (_rename_field, "renamed"),
        (_make_repeated, "to repeated"),
        (_remove_message, "message tidelog.v1.ProduceRequest removed"),
        (_remove_method, "method tidelog.v1.Broker."),
    ],
    ids=lambda value: getattr(value, "__name__", str(value)),
)
def test_a_breaking_change_is_named(change: Callable[[Files], None], found: str) -> None:
    released = load_released()
    changed = copy.deepcopy(released)
    change(changed)
    problems = breaking_changes(released, changed)
    assert any(found in problem for problem in problems), problems


@pytest.mark.parametrize("change", [_add_field, _remove_field_reserved], ids=lambda value: value.__name__)
def test_a_compatible_change_passes(change: Callable[[Files], None]) -> None:
    released = load_released()
    changed = copy.deepcopy(released)
    change(changed)
    assert breaking_changes(released, changed) == []


def test_every_field_says_what_it_holds() -> None:
    """Every field of every message carries a comment (on its line or the line above), and one
    whose name does not give its unit says it: a reader of the wire contract needs no code."""
    undocumented = []
    for file in compile_protos(source_info=True).file:
        located = {tuple(location.path): location for location in file.source_code_info.location}
        for m, message in enumerate(file.message_type):
            undocumented += _undocumented(file.name, message, [4, m], located)
    assert undocumented == []


def _undocumented(
    file: str,
    message: descriptor_pb2.DescriptorProto,
    path: list[int],
    located: dict[tuple[int, ...], descriptor_pb2.SourceCodeInfo.Location],
) -> list[str]:
    missing = []
    for f, field in enumerate(message.field):
        location = located.get((*path, 2, f))
        if location is None or not (location.leading_comments.strip() or location.trailing_comments.strip()):
            missing.append(f"{file}: {message.name}.{field.name}")
    for n, nested in enumerate(message.nested_type):
        if not nested.options.map_entry:  # a map's key and value: the map field says what they are
            missing += _undocumented(file, nested, [*path, 3, n], located)
    return missing
