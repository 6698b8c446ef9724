#!/usr/bin/env python3
"""check_layering.py [ROOT]: fail on any #include that points up the stack.

The folder order is read from the table in docs/ARCHITECTURE.md (first column,
top row = top of the stack), so the document and the check cannot disagree.
A row naming several folders (`data`, `io`) puts them on one level; folders on
one level may not include each other. Every #include in src/<folder>/ and
include/mantissa/<folder>/ is scanned, in both the "mantissa/<f>/..." and the
src-relative "<f>/..." forms; an include of a folder above the file's own
folder, or of a different folder on the same level, is reported as
file:line -> folder with the reason, and the exit status is 1.
"""
import pathlib
import re
import sys

ROW = re.compile(r"^\|\s*(`[^|]+`)\s*\|")
NAME = re.compile(r"`([a-z_]+)`")
INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]')


def read_levels(doc):
    """Folder -> level (0 = bottom) from the table's first column."""
    rows = []
    for line in doc.read_text().splitlines():
        m = ROW.match(line)
        if m:
            rows.append(NAME.findall(m.group(1)))
    if not rows:
        sys.exit(f"check_layering: no folder table found in {doc}")
    levels = {}
    for depth, names in enumerate(reversed(rows)):
        for name in names:
            if name in levels:
                sys.exit(f"check_layering: folder '{name}' appears twice in {doc}")
            levels[name] = depth
    return levels


def included_folder(target, levels):
    """The folder an include path refers to, or None for external headers."""
    parts = target.split("/")
    if len(parts) >= 3 and parts[0] == "mantissa" and parts[1] in levels:
        return parts[1]
    if len(parts) >= 2 and parts[0] in levels:
        return parts[0]
    return None


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    doc = root / "docs" / "ARCHITECTURE.md"
    levels = read_levels(doc)
    problems = []
    scanned = 0
    for base in (root / "src", root / "include" / "mantissa"):
        if not base.is_dir():
            continue
        for folder in sorted(p for p in base.iterdir() if p.is_dir()):
            if folder.name not in levels:
                problems.append(f"{folder.relative_to(root)}: folder '{folder.name}' is not in the table of {doc.relative_to(root)}")
                continue
            own = levels[folder.name]
            for path in sorted(folder.rglob("*")):
                if path.suffix not in (".hpp", ".cpp", ".h", ".inc"):
                    continue
                scanned += 1
                for number, line in enumerate(path.read_text().splitlines(), 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    other = included_folder(m.group(1), levels)
                    if other is None or other == folder.name:
                        continue
                    where = f"{path.relative_to(root)}:{number} -> {other}"
                    if levels[other] > own:
                        problems.append(f"{where}: '{other}' is above '{folder.name}'")
                    elif levels[other] == own:
                        problems.append(f"{where}: '{other}' is on the same level as '{folder.name}'")
    if problems:
        print(f"check_layering: {len(problems)} include(s) break the order of {doc.relative_to(root)}:")
        for p in problems:
            print("  " + p)
        return 1
    print(f"check_layering: {scanned} files follow the order of {doc.relative_to(root)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
