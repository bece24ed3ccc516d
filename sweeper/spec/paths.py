"""Dotted paths into the sweep file (`lora.r`, `training.learning_rate`): which exist,
which sections `search.parameters` may name, the nearest valid path to a typo, and a
value set at a path and checked against its section alone."""

from __future__ import annotations

import difflib
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from trainables.sections import ChaosSpec, DpoSpec, LoraSpec, TrainingSpec


# Config sections whose fields `search.parameters` may name by dotted path.
SEARCHABLE_SECTIONS: dict[str, type[BaseModel]] = {
    "training": TrainingSpec,
    "lora": LoraSpec,
    "dpo": DpoSpec,
    "chaos": ChaosSpec,
}


def path_exists(spec: BaseModel, path: str) -> bool:
    node: Any = spec
    for part in path.split("."):
        if not isinstance(node, BaseModel) or part not in type(node).model_fields:
            return False
        node = getattr(node, part)
    return not isinstance(node, BaseModel)


def section_model(annotation: Any) -> type[BaseModel] | None:
    """The schema class of a config section, also of an optional one (`DpoSpec | None`)."""
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def all_leaf_paths(model: type[BaseModel], prefix: str = "") -> list[str]:
    paths = []
    for name, field in model.model_fields.items():
        section = section_model(field.annotation)
        if section:
            paths += all_leaf_paths(section, f"{prefix}{name}.")
        else:
            paths.append(f"{prefix}{name}")
    return paths


def is_int_field(path: str) -> bool:
    section, field_name = path.split(".", 1)
    return SEARCHABLE_SECTIONS[section].model_fields[field_name].annotation is int


def suggest_path(path: str) -> str:
    candidates = [path for name, section in SEARCHABLE_SECTIONS.items() for path in all_leaf_paths(section, f"{name}.")]
    close = difflib.get_close_matches(path, candidates, n=1, cutoff=0.5)
    if close:
        return f"did you mean {close[0]!r}?"
    return "searchable: " + ", ".join(candidates)


def override_error(spec: BaseModel, path: str, value: Any) -> str | None:
    """Why `value` is invalid at `path`, or None; validates only the section it lands in."""
    section = path.split(".", 1)[0]
    model = SEARCHABLE_SECTIONS[section]
    raw = spec.model_dump(mode="python")
    set_path(raw, path, value)
    try:
        model.model_validate(raw[section])
    except ValidationError as exc:
        return "; ".join(error_text(e) for e in exc.errors())
    return None


def set_path(raw: dict, path: str, value: Any) -> None:
    *parents, leaf = path.split(".")
    for part in parents:
        raw = raw[part]
    raw[leaf] = value


def error_text(err: dict) -> str:
    """A pydantic error's message without pydantic's "Value error, " prefix."""
    return err["msg"].removeprefix("Value error, ")
