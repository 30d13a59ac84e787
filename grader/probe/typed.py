"""Frozen dataclasses as JSON objects, written plainly and read back strictly (standard
library only: this module runs inside the student's processes too). It is the format of the
recorder's events (grader.probe.recorder.events) and of the messages between the grader, its rank
launcher and the ranks (grader.probe.messages).

A record is a JSON object: a tag naming its class ("kind": "forward", "op": "job", ...) and
one key per field. `dumps` writes one. `parse_tagged` reads one back from what json.loads
gave: the class its tag names, every field present and of its annotated type (int, float,
bool, str, `X | None`, `tuple[X, ...]`, `dict[str, X]`, a nested dataclass, Value, JsonValue,
Blob),
no other key, and texts and lists within their bounds; anything else raises Malformed with a
one-sentence reason.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
import re
import typing
from typing import Any, Callable, Mapping, NewType

MAX_TEXT = 8192  # characters of any text field
MAX_ITEMS = 1 << 16  # items of a list or a mapping (parameters, inputs, frames, ranks, ...)
MAX_NUMBERS = 1 << 22  # numbers of one tensor's values
MAX_JSON_DEPTH = 8  # nesting of a free-form value (a script's variable, an answer)
MAX_BLOB = 64 << 20  # characters of a Blob (base64 of raw tensor bytes the grader's transport kept)

Value = NewType("Value", float)  # a tensor element: any float, NaN and infinities included
JsonValue = NewType("JsonValue", object)  # a free-form JSON value, bounded in depth and size
Blob = NewType("Blob", str)  # raw bytes as base64 text (standard alphabet, padded), up to MAX_BLOB characters
Check = Callable[[Any, str], Any]  # (value, what it is) -> the typed value, or Malformed


class Malformed(ValueError):
    """A JSON record is not one of the classes it should be; the message says why."""


def clip(text: str, limit: int = MAX_TEXT) -> str:
    """`text` cut to what a text field may hold."""
    return text if len(text) <= limit else text[:limit]


# ------------------------------------------------------------------ writing
@functools.cache
@functools.lru_cache(maxsize=None)
def field_names(cls: type) -> tuple[str, ...]:
    """The names of a dataclass's fields, in order (a class's fields never change: kept)."""
    return tuple(f.name for f in dataclasses.fields(cls))


def _part(value: Any) -> dict:
    """A nested dataclass as JSON's object (json.dumps's `default`)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {name: getattr(value, name) for name in field_names(type(value))}
    raise TypeError(f"{type(value).__name__} cannot be written")


_ENCODER = json.JSONEncoder(separators=(",", ":"), default=_part)  # made once: the recorder writes an event per module call


def dumps(record: Any, tag_key: str, tag: str) -> str:
    """The JSON line (without its newline) of a dataclass instance, tagged `tag_key`: `tag`.
    Non-finite floats are written as NaN and Infinity, which json.loads reads back."""
    fields = {tag_key: tag}
    for name in field_names(type(record)):
        fields[name] = getattr(record, name)
    return _ENCODER.encode(fields)


_SCALARS = frozenset({str, int, float, bool})


def plain(value: Any) -> Any:
    """A dataclass instance, or a value in one, as JSON's values (dicts, lists, scalars)."""
    if value is None or type(value) in _SCALARS:  # most values: the rest of the tests cost more
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {name: plain(getattr(value, name)) for name in field_names(type(value))}
    if isinstance(value, (tuple, list)):
        return [plain(item) for item in value]
    if isinstance(value, dict):
        return {key: plain(item) for key, item in value.items()}
    return value


# ------------------------------------------------------------------ reading
def _shown(value: Any) -> str:
    """A short description of a wrong value for a reason."""
    if isinstance(value, (dict, list)):
        return f"a {'list' if isinstance(value, list) else 'JSON object'}"
    text = json.dumps(value) if isinstance(value, (str, int, float, bool)) or value is None else type(value).__name__
    return text if len(text) <= 40 else text[:37] + "…"


def _check_int(value: Any, what: str) -> int:
    if type(value) is not int:
        raise Malformed(f"{what} is {_shown(value)}, not a whole number")
    return value


def _as_float(value: Any, what: str) -> float:
    """A JSON number as a float; Malformed for anything else, and for a whole number too large
    for a float (JSON allows hundreds of digits, which float() refuses with OverflowError)."""
    if not (type(value) is float or type(value) is int):
        raise Malformed(f"{what} is {_shown(value)}, not a number")
    try:
        return float(value)
    except OverflowError:
        raise Malformed(f"{what} is a whole number too large for a float") from None


def _check_float(value: Any, what: str) -> float:
    number = _as_float(value, what)
    if not math.isfinite(number):
        raise Malformed(f"{what} is {_shown(value)}, not a finite number")
    return number


def _check_value(value: Any, what: str) -> float:
    return _as_float(value, what)


def _check_bool(value: Any, what: str) -> bool:
    if type(value) is not bool:
        raise Malformed(f"{what} is {_shown(value)}, not true or false")
    return value


def _check_text(value: Any, what: str) -> str:
    if type(value) is not str:
        raise Malformed(f"{what} is {_shown(value)}, not a text")
    if len(value) > MAX_TEXT:
        raise Malformed(f"{what} is longer than {MAX_TEXT} characters")
    return value


def _check_blob(value: Any, what: str) -> str:
    if type(value) is not str:
        raise Malformed(f"{what} is {_shown(value)}, not a text")
    if len(value) > MAX_BLOB or len(value) % 4 or not _BASE64.fullmatch(value):
        raise Malformed(f"{what} is not base64 text of at most {MAX_BLOB} characters")
    return value


_BASE64 = re.compile(r"[A-Za-z0-9+/]*={0,2}")


