"""MkDocs hooks (mkdocs.yml `hooks:`): the pages generated from the code when the site is
built, so that none of them is a committed copy that can drift.

A page asks for a generated part with a marker line, `<!-- generated: NAME -->`:

- `yaml-reference`: the YAML reference, `sweeper.spec._reference.markdown_reference()`
  (what `sweep reference` prints);
- `cli-reference`: every `sweep` command, read from the Typer app's click commands;
- `exit-status`: every command's exit status and its meaning, `sweeper.cli.EXIT_CODES`;
- `json-output`: the JSON documents of `--json` and `--summary-json`, from their models
  (`sweeper.output.markdown_schema()`);
- `keyed-errors`: every keyed message the code can refuse with, read from its syntax tree;
- `stage-packages`: each `sweeper/` stage package's docstring, from its `__init__.py`;
- `python-api`: the signatures and docstrings of `sweeper.api`'s public functions;
- `benchmarks`: `benchmarks/README.md` itself, the one copy of the benchmark figures
  (its plots in `benchmarks/figures/` join the site under `figures/`, see `on_files`);
- `quickstart-example`: `examples/quickstart.py` itself, as a code block.

The functions are plain (text in, text out) so that tests can call them without MkDocs.
"""

from __future__ import annotations

import ast
import inspect
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MARKER = re.compile(r"^<!-- generated: ([a-z-]+) -->$", re.M)

# The stage packages in the order a sweep flows through them (docs/concepts/flow.md);
# a package added later is listed after them.
STAGE_ORDER = ["spec", "cost", "plan", "cluster", "search", "budget", "run", "track", "promote", "cli"]


# ---------------------------------------------------------------- the generated parts


def yaml_reference() -> str:
    from sweeper.spec import markdown_reference

    return markdown_reference()


def cli_reference() -> str:
    """One section per `sweep` command: usage, help text, arguments and options, read from
    the commands Typer builds (its own click: names, defaults and help of each parameter)."""
    import typer

    from sweeper.cli import app

    group = typer.main.get_command(app)
    context = _context(group, "sweep", None)
    parts = ["## `sweep`", "", "Options of every command, given before it (`sweep --debug start FILE`):", "",
             _param_table(group.params)]
    for name in group.list_commands(context):
        command = group.get_command(context, name)
        arguments = [p for p in command.params if getattr(p, "param_type_name", "") == "argument"]
        usage = " ".join(["sweep", name, "[OPTIONS]", *(_argument_name(p) for p in arguments)])
        help_text = " ".join(inspect.cleandoc(command.help or "").split())
        table = _param_table(command.params) if any(p.name != "help" for p in command.params) else ""
        parts += [f"## `sweep {name}`", "", "```", usage, "```", "", help_text, "", table]
    return "\n".join(parts)


def exit_status() -> str:
    from sweeper.cli import EXIT_CODES

    rows = ["| exit status | meaning |", "|---|---|"]
    rows += [f"| {status} | {meaning} |" for status, meaning in EXIT_CODES.items()]
    return "\n".join(rows) + "\n"


def json_output() -> str:
    from sweeper.output import markdown_schema

    return markdown_schema()


def _context(command, name: str, parent):
    context_class = getattr(command, "context_class", None)
    return context_class(command, info_name=name, parent=parent)


def _argument_name(param) -> str:
    name = (getattr(param, "metavar", None) or param.name).upper()
    return f"{name} ..." if getattr(param, "nargs", 1) == -1 else name


def _param_table(params) -> str:
    rows = ["| argument or option | default | meaning |", "|---|---|---|"]
    for param in params:
        if param.name == "help":
            continue
        if getattr(param, "param_type_name", "") == "argument":
            name, default = _argument_name(param), "required" if param.required else "-"
        else:
            name = ", ".join(param.opts) + "".join(f" / {opt}" for opt in param.secondary_opts)
            if isinstance(param.default, bool) and param.secondary_opts:
                default = f"`{param.opts[0] if param.default else param.secondary_opts[0]}`"
            elif isinstance(param.default, bool):
                default = "on" if param.default else "off"
            elif param.required:
                default = "required"
            else:
                default = "-" if param.default is None else f"`{param.default}`"
        rows.append(f"| `{name}` | {default} | {_cell(param.help or '')} |")
    return "\n".join(rows) + "\n"


