"""Pydantic validation errors rewritten as findings a person can act on.

Pydantic's messages ("Extra inputs are not permitted") say what is wrong in Python terms and
never how to fix it. Each error type we expect from the models in ``gpupool.spec.models`` gets
a message in YAML terms and a hint; unknown error types keep pydantic's message with a generic
hint, so a new model constraint degrades to a plainer message rather than a crash.

To name the allowed keys of an unknown key, or the allowed values of an enum, we walk the model
annotations along the error's loc (:func:`annotation_at`) instead of parsing pydantic's text.
"""

from __future__ import annotations

import types
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

from gpupool.spec.models import NAME_PATTERN, ClusterConfig
from gpupool.spec.problems import Finding, Loc, did_you_mean, format_path, quoted_list

# Pydantic marks a failing dict key by appending this to the loc.
KEY_MARKER = "[key]"

NAME_RULE = "use 1-63 lowercase letters, digits and '-', starting and ending with a letter or digit"

# Examples for required keys, so the hint shows the shape and not just the name.
_EXAMPLES = {
    "gpu_types": "gpu_types: {h100: {price_per_gpu_hour: 4.0}}",
    "name": "name: my-pool",
    "backend": "backend: local",
    "gpu_type": "gpu_type: h100",
    "node": "node: {gpus: 4, cpus: 16, memory_gb: 64}",
    "gpus": "gpus: 4",
    "value": "value: 100",
    "uid": "uid: 10001",
    "gid": "gid: 20001",
}

_RANGE = {
    "greater_than": ("gt", ">"),
    "greater_than_equal": ("ge", ">="),
    "less_than": ("lt", "<"),
    "less_than_equal": ("le", "<="),
}

_EXPECTED = {
    "int_type": ("a whole number", "write a whole number without quotes, e.g. 2"),
    "int_parsing": ("a whole number", "write a whole number without quotes, e.g. 2"),
    "int_from_float": ("a whole number", "write a whole number without a fraction, e.g. 2"),
    "float_type": ("a number", "write a number without quotes, e.g. 0.5"),
    "float_parsing": ("a number", "write a number without quotes, e.g. 0.5"),
    "bool_type": ("true or false", "write true or false without quotes"),
    "bool_parsing": ("true or false", "write true or false without quotes"),
    "string_type": ("text", "quote the value, e.g. '123'"),
    "dict_type": ("a mapping", "write key: value pairs, indented below the key or as {k: v}"),
    "model_type": ("a mapping", "write key: value pairs, indented below the key or as {k: v}"),
    "model_attributes_type": ("a mapping", "write key: value pairs, as in examples/demo.yaml"),
    "list_type": ("a list", "write a list, e.g. [a, b], or one '- item' per line"),
}


def validation_findings(error: ValidationError) -> list[Finding]:
    """One finding per pydantic error, in pydantic's order."""
    return [_finding(e) for e in error.errors(include_url=False)]


def annotation_at(loc: Loc, root: Any = ClusterConfig) -> Any:
    """The type expected at ``loc`` (``None`` if the loc leaves the models).

    Dict keys and list indices consume one loc part each; ``Optional`` is unwrapped.
    """
    ann = root
    for part in loc:
        ann = _unwrap_optional(ann)
        if part == KEY_MARKER:
            args = get_args(ann)
            return args[0] if args else None
        if isinstance(ann, type) and issubclass(ann, BaseModel):
            field = ann.model_fields.get(str(part))
            if field is None:
                return None
            ann = field.annotation
        elif get_origin(ann) is dict:
            ann = get_args(ann)[1]
        elif get_origin(ann) is list:
            ann = get_args(ann)[0]
        else:
            return None
    return _unwrap_optional(ann)


def _finding(err: Any) -> Finding:
    kind: str = err["type"]
    loc: Loc = tuple(err["loc"])
    value = err.get("input")
    ctx = err.get("ctx") or {}
    is_key = bool(loc) and loc[-1] == KEY_MARKER
    where = loc[:-1] if is_key else loc

    if kind == "extra_forbidden":
        return _unknown_key(where)
    if kind == "missing":
        return _missing(where)
    if kind == "literal_error":
        choices = [str(c) for c in get_args(annotation_at(where))]
        return Finding(
            where,
            f"{value!r} is not allowed here",
            f"{did_you_mean(str(value), choices)}use one of: {quoted_list(choices)}",
        )
    if kind == "string_pattern_mismatch":
        rule = NAME_RULE if ctx.get("pattern") == NAME_PATTERN else f"match {ctx.get('pattern')}"
        return Finding(where, f"{value!r} is not a valid name", rule)
    if kind in _RANGE:
        bound_key, op = _RANGE[kind]
        bound = _number(ctx.get(bound_key))
        return Finding(where, f"{value!r} is out of range", f"use a value {op} {bound}")
    if kind in _EXPECTED:
        expected, hint = _EXPECTED[kind]
        if is_key:
            # Only text keys are expected (names); YAML made this one a number or boolean.
            return Finding(
                where,
                f"key should be text, not {_describe(value)}",
                f"quote the key, e.g. '{value}'",
            )
        return Finding(where, f"value should be {expected}, not {_describe(value)}", hint)
    return Finding(where, str(err["msg"]), "see examples/demo.yaml for the expected form")


def _unknown_key(loc: Loc) -> Finding:
    key = str(loc[-1])
    model = annotation_at(loc[:-1])
    is_model = isinstance(model, type) and issubclass(model, BaseModel)
    allowed = list(model.model_fields) if is_model else []
    parent = format_path(loc[:-1]) or "the top level"
    return Finding(
        loc,
        f"unknown key {key!r}",
        f"{did_you_mean(key, allowed)}keys allowed in {parent}: {quoted_list(allowed)}",
    )


def _missing(loc: Loc) -> Finding:
    key = str(loc[-1])
    parent = format_path(loc[:-1])
    place = f"under {parent}" if parent else "at the top level"
    example = _EXAMPLES.get(key, f"{key}: ...")
    return Finding(loc, f"missing required key {key!r}", f"add {example!r} {place}")


def _unwrap_optional(ann: Any) -> Any:
    if get_origin(ann) in (Union, types.UnionType):
        args = [a for a in get_args(ann) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return ann


def _describe(value: Any) -> str:
    """A value in YAML words: what the user wrote, as YAML understood it."""
    if value is None:
        return "empty (null)"
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if isinstance(value, int | float):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the text {value!r}"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    return type(value).__name__


def _number(value: Any) -> str:
    """``0.0`` -> ``0``: bounds are written as the user would write them."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)
