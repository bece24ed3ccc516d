"""A sweep YAML file -> a validated `SweepSpec`, or `UserError` with one keyed line per
problem (every problem at once, the nearest valid key for a typo, keys given twice);
and a spec back to YAML and to its stable hash."""

from __future__ import annotations

import difflib
import hashlib
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from sweeper.errors import UserError
from sweeper.spec._paths import error_text, section_model
from sweeper.spec._schema import SweepSpec
from sweeper.spec._sections import SearchSpec
from trainables.errors import FieldProblems


def load_spec(path: str | Path) -> SweepSpec:
    """Read and validate a sweep YAML file; raise UserError listing every problem."""
    raw = read_yaml(path)
    return validate_spec(raw, base_dir=Path(path).resolve().parent, source=str(path))


def read_yaml(path: str | Path) -> dict:
    """The mapping in a YAML file; UserError for a file that is missing, unreadable, not
    YAML, not a mapping, too large, or that gives a key twice (YAML itself would keep the last)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: no such file; give the path of a sweep YAML file")
    try:
        size = path.stat().st_size
        if size > MAX_YAML_BYTES:
            raise UserError(
                f"{path}: {size:,} bytes, more than a sweep file's {MAX_YAML_BYTES:,}; give the sweep's YAML file"
            )
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{path}: cannot read: {exc}") from None
    return parse_yaml(text, path)


# A sweep file is a few hundred values a few levels deep (search.parameters.NAME.values);
# these bounds refuse hostile input (nested aliases that expand to a billion values, or
# brackets nested past Python's recursion limit) before anything is built from it.
MAX_YAML_BYTES = 1024**2
MAX_YAML_VALUES = 100_000
MAX_YAML_DEPTH = 64
# YAML's plain integers (as PyYAML resolves them): Python refuses to read one of more than
# sys.get_int_max_str_digits() digits (4,300) with a ValueError, a guard against slow
# conversions of its own.
_YAML_INT = re.compile(r"[-+]?[0-9][0-9_]*")


def parse_yaml(text: str, path: str | Path) -> dict:
    """The mapping that YAML `text` (the file at `path`) holds: the one YAML loader of every
    command that reads a sweep file (start, validate, plan, submit, resume, a warm start's
    earlier sweep, the copy in MLflow). UserError, keyed, for text that is not YAML, nests
    or expands past the bounds above, gives a key twice, or is not a mapping."""
    path = Path(path)
    try:
        _check_shape(text, path.name)
        loader = yaml.SafeLoader(text)
    except yaml.MarkedYAMLError as exc:
        raise UserError(_syntax_error(path, exc)) from None
    try:
        node = loader.get_single_node()
        duplicates = _duplicate_keys(node, path.name)
        if duplicates:
            raise UserError(*duplicates)
        raw = loader.construct_document(node) if node is not None else None
    except yaml.MarkedYAMLError as exc:
        raise UserError(_syntax_error(path, exc)) from None
    finally:
        loader.dispose()
    if not isinstance(raw, dict):
        raise UserError(f"{path}: expected a mapping of keys (name, data, search, ...), got {type(raw).__name__}")
    return raw


def _syntax_error(path: Path, exc: yaml.MarkedYAMLError) -> str:
    mark = exc.problem_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else "unknown position"
    return f"{path}: invalid YAML at {where}: {exc.problem}"


@dataclass
class _Collection:
    """An open mapping or sequence while `_check_shape` walks the events."""

    path: str  # its dotted key path
    anchor: str | None
    mapping: bool
    values: int = 0  # values inside it, aliases expanded
    items: int = 0  # nodes read directly inside it (a mapping's keys and values alternate)
    key: str = "?"  # a mapping's last key


def _check_shape(text: str, file_name: str) -> None:
    """Walk the YAML's events (PyYAML parses them without recursion and builds nothing)
    and refuse a document nested deeper than MAX_YAML_DEPTH, or holding more than
    MAX_YAML_VALUES values once its aliases are expanded, keyed where it happens."""
    anchors: dict[str, int] = {}  # anchor -> the values its node expands to
    stack: list[_Collection] = []
    total = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.CollectionEndEvent):
            done = stack.pop()
            total += 1
            if done.anchor:
                anchors[done.anchor] = done.values + 1
            if stack:
                stack[-1].values += done.values + 1
            continue
        if not isinstance(event, (yaml.ScalarEvent, yaml.AliasEvent, yaml.CollectionStartEvent)):
            continue
        path = _node_path(stack)
        if stack and stack[-1].mapping and stack[-1].items % 2:  # a key: it names the value after it
            stack[-1].key = event.value if isinstance(event, yaml.ScalarEvent) else "?"
        where = path or file_name
        if isinstance(event, yaml.CollectionStartEvent):
            stack.append(_Collection(path, event.anchor, isinstance(event, yaml.MappingStartEvent)))
            if len(stack) > MAX_YAML_DEPTH:
                parts = where.split(".")
                where = ".".join(parts[:3]) + (".(...)" if len(parts) > 3 else "")
                raise UserError(
                    f"{where}: nested more than {MAX_YAML_DEPTH} levels deep; a sweep file nests a few "
                    "(search.parameters.NAME.values)"
                )
            continue
        if isinstance(event, yaml.ScalarEvent) and event.style is None and _too_many_digits(event.value):
            raise UserError(
                f"{where}: a whole number of {len(event.value):,} digits; Python reads at most "
                f"{sys.get_int_max_str_digits():,}: give a number a sweep can use"
            )
        values = anchors.get(event.anchor, 1) if isinstance(event, yaml.AliasEvent) else 1
        if isinstance(event, yaml.ScalarEvent) and event.anchor:
            anchors[event.anchor] = 1
        total += values
        if stack:
            stack[-1].values += values
        if total > MAX_YAML_VALUES:
            via = f" through the alias *{event.anchor}" if isinstance(event, yaml.AliasEvent) else ""
            raise UserError(
                f"{where}: the file expands to more than {MAX_YAML_VALUES:,} values here{via}; a sweep file holds "
                "a few hundred: write the values out instead of nesting aliases (&name, *name)"
            )


def _too_many_digits(plain: str) -> bool:
    limit = sys.get_int_max_str_digits()
    return bool(limit) and len(plain) > limit and _YAML_INT.fullmatch(plain) is not None


def _node_path(stack: list[_Collection]) -> str:
    """The dotted key path of the node about to be read, counting it into its parent."""
    if not stack:
        return ""
    parent = stack[-1]
    parent.items += 1
    if not parent.mapping:
        return f"{parent.path}.{parent.items - 1}".lstrip(".")
    if parent.items % 2:  # a key: it names what follows; the key itself belongs to the mapping
        return parent.path
    return f"{parent.path}.{parent.key}".lstrip(".")


def _duplicate_keys(node: yaml.Node | None, file_name: str, prefix: str = "", seen_nodes: set | None = None) -> list[str]:
    """One keyed line per key given twice in the same mapping, anywhere in the document."""
    seen_nodes = set() if seen_nodes is None else seen_nodes
    if node is None or id(node) in seen_nodes:  # an alias points at a node already walked
        return []
    seen_nodes.add(id(node))
    if isinstance(node, yaml.SequenceNode):
        return [
            line for index, item in enumerate(node.value)
            for line in _duplicate_keys(item, file_name, f"{prefix}{index}.", seen_nodes)
        ]
    if not isinstance(node, yaml.MappingNode):
        return []
    problems, first_line = [], {}
    for key_node, value_node in node.value:
        key = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
        line = key_node.start_mark.line + 1
        if key is not None and key != "<<" and key in first_line:
            problems.append(
                f"{prefix}{key}: given twice in {file_name}, at line {first_line[key]} and line {line}; keep one"
            )
        elif key is not None:
            first_line[key] = line
        problems += _duplicate_keys(value_node, file_name, f"{prefix}{key}.", seen_nodes)
    return problems


def validate_spec(raw: dict, base_dir: Path, source: str = "<yaml>") -> SweepSpec:
    try:
        return SweepSpec.model_validate(raw, context={"base_dir": base_dir})
    except ValidationError as exc:
        raise UserError(*(line for err in exc.errors() for line in _format_error(err, raw))) from None


def revalidate_spec(raw: dict, built: str) -> SweepSpec:
    """A spec the service built or stored (`built` says which: "the calibration run"),
    validated again without touching files. A problem is a keyed line naming the YAML key
    and what was being built, as UserError: the user's spec cannot be turned into that run,
    and that is said, never a traceback."""
    try:
        return SweepSpec.model_validate(raw, context={"check_files": False})
    except ValidationError as exc:
        error = UserError(*(line for err in exc.errors() for line in _format_error(err, raw)))
        raise error.where(f"in {built}") from None


def _format_error(err: dict, raw: dict) -> list[str]:
    """The keyed lines of one pydantic error: one line, or one per problem that a
    cross-field validator raised (FieldProblems keys are relative to the error's location)."""
    raw_loc = list(err["loc"])
    # Discriminated unions add the tag to the location; it is not a YAML key.
    if len(raw_loc) >= 4 and raw_loc[:2] == ["search", "parameters"] and raw_loc[3] in {
        "uniform", "log_uniform", "int_uniform", "categorical"}:
        raw_loc.pop(3)
    loc = [str(part) for part in raw_loc]
    key = ".".join(loc)
    if err["type"] == "extra_forbidden":
        return [f"{key}: unknown key; {_nearest_key(loc)}"]
    if err["type"] == "missing":
        return [f"{key}: required key is missing"]
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, FieldProblems):
        return [f"{'.'.join([*loc, sub_key])}: {message}" for sub_key, message in cause.problems]
    given = _value_at(raw, tuple(raw_loc))
    got = f" (got {given!r})" if given is not _MISSING else ""
    return [f"{key}: {error_text(err)}{got}"]


