"""Grafana's template variables, resolved against a real Prometheus as Grafana resolves them when a
dashboard loads, for the tests that run dashboards nobody here wrote (Strimzi's).

What Grafana does (public/app/features/variables and the Prometheus data source):
- variables resolve in order, each query interpolated with those before it;
- `label_values(selector, label)`: the label's values on the selector's series;
  `query_result(expr)`: the instant query's results, each as the text
  `name{a="x", b="y"} value timestamp`, the variable's `regex` taking group 1 of each (or the match);
- the selection kept is the dashboard's `current` one when it is among the options, else the
  first option — "All" for an include-All variable, whose options begin with it;
- `$var`, `${var}` and `[[var]]` are replaced; a multi-value or include-All variable's values are
  regex-escaped and joined as `(a|b)`, "All" is its `allValue` when set, else every option;
- `$__rate_interval`, `$__interval` and `$__range` with this run's scrape interval.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from typing import Any

from tidelog.dev.local_prometheus import LocalPrometheus

__all__ = ["Panel", "Resolved", "panels", "resolve"]

_LABEL_VALUES = re.compile(r"^label_values\((?:(.+),\s*)?([a-zA-Z_][a-zA-Z0-9_]*)\)\s*$", re.DOTALL)
_QUERY_RESULT = re.compile(r"^query_result\((.+)\)\s*$", re.DOTALL)
_REGEX_SPECIALS = re.compile(r"([\\^$*+?.()|{}\[\]])")
ALL = "$__all"


@dataclasses.dataclass(frozen=True, slots=True)
class Panel:
    dashboard: str
    title: str
    expressions: tuple[str, ...]


@dataclasses.dataclass(slots=True)
class Resolved:
    """Each variable's text for interpolation."""

    values: dict[str, str]
    options: dict[str, list[str]]

    def interpolate(self, text: str, *, rate_interval: str) -> str:
        builtins = {"__rate_interval": rate_interval, "__interval": rate_interval, "__range": "5m"}
        every = {**builtins, **self.values}
        for name in sorted(every, key=len, reverse=True):  # $kafka_topic before $kafka
            value = every[name]
            text = text.replace(f"${{{name}}}", value).replace(f"[[{name}]]", value).replace(f"${name}", value)
        return text


def _escape(value: str) -> str:
    return _REGEX_SPECIALS.sub(r"\\\1", value)


def _result_text(series: dict[str, Any]) -> str:
    labels = dict(series["metric"])
    name = labels.pop("__name__", "")
    inner = ", ".join(f'{key}="{value}"' for key, value in sorted(labels.items()))
    stamp, value = series["value"]
    return f"{name}{{{inner}}} {value} {int(float(stamp) * 1000)}"


def _options(prometheus: LocalPrometheus, query: str, regex: str) -> list[str]:
    found: list[str] = []
    if match := _LABEL_VALUES.match(query):
        selector, label = match.group(1), match.group(2)
        params = {"match[]": selector} if selector else {}
        found = list(prometheus.api(f"label/{label}/values", **params))
    elif match := _QUERY_RESULT.match(query):
        found = [_result_text(series) for series in prometheus.query(match.group(1))]
    else:
        raise ValueError(f"a variable query this resolver does not know: {query!r}")
    if regex:
        pattern = re.compile(regex[1 : regex.rindex("/")] if regex.startswith("/") else regex)
        picked = []
        for text in found:
            if hit := pattern.search(text):
                picked.append(hit.group(1) if hit.groups() else hit.group(0))
        found = picked
    return sorted(dict.fromkeys(found))


def resolve(prometheus: LocalPrometheus, dashboard: dict[str, Any]) -> Resolved:
    resolved = Resolved({}, {})
    for variable in dashboard.get("templating", {}).get("list", []):
        name, kind = variable["name"], variable.get("type")
        if kind == "datasource":
            resolved.values[name] = "prometheus"
            continue
        if kind != "query":
            raise ValueError(f"variable {name}: type {kind!r} not resolved here")
        query = variable["query"]["query"] if isinstance(variable["query"], dict) else variable["query"]
        query = resolved.interpolate(query, rate_interval="1m")
        regex = resolved.interpolate(variable.get("regex") or "", rate_interval="1m")
        options = _options(prometheus, query, regex)
        resolved.options[name] = options
        current = (variable.get("current") or {}).get("value")
        chosen = current if isinstance(current, list) else [current] if current else []
        # An include-All variable's options begin with "All": with no selection kept, it is chosen.
        if variable.get("includeAll") and (ALL in chosen or not [v for v in chosen if v in options]):
            text = variable.get("allValue") or f"({'|'.join(_escape(option) for option in options)})"
        else:
            kept = [value for value in chosen if value in options] or options[:1]
            if variable.get("multi") or variable.get("includeAll"):
                escaped = [_escape(value) for value in kept]
                text = escaped[0] if len(escaped) == 1 else f"({'|'.join(escaped)})"
            else:
                text = kept[0] if kept else ""
        resolved.values[name] = text
    return resolved


def panels(name: str, dashboard: dict[str, Any]) -> Iterator[Panel]:
    """Every panel that queries (rows opened, hidden targets left out)."""

    def walk(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        for item in items:
            if item.get("type") == "row":
                yield from walk(item.get("panels", []))
            else:
                yield item

    for panel in walk(dashboard.get("panels", [])):
        expressions = tuple(t["expr"] for t in panel.get("targets", []) if t.get("expr") and not t.get("hide"))
        if expressions:
            yield Panel(name, panel.get("title", ""), expressions)
