"""docs/targets/pccx.md carries exactly the ISA table rendered from the spec."""

from pathlib import Path

from npukit.targets.pccx import asm, isa

DOC = Path(__file__).resolve().parents[3] / "docs" / "targets" / "pccx.md"


def test_doc_table_is_the_rendered_spec():
    text = DOC.read_text()
    begin, end = "<!-- isa-table:begin -->\n", "<!-- isa-table:end -->"
    assert text.count(begin) == 1 and text.count(end) == 1
    table = text.split(begin, 1)[1].split(end, 1)[0]
    assert table == asm.isa_table_markdown()


def test_rendered_table_covers_every_field_and_function():
    table = asm.isa_table_markdown()
    for op, fields in isa.SPEC.items():
        for f in fields:
            bits = f"[{f.hi}]" if f.hi == f.lo else f"[{f.hi}:{f.lo}]"
            assert f"| {op.name} = 0x{int(op):X} |" in table and bits in table
        # fields tile the 60-bit body exactly, no overlaps or gaps
        covered = sorted(b for f in fields for b in range(f.lo, f.hi + 1))
        assert covered == list(range(60)), op
    assert table.count("extended (npukit)") == 3 + 8  # three async bits, eight CVO functions
