"""Machine-readable output: the JSON documents that `sweep validate|plan|status|list --json`
print and `sweep start|resume --summary-json PATH` write, one typed model each (pydantic,
with `schema_version`), built from what the commands already hold (a spec, a forecast, the
store's frames, a finished run), and the schema's reference page generated from the models.
"""

from sweeper.output._documents import (
    SCHEMA_VERSION,
    error_document,
    list_document,
    markdown_schema,
    plan_document,
    status_document,
    summary_document,
    validate_document,
)

__all__ = [
    "SCHEMA_VERSION", "error_document", "list_document", "markdown_schema", "plan_document", "status_document",
    "summary_document", "validate_document",
]