def stage_packages() -> str:
    """Each stage package of sweeper/ with its own docstring (read, not imported)."""
    folders = sorted(p.parent.name for p in (ROOT / "sweeper").glob("*/__init__.py"))
    ordered = [name for name in STAGE_ORDER if name in folders] + [n for n in folders if n not in STAGE_ORDER]
    parts = []
    for name in ordered:
        init = ROOT / "sweeper" / name / "__init__.py"
        tree = ast.parse(init.read_text())
        docstring = ast.get_docstring(tree) or "(no docstring)"
        interface = next((ast.literal_eval(node.value) for node in tree.body if isinstance(node, ast.Assign)
                          and any(getattr(target, "id", None) == "__all__" for target in node.targets)), [])
        modules = sorted(p.stem for p in init.parent.glob("*.py") if p.stem not in ("__init__", "__main__"))
        parts += [
            f"### `sweeper/{name}/`",
            "",
            docstring,
            "",
            f"Interface (`__all__`): {', '.join(f'`{n}`' for n in interface)}." if interface else "",
            "",
            f"Modules: {', '.join(f'`{m}`' for m in modules)}." if modules else "",
            "",
        ]
    return "\n".join(parts)


def python_api() -> str:
    """The public functions of `sweeper` (its `__all__`, served by `sweeper.api`)."""
    import sweeper
    from sweeper import api

    parts = []
    for name in sweeper.__all__:
        function = getattr(api, name)
        signature = str(inspect.signature(function)).replace("'", "")
        parts += [
            f"### `sweeper.{name}`",
            "",
            "```python",
            f"sweeper.{name}{signature}",
            "```",
            "",
            _docstring_markdown(function.__doc__ or ""),
            "",
        ]
    return "\n".join(parts)


def _docstring_markdown(docstring: str) -> str:
    """A Google-style docstring as Markdown: paragraphs joined, `Args:`/`Raises:` sections
    as bullet lists (`name`: text)."""
    out, paragraph, section = [], [], None
    for line in inspect.cleandoc(docstring).splitlines() + [""]:
        stripped = line.strip()
        if re.fullmatch(r"(Args|Arguments|Returns|Raises|Yields|Example|Examples):", stripped):
            out.append(" ".join(paragraph)) if paragraph else None
            paragraph, section = [], stripped[:-1]
            out += ["", f"**{section}**", ""]
        elif not stripped:
            out.append(" ".join(paragraph)) if paragraph else None
            paragraph = []
            out.append("")
        elif section and line == stripped:  # back at the margin: the section ended
            out.append(" ".join(paragraph)) if paragraph else None
            paragraph, section = [stripped], None
            out.append("")
        elif section and re.match(r"^ {4}\w[\w ]*: ", line):  # a new item of the section
            out.append(" ".join(paragraph)) if paragraph else None
            name, text = stripped.split(":", 1)
            paragraph = [f"- `{name}`:{text}"]
        else:
            paragraph.append(stripped)
    text = re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip()
    # Outside code spans, <placeholders> would be read as HTML tags.
    return "".join(
        part if index % 2 else part.replace("<", "&lt;").replace(">", "&gt;")
        for index, part in enumerate(re.split(r"(`[^`]*`)", text))
    )


def benchmarks() -> str:
    return (ROOT / "benchmarks" / "README.md").read_text()


def quickstart_example() -> str:
    return "```python\n" + (ROOT / "examples" / "quickstart.py").read_text() + "```"


# ---------------------------------------------------------------- keyed errors


@dataclass(frozen=True)
class KeyedMessage:
    """One message a user can be refused with: its key (YAML key, argument or
    placeholder), the message after the key, and where the code raises it."""

    key: str
    text: str
    module: str  # sweeper/run/_launch.py
    line: int  # the line of the raise (or of the rule's tuple)


