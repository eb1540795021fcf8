"""Walk a recording against futextrace/recording.py's TypedDicts (written for
the tests: it reads only the classes' __annotations__, not the code that builds
or reads recordings). Each problem is one line naming the key path."""
from __future__ import annotations

import types
import typing

from typing import get_args, get_origin, get_type_hints, is_typeddict

ANY = typing.Any


def _leaf_ok(value, tp) -> bool:
    if tp is ANY:
        return True
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is type(None):
        return value is None
    return isinstance(value, tp)


def problems(value, tp, path: str = "") -> list[str]:
    """Key paths of `value` that `tp` does not declare, and values of another type."""
    origin = get_origin(tp)
    if is_typeddict(tp):
        if not isinstance(value, dict):
            return [f"{path or '.'}: {type(value).__name__}, declared {tp.__name__}"]
        hints = get_type_hints(tp)
        out = [f"{path}.{k}: not declared in {tp.__name__}" for k in value if k not in hints]
        out += [f"{path}.{k}: required by {tp.__name__}, absent" for k in tp.__required_keys__ if k not in value]
        for k, v in value.items():
            if k in hints:
                out += problems(v, hints[k], f"{path}.{k}")
        return out
    if origin in (typing.Union, types.UnionType):
        tries = [problems(value, arg, path) for arg in get_args(tp)]
        return [] if any(not t for t in tries) else min(tries, key=len)
    if origin is list:
        if not isinstance(value, list):
            return [f"{path}: {type(value).__name__}, declared a list"]
        (item,) = get_args(tp)
        return [p for i, v in enumerate(value) for p in problems(v, item, f"{path}[{i}]")]
    if origin is dict:
        if not isinstance(value, dict):
            return [f"{path}: {type(value).__name__}, declared a dict"]
        _, item = get_args(tp)
        return [p for k, v in value.items() for p in problems(v, item, f"{path}.{k}")]
    return [] if _leaf_ok(value, tp) else [f"{path}: {value!r} is not {getattr(tp, '__name__', tp)}"]
