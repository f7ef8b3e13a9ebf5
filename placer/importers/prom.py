"""Prometheus data -> series: the HTTP API's JSON and the text exposition format.

Two forms reach a user's hands. ``curl 'http://prom:9090/api/v1/query?query=...'`` (or ``promtool query
instant -o json``) gives the API's JSON: ``{"status": "success", "data": {"resultType": "vector" | "matrix",
"result": [...]}}``; several responses may sit in one file as a JSON list or as JSON Lines. ``curl
engine:8000/metrics`` gives the text exposition format of one exporter: no Prometheus needed, but no
``pod``/``node`` labels either (the importer's ``NODE=FILE`` form names the node). Both become the same
``Series``: a metric name, its labels, and (timestamp, value) points. The text form has one point per series
(timestamp 0 when the line gives none).

Nothing here knows what a metric means; ``placer.importers.telemetry`` does.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

from placer.importers.common import Note, error, got, short

MAX_SERIES = 1_000_000  # a 64 MiB file cannot hold more; the bound keeps a hostile file's cost linear
MAX_POINTS = 5_000_000


@dataclass(frozen=True)
class Series:
    """One time series: ``name`` (the ``__name__`` label), the other labels sorted, and its points."""

    name: str
    labels: tuple[tuple[str, str], ...]
    points: tuple[tuple[float, float], ...]  # (unix seconds, value), finite values only

    def label(self, key: str) -> str | None:
        return dict(self.labels).get(key)


@dataclass(frozen=True)
class MetricsFile:
    source: str
    form: str  # "Prometheus API JSON" | "text exposition"
    series: tuple[Series, ...]
    notes: tuple[Note, ...] = ()


def parse_metrics(text: str, source: str) -> MetricsFile:
    """Parse either form; anything else is refused with what was expected."""
    head = text.lstrip()
    if not head:
        raise error(source, None, "empty file: expected Prometheus API JSON or the text exposition format")
    if head[0] in "{[":
        return _parse_api(text, source)
    return _parse_exposition(text, source)


# ---------------------------------------------------------------- API JSON


def _json_documents(text: str, source: str) -> list[Any]:
    """One JSON document, or JSON Lines (one response a line, as a loop over ``curl`` writes them)."""
    try:
        return [json.loads(text)]
    except json.JSONDecodeError as exc:
        if exc.msg != "Extra data":
            raise error(source, exc.lineno, f"not valid JSON: {exc.msg} (column {exc.colno})") from None
    except RecursionError:
        raise error(source, None, "not usable JSON: nested too deeply") from None
    except ValueError as exc:
        raise error(source, None, f"not usable JSON: {exc}") from None
    docs = []
    for n, line in enumerate(text.splitlines(), 1):
        if line.strip():
            try:
                docs.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise error(source, n, f"not valid JSON Lines: {exc.msg} (column {exc.colno})") from None
            except (RecursionError, ValueError) as exc:
                raise error(source, n, f"not usable JSON: {type(exc).__name__}") from None
    return docs


def _parse_api(text: str, source: str) -> MetricsFile:
    docs = _json_documents(text, source)
    if len(docs) == 1 and isinstance(docs[0], list):
        docs = docs[0]
    series: list[Series] = []
    notes: list[Note] = []
    dropped = points = 0
    for i, doc in enumerate(docs):
        where = f"response {i + 1}" if len(docs) > 1 else "the response"
        got, bad = _response_series(doc, source, where)
        series += got
        dropped += bad
        points += sum(len(s.points) for s in got)
        if len(series) > MAX_SERIES or points > MAX_POINTS:
            raise error(source, None, f"more than {MAX_SERIES} series or {MAX_POINTS} points")
    if dropped:
        notes.append(Note(source, None, f"{dropped} sample(s) were NaN or infinite (no data); left out"))
    return MetricsFile(source, "Prometheus API JSON", tuple(series), tuple(notes))


_EXPECTED = 'expected a Prometheus API response {"status": "success", "data": {"resultType": ..., "result": [...]}}'


def _response_series(doc: Any, source: str, where: str) -> tuple[list[Series], int]:
    """The series of one API response; a ``status: error`` response is reported with Prometheus's words."""
    if not isinstance(doc, dict) or "status" not in doc:
        raise error(source, None, f"{where}: {_EXPECTED}")
    if doc["status"] == "error":
        kind = doc.get("errorType", "error")
        message = short(str(doc.get("error", "(no message)")), 200)
        raise error(source, None, f"{where}: Prometheus answered with an error ({short(str(kind), 40)}): {message}")
    if doc["status"] != "success" or not isinstance(doc.get("data"), dict):
        raise error(source, None, f"{where}: {_EXPECTED}")
    data = doc["data"]
    result = data.get("result")
    if not isinstance(result, list):
        raise error(source, None, f"{where}: data.result must be a list of series")
    kind = data.get("resultType")
    if kind is None:  # seen in hand-written examples; the items say which it is
        kind = "matrix" if any(isinstance(r, dict) and "values" in r for r in result) else "vector"
    if kind not in ("vector", "matrix"):
        raise error(
            source,
            None,
            f"{where}: resultType {short(str(kind), 20)}: expected a vector or a matrix "
            "(query a metric, not a scalar or string expression)",
        )
    out: list[Series] = []
    dropped = 0
    for j, item in enumerate(result):
        at = f"{where}: data.result[{j}]"
        if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
            raise error(source, None, f"{at}: expected an object with a metric (labels) object")
        labels = _labels(item["metric"], source, at)
        raw: Any
        if kind == "vector":
            raw = [item.get("value")]
            if raw[0] is None:
                raise error(source, None, f'{at}: a vector item needs "value": [timestamp, "number"]')
        else:
            raw = item.get("values")
            if not isinstance(raw, list):
                raise error(source, None, f'{at}: a matrix item needs "values": [[timestamp, "number"], ...]')
        points = []
        for k, pair in enumerate(raw):
            ts, value = _point(pair, source, f"{at}.{'value' if kind == 'vector' else f'values[{k}]'}")
            if math.isfinite(value):
                points.append((ts, value))
            else:
                dropped += 1
        name = labels.pop("__name__", "")
        if points:  # a series with only "no data" samples says nothing
            out.append(Series(name, tuple(sorted(labels.items())), tuple(sorted(points))))
    return out, dropped


