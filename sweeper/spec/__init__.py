"""The sweep file: its typed schema (the single source of defaults, help text and the
reference), how a YAML file is read into it, and dotted-path overrides. Pure pydantic and
YAML: no file checks beyond reading the YAML, no Ray, torch or MLflow.

- `schema`: `SweepSpec` and its sections, with the cross-field rules;
- `load`: YAML file -> `SweepSpec`, every problem as one keyed line;
- `overrides`: dotted paths (`lora.r`) set on a spec, as the search and `sweep export` do;
- `reference`: the YAML reference generated from the schema (`sweep reference`).
"""

__all__ = ["schema", "load", "overrides", "reference"]
