"""Dotted paths into the sweep file (`lora.r`, `training.learning_rate`): which exist,
which sections `search.parameters` may name, the nearest valid path to a typo, a value
set at a path and checked against its section alone, the value of a categorical that a
`conditional` key names, and every distribution a path is searched by."""

from __future__ import annotations

import difflib
import typing
from typing import Any

from pydantic import BaseModel, ValidationError

from trainables.engines import FunctionSpec, TrlSpec
from trainables.sections import ChaosSpec, DpoSpec, LoraSpec, TrainingSpec

if typing.TYPE_CHECKING:
    from sweeper.spec._sections import CategoricalDist


# Config sections whose fields `search.parameters` may name by dotted path.
SEARCHABLE_SECTIONS: dict[str, type[BaseModel]] = {
    "training": TrainingSpec,
    "lora": LoraSpec,
    "dpo": DpoSpec,
    "chaos": ChaosSpec,
    "trl": TrlSpec,
    "function": FunctionSpec,
}


def path_exists(spec: BaseModel, path: str) -> bool:
    return open_field_problem(spec, path) is None and _declared_path_exists(spec, path)


def _declared_path_exists(spec: BaseModel, path: str) -> bool:
    node: Any = spec
    for part in path.split("."):
        if isinstance(node, BaseModel) and part not in type(node).model_fields and _is_open(node):
            return True  # a key of an open section (trl.<field>, function.<key>): open_field_problem checks it
        if not isinstance(node, BaseModel) or part not in type(node).model_fields:
            return False
        node = getattr(node, part)
    return not isinstance(node, BaseModel)


def _is_open(node: BaseModel) -> bool:
    """A section that takes keys beyond its declared fields (trainables/engines.py)."""
    return type(node).model_config.get("extra") == "allow" and hasattr(node, "field_problem")


def open_field_problem(spec: BaseModel, path: str) -> str | None:
    """Why `path` names no key an open section (trl, function) can take, or None (also for
    a path into any other section)."""
    section, _, name = path.partition(".")
    node = getattr(spec, section, None)
    if not isinstance(node, BaseModel) or not _is_open(node) or not name or name in type(node).model_fields:
        return None
    if "." in name:
        return f"{section}.{name}: {section} keys are one level deep"
    return node.field_problem(name)


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


def is_int_field(path: str, spec: BaseModel | None = None) -> bool:
    section, field_name = path.split(".", 1)
    model = SEARCHABLE_SECTIONS[section]
    if field_name in model.model_fields:
        return model.model_fields[field_name].annotation is int
    node = getattr(spec, section, None)
    if isinstance(node, TrlSpec):  # a trl field: its dataclass's type
        from trainables.engines import trl_config_fields

        return trl_config_fields(node.method)[field_name].type is int
    return False


def suggest_path(path: str, spec: BaseModel | None = None) -> str:
    problem = open_field_problem(spec, path) if spec is not None else None
    if problem:
        return problem
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
    if raw.get(section) is None:
        raw[section] = {}
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


# What conditional_value returns for a key that names none of the values.
_NO_VALUE = object()


def conditional_value(dist: CategoricalDist, given: Any) -> Any:
    """The value of `dist` that the `conditional` key `given` names (a key read back from
    JSON is text: "true", "8"), or _NO_VALUE."""
    for value in dist.values:
        if type(given) is type(value) and given == value:
            return value
    text = str(given).lower() if isinstance(given, bool) else str(given)
    for value in dist.values:
        if (str(value).lower() if isinstance(value, bool) else str(value)) == text:
            return value
    return _NO_VALUE


def searched_distributions(parameters: dict[str, Any], path: str) -> list[Any]:
    """Every distribution `path` is searched by in `parameters` (search.parameters): its
    top-level one and those of each categorical's `conditional` branches."""
    found = [parameters[path]] if path in parameters else []
    for dist in parameters.values():
        for branch in (getattr(dist, "conditional", None) or {}).values():
            if path in branch:
                found.append(branch[path])
    return found