def _labels(metric: dict[Any, Any], source: str, at: str) -> dict[str, str]:
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in metric.items()):
        raise error(source, None, f"{at}.metric: label names and values must be strings")
    return dict(metric)


def _point(pair: Any, source: str, at: str) -> tuple[float, float]:
    """``[1749077215.034, "0"]``: Prometheus sends the value as a string ("NaN", "+Inf" included)."""
    if not isinstance(pair, list) or len(pair) != 2:
        raise error(source, None, f'{at}: expected [timestamp, "value"]')
    ts, value = pair
    stamp = _finite(ts)
    if isinstance(ts, bool) or stamp is None:
        raise error(source, None, f"{at}: the timestamp must be a number (unix seconds)")
    number = _number(value) if isinstance(value, str) else None
    if number is None:
        raise error(source, None, f'{at}: the value must be a number in a string, e.g. "0.5", {got(value, 30)}')
    return stamp, number


def _finite(value: Any) -> float | None:
    """A JSON number as a finite float; None for anything else (a 400-digit integer included)."""
    if not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _number(text: str) -> float | None:
    try:
        return float(text.strip())
    except ValueError:
        return None


# ---------------------------------------------------------------- text exposition format

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_SAMPLE = re.compile(rf"^({_NAME})\s*(?:\{{(.*)\}})?\s+(\S+)(?:\s+(-?\d+))?\s*$")
_LABEL = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*(,|$)')
_ESCAPES = {"\\\\": "\\", '\\"': '"', "\\n": "\n"}


def _parse_exposition(text: str, source: str) -> MetricsFile:
    """``name{label="v",...} value [timestamp_ms]`` lines; ``#`` lines are comments (HELP/TYPE included)."""
    series: list[Series] = []
    dropped = 0
    for n, line in enumerate(text.split("\n"), 1):  # only \n ends a line: a label value may hold \r
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        m = _SAMPLE.match(stripped)
        value = _number(m.group(3)) if m else None
        if m is None or value is None:
            raise error(
                source,
                n,
                f"expected a sample line 'name{{labels}} value' (Prometheus text format) or "
                f"Prometheus API JSON, got {short(stripped, 50)}",
            )
        name, body, _, stamp = m.groups()
        labels = _exposition_labels(body or "", source, n)
        if not math.isfinite(value):
            dropped += 1
            continue
        ts = _millis(stamp, source, n) if stamp else 0.0
        series.append(Series(name, tuple(sorted(labels.items())), ((ts, value),)))
        if len(series) > MAX_SERIES:
            raise error(source, n, f"more than {MAX_SERIES} series")
    if not series:
        raise error(source, None, "no samples: expected Prometheus API JSON or the text exposition format")
    notes = (Note(source, None, f"{dropped} sample(s) were NaN or infinite; left out"),) if dropped else ()
    return MetricsFile(source, "text exposition", tuple(series), notes)


def _millis(stamp: str, source: str, line: int) -> float:
    """The optional timestamp of a text-format sample: milliseconds since the epoch."""
    if len(stamp) > 20:
        raise error(source, line, f"timestamp {short(stamp, 30)} is not a time in milliseconds")
    return int(stamp) / 1000


def _exposition_labels(body: str, source: str, line: int) -> dict[str, str]:
    labels: dict[str, str] = {}
    pos = 0
    body = body.strip()
    while pos < len(body):
        m = _LABEL.match(body, pos)
        if m is None:
            raise error(source, line, f'malformed labels near {short(body[pos:], 40)}: expected key="value"')
        value = re.sub(r"\\[\\\"n]", lambda e: _ESCAPES[e.group(0)], m.group(2))
        labels[m.group(1)] = value
        pos = m.end()
    return labels
