"""The YAML reference, generated from the schema (the docs' YAML reference page is this output)."""

from __future__ import annotations

import types
import typing

from pydantic import BaseModel, SecretStr
from pydantic_core import PydanticUndefined

from sweeper.spec._schema import SweepSpec
from sweeper.spec._paths import section_model


def _type_name(annotation) -> str:
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return " \\| ".join(str(a) for a in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(annotation) if a is not type(None))
    if origin is list:
        return f"list of {_type_name(typing.get_args(annotation)[0])}"
    if origin is dict:
        return "mapping"
    if isinstance(annotation, type) and issubclass(annotation, SecretStr):
        return "str (a secret)"
    return getattr(annotation, "__name__", str(annotation))


def _rows(model: type[BaseModel], prefix: str = "") -> list[tuple[str, str, str, str]]:
    rows = []
    for name, field in model.model_fields.items():
        annotation = field.annotation
        section = section_model(annotation)
        if section:
            rows += _rows(section, f"{prefix}{name}.")
            continue
        if field.default is not PydanticUndefined:
            default = "none" if field.default is None else repr(field.default)
        elif field.default_factory is not None:
            default = repr(field.default_factory())
        else:
            default = "required"
        rows.append((f"{prefix}{name}", _type_name(annotation), default, field.description or ""))
    return rows


def markdown_reference() -> str:
    lines = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for key, type_name, default, description in _rows(SweepSpec):
        meaning = description.replace("|", "\\|")
        lines.append(f"| `{key}` | {type_name} | `{default}` | {meaning} |")
    return "\n".join(lines) + "\n"