# What a call that passes on another error's messages (`UserError(*exc.lines)`) holds.
FORWARDED = "(forwarded)"
# Calls whose string arguments are messages for the user.
ERROR_CALLS = {"UserError", "InputError"}
# A message starts with its key: a YAML key (data.train, resources.custom.<name>), an
# argument (--address, NAME, FILE) or a placeholder filled in at run time (<key>, <where>).
KEYED = re.compile(r"^((?:<[^<>]+>|[A-Za-z_][\w]*|--[\w-]+)(?:\.?(?:<[^<>]+>|[\w]+))*): (.+)$", re.S)


def error_catalogue(root: Path = ROOT) -> list[KeyedMessage]:
    """Every keyed message of the service (`sweeper/`), the trials' input readers
    (`trainables/`) and the reports (`reports/`), read from the syntax tree:

    - the string arguments of `UserError(...)` and `InputError(...)`, also through a
      variable or a list the call is given (`UserError(*problems)`) and through a helper
      of the same module that returns the message (`UserError(_auth_problem(address))`);
    - the (key, message) pairs of the schema's cross-field rules (`FieldProblems`), keyed
      by their section of the YAML (`low` of a distribution: `search.parameters.<name>.low`).

    A value filled in when the error is raised shows as `<name>`."""
    sections = _section_prefixes()
    messages: list[KeyedMessage] = []
    for file in sorted([*root.glob("sweeper/**/*.py"), *root.glob("trainables/**/*.py"), *root.glob("reports/**/*.py")]):
        module = file.relative_to(root).as_posix()
        tree = ast.parse(file.read_text())
        functions = {node.name: node for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))}
        for scope, node in _calls_in_scopes(tree):
            if _call_name(node) in ERROR_CALLS:
                for text in _call_messages(node, scope, functions):
                    messages.append(_keyed(text, module, node.lineno))
        for class_name, node in _problem_tuples(tree):
            key = _render(node.elts[0]) or f"<{_placeholder(node.elts[0])}>"
            text = _render(node.elts[1])
            class_name, _, field = class_name.partition(":")
            prefix = sections.get(class_name, "") + (f"{field}." if field else "")
            messages.append(KeyedMessage(prefix + key, text, module, node.lineno))
    return sorted(messages, key=lambda m: (_key_rank(m.key), m.key.lower(), m.module, m.line))


def error_call_sites(root: Path = ROOT) -> set[tuple[str, int]]:
    """(module, line) of every `UserError(`/`InputError(` call: what the catalogue must cover."""
    sites = set()
    for file in [*root.glob("sweeper/**/*.py"), *root.glob("trainables/**/*.py"), *root.glob("reports/**/*.py")]:
        for node in ast.walk(ast.parse(file.read_text())):
            if isinstance(node, ast.Call) and _call_name(node) in ERROR_CALLS:
                sites.add((file.relative_to(root).as_posix(), node.lineno))
    return sites


def keyed_errors_markdown(root: Path = ROOT) -> str:
    rows = ["| key or argument | message | raised in |", "|---|---|---|"]
    shown = set()
    for message in error_catalogue(root):
        if message.text == FORWARDED or (message.key, message.text, message.module) in shown:
            continue
        if re.fullmatch(r"(<[^<>]*>)+", message.text):  # a message made elsewhere, passed through
            continue
        shown.add((message.key, message.text, message.module))
        rows.append(f"| {_cell(message.key)} | {_cell(message.text)} | `{message.module}` |")
    return "\n".join(rows) + "\n"


def _keyed(text: str, module: str, line: int) -> KeyedMessage:
    match = KEYED.match(text)
    if text == FORWARDED:
        return KeyedMessage(FORWARDED, text, module, line)
    if match:
        return KeyedMessage(match.group(1), match.group(2), module, line)
    return KeyedMessage("(whole message)", text, module, line)


def _key_rank(key: str) -> int:
    """YAML keys first, then arguments, then keys known only at run time."""
    if key.startswith("<") or key.startswith("("):
        return 2
    if key.startswith("--") or key.isupper():
        return 1
    return 0


