"""Principals (`User:alice`) and how a client certificate's subject becomes one.

`ssl.principal.mapping.rules` follows Kafka's syntax (KIP-371): a comma-separated list of
`RULE:pattern/replacement/[LU]` and `DEFAULT`, tried in order. A rule applies when its Java-style
regular expression matches the whole subject (`CN=alice,OU=eng,O=acme`, most specific part first, as
RFC 2253 and Kafka write it); `$1` in the replacement is the first group; `L`/`U` lower- or
upper-cases the result. `DEFAULT` keeps the subject as it is. No rule applying is an error: the
client is refused rather than given an identity nobody meant.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Final

from tidelog.common.errors import InvalidConfigError

__all__ = ["ANONYMOUS", "Principal", "PrincipalMapper"]


@dataclasses.dataclass(frozen=True, slots=True)
class Principal:
    type: str
    name: str

    def __str__(self) -> str:
        return f"{self.type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> Principal:
        """`User:alice` (Kafka's form); the type is required."""
        kind, separator, name = text.strip().partition(":")
        if not separator or not kind or not name:
            raise ValueError(f"{text!r} is not a principal (expected TYPE:NAME, e.g. User:alice)")
        return cls(kind, name)


ANONYMOUS: Final = Principal("User", "ANONYMOUS")


@dataclasses.dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT
    replacement: str = ""
    case: str = ""

    def apply(self, subject: str) -> str | None:
        if self.pattern is None:
            return subject
        match = self.pattern.fullmatch(subject)
        if match is None:
            return None
        name = match.expand(self.replacement)
        return name.lower() if self.case == "L" else name.upper() if self.case == "U" else name


def _java_replacement(replacement: str) -> str:
    r"""Java's `$1` group references as Python's `\g<1>`; `\$` stays a literal dollar."""
    out = []
    index = 0
    while index < len(replacement):
        char = replacement[index]
        if char == "\\" and index + 1 < len(replacement):
            out.append(re.escape(replacement[index + 1]) if replacement[index + 1] != "\\" else "\\\\")
            index += 2
            continue
        if char == "$":
            digits = re.match(r"\d+", replacement[index + 1 :])
            if digits is None:
                raise InvalidConfigError(f"ssl.principal.mapping.rules: '$' without a group number in {replacement!r}")
            out.append(f"\\g<{digits.group()}>")
            index += 1 + len(digits.group())
            continue
        out.append(char)
        index += 1
    return "".join(out)


def _read_until_slash(text: str, start: int) -> tuple[str, int]:
    """The text up to the next unescaped '/' (escapes of '/' removed), and the index after it."""
    out = []
    index = start
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text) and text[index + 1] == "/":
            out.append("/")
            index += 2
            continue
        if char == "/":
            return "".join(out), index + 1
        out.append(char)
        index += 1
    raise InvalidConfigError(f"ssl.principal.mapping.rules: unterminated rule in {text!r}")


def _parse_rules(text: str) -> tuple[_Rule, ...]:
    rules = []
    index = 0
    while True:
        while index < len(text) and text[index] in " \t\n":
            index += 1
        if index >= len(text):
            break
        if text.startswith("DEFAULT", index):
            rules.append(_Rule(None))
            index += len("DEFAULT")
        elif text.startswith("RULE:", index):
            pattern, index = _read_until_slash(text, index + len("RULE:"))
            replacement, index = _read_until_slash(text, index)
            case = ""
            if index < len(text) and text[index] in "LU":
                case, index = text[index], index + 1
            try:
                compiled = re.compile(pattern)
            except re.error as error:
                raise InvalidConfigError(f"ssl.principal.mapping.rules: bad pattern {pattern!r}: {error}") from error
            rules.append(_Rule(compiled, _java_replacement(replacement), case))
        else:
            raise InvalidConfigError(
                f"ssl.principal.mapping.rules: expected DEFAULT or RULE:pattern/replacement/[LU] at {text[index:]!r}"
            )
        while index < len(text) and text[index] in " \t\n":
            index += 1
        if index < len(text):
            if text[index] != ",":
                raise InvalidConfigError(f"ssl.principal.mapping.rules: expected ',' at {text[index:]!r}")
            index += 1
    if not rules:
        raise InvalidConfigError("ssl.principal.mapping.rules: no rule given (DEFAULT keeps the subject)")
    return tuple(rules)


class PrincipalMapper:
    def __init__(self, rules: str = "DEFAULT") -> None:
        self.rules = _parse_rules(rules)

    def map(self, subject: str) -> Principal | None:
        """The User principal of a certificate subject; None when no rule applies."""
        for rule in self.rules:
            name = rule.apply(subject)
            if name is not None:
                return Principal("User", name) if name else None
        return None
