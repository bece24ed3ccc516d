"""Rewrite README.md's YAML reference from the schema: `python scripts/update_readme.py`."""

import re
from pathlib import Path

from sweeper.spec.reference import markdown_reference

readme = Path(__file__).resolve().parent.parent / "README.md"
text = readme.read_text()
text = re.sub(
    r"(<!-- reference:start -->\n).*?(<!-- reference:end -->)",
    lambda m: m.group(1) + markdown_reference() + m.group(2),
    text,
    flags=re.S,
)
readme.write_text(text)
