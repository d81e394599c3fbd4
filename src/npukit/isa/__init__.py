"""The shared ISA toolkit: instruction sets as data (`spec`) and text from them (`text`).

See ``docs/isa.md`` for how to write a spec.
"""

from npukit.isa import text
from npukit.isa.spec import AsmError, BoundField, BoundFormat, BoundSpec, Field, Format, Spec, bits, const
from npukit.isa.text import KeyValueSyntax, Row, Syntax, listing, markdown_table

__all__ = ["AsmError", "BoundField", "BoundFormat", "BoundSpec", "Field", "Format", "KeyValueSyntax", "Row",
           "Spec", "Syntax", "bits", "const", "listing", "markdown_table", "text"]