def _section_prefixes() -> dict[str, str]:
    """Schema class name -> its dotted place in the YAML ('TrainingSpec' -> 'training.')."""
    from sweeper.spec import section_model, SweepSpec

    prefixes = {"UniformDist": "search.parameters.<name>.", "LogUniformDist": "search.parameters.<name>.",
                "IntUniformDist": "search.parameters.<name>.", "CategoricalDist": "search.parameters.<name>."}

    def walk(model, prefix: str) -> None:
        prefixes.setdefault(model.__name__, prefix)
        for name, field in model.model_fields.items():
            section = section_model(field.annotation)
            if section:
                walk(section, f"{prefix}{name}.")

    walk(SweepSpec, "")
    return prefixes


def _call_name(node: ast.Call) -> str | None:
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _calls_in_scopes(tree: ast.Module):
    """(innermost function, call) for every call of the module."""
    def visit(node, scope):
        for child in ast.iter_child_nodes(node):
            inner = child if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else scope
            if isinstance(child, ast.Call):
                yield scope, child
            yield from visit(child, inner)

    yield from visit(tree, None)


def _call_messages(call: ast.Call, scope, functions: dict) -> list[str]:
    texts = []
    for arg in call.args:
        texts += _messages_of(arg.value if isinstance(arg, ast.Starred) else arg, scope, functions, depth=0)
    return texts


def _messages_of(node, scope, functions: dict, depth: int) -> list[str]:
    """The message texts an expression can hold: a string, a comprehension of strings, a
    variable assigned or appended strings in the same function, a local helper's returns."""
    if depth > 3:
        return []
    text = _render(node)
    if text is not None:
        return [text]
    if isinstance(node, (ast.GeneratorExp, ast.ListComp)):
        for generator in node.generators:  # `line for ... in helper(...)`: the helper's messages
            if isinstance(node.elt, ast.Name) and isinstance(generator.target, ast.Name) and generator.target.id == node.elt.id:
                return _messages_of(generator.iter, scope, functions, depth + 1)
        return _messages_of(node.elt, scope, functions, depth + 1)
    if isinstance(node, ast.Attribute) and node.attr == "lines":  # another error's lines, passed on
        return [FORWARDED]
    if isinstance(node, (ast.List, ast.Tuple)):
        return [t for elt in node.elts for t in _messages_of(elt, scope, functions, depth + 1)]
    if isinstance(node, ast.IfExp):
        return _messages_of(node.body, scope, functions, depth + 1) + _messages_of(node.orelse, scope, functions, depth + 1)
    if isinstance(node, ast.Name) and scope is not None:
        return [t for value in _values_given(node.id, scope) for t in _messages_of(value, scope, functions, depth + 1)]
    if isinstance(node, ast.Call) and _call_name(node) in functions:
        helper = functions[_call_name(node)]
        return [
            t for ret in ast.walk(helper) if isinstance(ret, ast.Return) and ret.value is not None
            for t in _messages_of(ret.value, helper, functions, depth + 1)
        ]
    return []


def _values_given(name: str, scope) -> list:
    """What a function assigns to `name`, appends to it or adds to it."""
    values = []
    for node in ast.walk(scope):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            values.append(node.value)
        elif isinstance(node, ast.NamedExpr) and node.target.id == name:
            values.append(node.value)
        elif isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name) and node.target.id == name:
            values.append(node.value)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "append"
              and isinstance(node.func.value, ast.Name) and node.func.value.id == name and node.args):
            values.append(node.args[0])
    return values