def _optional(inner: Check) -> Check:
    def check(value: Any, what: str) -> Any:
        return None if value is None else inner(value, what)

    return check


def _list(value: Any, what: str, limit: int = MAX_ITEMS) -> list:
    if type(value) is not list:
        raise Malformed(f"{what} is {_shown(value)}, not a list")
    if len(value) > limit:
        raise Malformed(f"{what} has more than {limit} items")
    return value


def _object(value: Any, what: str) -> dict:
    if type(value) is not dict:
        raise Malformed(f"{what} is {_shown(value)}, not an object")
    if len(value) > MAX_ITEMS:
        raise Malformed(f"{what} has more than {MAX_ITEMS} entries")
    return value


def _sequence(inner: Check) -> Check:
    def check(value: Any, what: str) -> tuple:
        return tuple(inner(item, f"an item of {what}") for item in _list(value, what))

    return check


def _numbers(value: Any, what: str) -> tuple[float, ...]:
    """A tensor's values: the fast path of a sequence of Value."""
    if not all(type(item) is float or type(item) is int for item in _list(value, what, MAX_NUMBERS)):
        raise Malformed(f"{what} holds something other than numbers")
    try:
        return tuple(float(item) for item in value)
    except OverflowError:
        raise Malformed(f"{what} holds a whole number too large for a float") from None


def _mapping(inner: Check) -> Check:
    def check(value: Any, what: str) -> dict:
        return {_check_text(key, f"a key of {what}"): inner(item, f"{what}[{key[:40]!r}]") for key, item in _object(value, what).items()}

    return check


def _json_value(value: Any, what: str, depth: int = 0) -> Any:
    """A free-form value: JSON's scalars, lists and objects, bounded in depth and size."""
    if value is None or type(value) in (bool, int, float):
        return value
    if type(value) is str:
        return _check_text(value, what)
    if depth >= MAX_JSON_DEPTH and type(value) in (list, dict):
        raise Malformed(f"{what} is nested deeper than {MAX_JSON_DEPTH} levels")
    if type(value) is list:
        return [_json_value(item, what, depth + 1) for item in _list(value, what)]
    if type(value) is dict:
        return {_check_text(key, f"a key of {what}"): _json_value(item, what, depth + 1) for key, item in _object(value, what).items()}
    raise Malformed(f"{what} is {_shown(value)}, not a JSON value")


def _checker(hint: Any) -> Check:
    """The check of one annotation (the types named in the module docstring, nothing else)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    simple = {int: _check_int, float: _check_float, bool: _check_bool, str: _check_text, Value: _check_value, JsonValue: _json_value, Blob: _check_blob}
    if hint in simple:
        return simple[hint]
    if args and type(None) in args:
        (inner,) = [a for a in args if a is not type(None)]
        return _optional(_checker(inner))
    if origin is tuple and args[1:] == (Ellipsis,):
        return _numbers if args[0] is Value else _sequence(_checker(args[0]))
    if origin is dict and args[0] is str:
        return _mapping(_checker(args[1]))
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return _nested(hint)
    raise TypeError(f"no check for the annotation {hint!r}")


@functools.cache
def _checks(cls: type) -> tuple[tuple[str, Check], ...]:
    """Each field of a dataclass with its check, made once per class."""
    hints = typing.get_type_hints(cls)
    return tuple((f.name, _checker(hints[f.name])) for f in dataclasses.fields(cls))


def prepare(cls: type) -> None:
    """Resolve `cls`'s annotations now, while its module is importable (the rank hides the
    grader's modules before the script runs: grader/probe/cloak.py); a class whose fields have
    no check is left alone."""
    field_names(cls)
    try:
        _checks(cls)
    except (TypeError, NameError):
        pass


def build(cls: type, obj: dict, what: str, tag_key: str | None = None) -> Any:
    """An instance of dataclass `cls` from a JSON object holding exactly its fields (and
    `tag_key`, when given); `what` names the object in the reason of a Malformed."""
    checks = _checks(cls)
    extra = sorted(set(obj) - {name for name, _ in checks} - {tag_key})
    if extra:
        raise Malformed(f"{what} has a field it should not have ({extra[0][:40]!r})")
    values = {}
    for name, check in checks:
        if name not in obj:
            raise Malformed(f"{what} lacks its field {name!r}")
        values[name] = check(obj[name], f"field {name!r} of {what}")
    return cls(**values)


def _nested(cls: type) -> Check:
    def check(value: Any, what: str) -> Any:
        return build(cls, _object(value, what), what)

    return check


def _a(noun: str) -> str:
    return f"an {noun}" if noun[0] in "aeiou" else f"a {noun}"


def parse_tagged(obj: Any, tag_key: str, classes: Mapping[str, type], noun: str) -> Any:
    """The instance a JSON object stands for: the class its tag names in `classes`, built by
    `build`. `noun` names such records in reasons ("event", "request", ...)."""
    if type(obj) is not dict:
        raise Malformed(f"{_a(noun)} is {_shown(obj)}, not a JSON object")
    tag = obj.get(tag_key)
    cls = classes.get(tag) if type(tag) is str else None
    if cls is None:
        raise Malformed(f"unknown {noun} {tag_key} {_shown(tag)}")
    return build(cls, obj, f"a {tag!r} {noun}", tag_key)


def loads(line: str | bytes, noun: str) -> Any:
    """json.loads of one line, ASCII only (what `dumps` writes); Malformed when it is not."""
    if isinstance(line, bytes):
        try:
            line = line.decode("ascii")
        except UnicodeDecodeError:
            raise Malformed(f"{_a(noun)} holds bytes that are not ASCII text") from None
    try:
        return json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
        raise Malformed(f"{_a(noun)} is not valid JSON") from None