_MISSING = object()


def _value_at(raw: Any, loc: tuple) -> Any:
    node = raw
    for part in loc:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and part < len(node):
            node = node[part]
        else:
            return _MISSING
    return node


def _nearest_key(loc: list[str]) -> str:
    model: Any = SweepSpec
    for part in loc[:-1]:
        if part in ("parameters",) and model is SearchSpec:
            return "valid keys: distribution, low, high, step, log, values"
        if part.isdigit():  # an item of a list of sections (search.objectives, notify.webhooks)
            continue
        field = model.model_fields.get(part) if isinstance(model, type) else None
        section = section_model(field.annotation) if field else None
        if section:
            model = section
        else:
            return "valid keys: distribution, low, high, step, log, values"
    valid = list(model.model_fields)
    given = loc[-1]
    close = difflib.get_close_matches(given, valid, n=1, cutoff=0.5)
    close = close or [v for v in valid if given.startswith(v) or v.startswith(given)][:1]
    hint = f"did you mean {close[0]!r}? " if close else ""
    return f"{hint}valid keys: {', '.join(valid)}"


def spec_hash(spec: SweepSpec) -> str:
    """Stable hash of the whole config, recorded with the sweep."""
    return hashlib.sha256(spec.model_dump_json().encode()).hexdigest()[:12]


def spec_to_yaml(spec: SweepSpec) -> str:
    return yaml.safe_dump(spec.model_dump(mode="json", exclude_none=True), sort_keys=False)