def _problem_tuples(tree: ast.Module):
    """(class name or '', tuple) of every (key, message) pair a validator builds for
    FieldProblems: appended to a `problems` list, listed in one, returned by a
    `*_problems` function, or given to `FieldProblems(...)`."""
    def pairs(node):
        if isinstance(node, ast.IfExp):
            return pairs(node.body) + pairs(node.orelse)
        candidates = node.elts if isinstance(node, (ast.List, ast.Tuple)) and not _is_pair(node) else [node]
        if isinstance(node, ast.ListComp):
            candidates = [node.elt]
        return [c for c in candidates if _is_pair(c)]

    def visit(node, class_name, function_name):
        for child in ast.iter_child_nodes(node):
            inner_class = child.name if isinstance(child, ast.ClassDef) else class_name
            inner_function = function_name
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                inner_function = child.name
                field = _validated_field(child)
                if field:  # a field validator's keys are relative to its field
                    inner_class = f"{class_name}:{field}"
            found = []
            if isinstance(child, ast.Call) and child.args:
                target = child.func.value if isinstance(child.func, ast.Attribute) else None
                if child.func and _call_name(child) == "append" and isinstance(target, ast.Name) and "problem" in target.id:
                    found = pairs(child.args[0])
                elif _call_name(child) == "FieldProblems":
                    found = pairs(child.args[0])
            elif isinstance(child, ast.Assign) and any(isinstance(t, ast.Name) and "problem" in t.id for t in child.targets):
                found = pairs(child.value)
            elif isinstance(child, ast.Return) and child.value is not None and "problem" in (function_name or ""):
                found = pairs(child.value)
            for pair in found:
                yield class_name, pair
            yield from visit(child, inner_class, inner_function)

    seen = set()
    for class_name, pair in visit(tree, "", None):
        if id(pair) not in seen:
            seen.add(id(pair))
            yield class_name, pair


def _validated_field(function) -> str | None:
    """The field a pydantic `@field_validator("name")` method checks, if it is one."""
    for decorator in function.decorator_list:
        if isinstance(decorator, ast.Call) and _call_name(decorator) == "field_validator" and decorator.args:
            return _render(decorator.args[0])
    return None


def _is_pair(node) -> bool:
    """A (key, message) tuple: a dotted key (or a variable holding one) and a string."""
    if not (isinstance(node, ast.Tuple) and len(node.elts) == 2 and _render(node.elts[1]) is not None):
        return False
    key = node.elts[0]
    if isinstance(key, ast.Name):
        return True
    text = _render(key)
    return text is not None and re.fullmatch(r"[\w.<>]+", text) is not None


def _render(node) -> str | None:
    """A string expression as text, with `<name>` for each value filled in at run time."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.Name):
        return None
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else f"<{_placeholder(v.value)}>" for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _render(node.left), _render(node.right)
        if left is not None:
            return left + (right if right is not None else "<...>")
    return None


def _placeholder(node) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Subscript):
        return _placeholder(node.value)
    return "..."


def _cell(text: str) -> str:
    """Text for a Markdown table cell (placeholders kept visible, pipes escaped)."""
    return (
        " ".join(text.split()).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        .replace("|", "\\|").replace("*", "\\*")
    )


# ---------------------------------------------------------------- the MkDocs hooks

GENERATORS = {
    "yaml-reference": yaml_reference,
    "cli-reference": cli_reference,
    "exit-status": exit_status,
    "json-output": json_output,
    "keyed-errors": keyed_errors_markdown,
    "stage-packages": stage_packages,
    "python-api": python_api,
    "benchmarks": benchmarks,
    "quickstart-example": quickstart_example,
}


def on_config(config):
    """Refuse to build from another checkout's code: the generated pages must describe
    the code beside this docs folder."""
    from mkdocs.exceptions import PluginError

    import sweeper

    where = Path(sweeper.__file__).resolve().parent.parent
    if where != ROOT:
        raise PluginError(
            f"docs/hooks.py: `import sweeper` found {where}, not {ROOT}; build with PYTHONPATH={ROOT} "
            "or from an environment where this checkout is installed"
        )
    return config


def on_files(files, config):
    """The benchmark page's plots: `benchmarks/README.md` links `figures/NAME.png`, kept
    beside it in `benchmarks/figures/`, so the site serves them at the same relative path."""
    from mkdocs.structure.files import File

    for figure in sorted((ROOT / "benchmarks" / "figures").glob("*.png")):
        files.append(File.generated(config, f"figures/{figure.name}", abs_src_path=str(figure)))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    from mkdocs.exceptions import PluginError

    def generated(match: re.Match) -> str:
        name = match.group(1)
        if name not in GENERATORS:
            raise PluginError(f"{page.file.src_path}: unknown generated part {name!r}; known: {', '.join(GENERATORS)}")
        return GENERATORS[name]()

    return MARKER.sub(generated, markdown)
