"""docs/architecture.md is true to the tree: every module it names exists, every package is named.

The rules are read from the doc's own structure, so a rename anywhere (the timing core included)
shows up here without this test knowing module names:

* every ``src/npukit/...`` path (``{a,b}`` alternatives expanded) exists;
* in the module table, each backticked ``name.py`` / ``name/`` / glob exists under the row's folder;
* in the "Today's targets" list, each bullet's backticked bare names (``sim``, ``fastcvo``) are
  modules or packages of that target, and ``name/`` a sub-package (a nested list after it, as in
  ``fast/`` (`fastsim`, ...), resolves in that sub-package too);
* every package of src/npukit (a folder with ``__init__.py``) appears as ``path/`` or ``name/``.
"""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PKG = ROOT / "src" / "npukit"
DOC = (ROOT / "docs" / "architecture.md").read_text()
TICKED = re.compile(r"`([^`]+)`")
MODULE = re.compile(r"[a-z_][a-z0-9_]*")


def _expand(path: str) -> list[str]:
    m = re.search(r"\{([^}]*)\}", path)
    if not m:
        return [path]
    return [p for alt in m.group(1).split(",") for p in _expand(path[: m.start()] + alt + path[m.end():])]


def _exists(folder: Path, name: str) -> bool:
    name = name.rstrip("/")
    if "*" in name:
        return any(folder.glob(name))
    return (folder / name).is_file() or (folder / name).is_dir() or (folder / f"{name}.py").is_file()


def _table_rows() -> list[tuple[Path, str]]:
    rows, folder = [], None
    for line in DOC.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) != 3 or cells[1].startswith("---"):
            continue
        named = TICKED.findall(cells[1])
        if named and named[0].startswith("src/npukit/") and named[0].endswith("/") and "<" not in named[0]:
            folder = ROOT / named[0]
        elif named:
            folder = None  # a file row: its text names things, not modules of a folder
        if folder is not None:
            rows.append((folder, cells[2]))
    return rows


def _target_bullets() -> list[tuple[str, str]]:
    section = DOC.split("Today's targets:", 1)[1].split("\n### ", 1)[0]
    bullets = re.split(r"\n\* ", "\n" + section.strip())
    out = []
    for b in bullets:
        m = re.match(r"`([a-z0-9_]+)/`", b)
        if m:
            out.append((m.group(1), b[m.end():]))
    return out


def test_every_named_path_exists():
    paths = [p for t in TICKED.findall(DOC) for p in _expand(t)
             if p.startswith("src/npukit/") and "<" not in p]
    assert len(paths) > 10
    missing = [p for p in paths if not _exists(ROOT, p)]
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_table_modules_exist_under_their_row():
    rows = _table_rows()
    assert len(rows) >= 8
    missing = []
    for folder, text in rows:
        for name in TICKED.findall(text):
            if "<" in name or " " in name or not (name.endswith(".py") or name.endswith("/")):
                continue
            if "/" in name.rstrip("/") and not name.startswith(folder.name):
                continue  # a path from the repository root (docs/...), checked as a path if under src
            if not _exists(folder, name) and not _exists(PKG, name):
                missing.append(f"{folder.relative_to(ROOT)}: {name}")
    assert not missing, f"the module table names modules that do not exist: {missing}"


def test_target_bullets_name_real_modules():
    bullets = _target_bullets()
    targets = {p.name for p in (PKG / "targets").iterdir() if (p / "__init__.py").exists()}
    assert {t for t, _ in bullets} == targets
    missing = []
    for target, text in bullets:
        base = PKG / "targets" / target
        sub = None  # the sub-package whose parenthesised list we are in
        depth = 0
        for token in re.finditer(r"`([^`]+)`|\(|\)", text):
            if token.group(0) == "(":
                depth += 1
                continue
            if token.group(0) == ")":
                depth -= 1
                sub = None if depth == 0 else sub
                continue
            name = token.group(1)
            if name.endswith("/") and MODULE.fullmatch(name[:-1]):
                if not (base / name).is_dir():
                    missing.append(f"{target}/{name}")
                sub = base / name
                continue
            if not MODULE.fullmatch(name) or name.startswith("docs"):
                continue
            where = [sub] if depth and sub is not None else [base]
            if depth and sub is None:
                continue  # words in a plain parenthesis are prose, not modules
            if not any(_exists(w, name) for w in where):
                missing.append(f"{target}/{name}")
    assert not missing, f"the targets list names modules that do not exist: {missing}"


def test_every_package_is_named():
    named = set(TICKED.findall(DOC))
    packages = sorted(p.parent.relative_to(PKG).as_posix() for p in PKG.rglob("__init__.py")
                      if p.parent != PKG)
    assert "targets/pccx/fast" in packages
    bullets = dict(_target_bullets())

    def is_named(p: str) -> bool:
        parts = p.split("/")
        if parts[0] == "targets" and len(parts) > 2:  # a target's sub-package: named in its own bullet
            return f"{'/'.join(parts[2:])}/" in set(TICKED.findall(bullets.get(parts[1], "")))
        return bool({f"src/npukit/{p}/", f"{p}/", f"{parts[-1]}/"} & named)

    unnamed = [p for p in packages if not is_named(p)]
    assert not unnamed, f"packages docs/architecture.md does not name: {unnamed}"
