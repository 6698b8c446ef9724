#!/usr/bin/env python3
"""check_model_names.py [ROOT]: fail on model and task names spelt outside nn/.

Which models and tasks exist is the registry's to say (src/nn/models.cpp,
src/nn/tasks.cpp); everything else reads it from there. The names are read
from the registry itself (`.name`, `.title` of each model kind; `.id`,
`.model_title`, `.title`, `.dataset` of each task), so a new entry is covered
without editing this script. In src/<folder>/ and include/mantissa/<folder>/,
for every folder but nn/ and cli/ (the program's help text), every string
literal outside comments is checked:
- a literal that is a model's or task's name ("gpt", "BERT", ...), in any case;
- a literal that contains a task's title ("Character-level GPT") or dataset
  ("Fashion-MNIST"), in any case; data/ may name the datasets its readers read.
Each hit is reported as file:line with the literal, and the exit status is 1.
"""
import pathlib
import re
import sys

EXEMPT = {"nn", "cli"}          # the registry, and the CLI's help text
DATASET_READERS = {"data"}      # may name the datasets they read
SUFFIXES = (".hpp", ".cpp", ".h", ".inc")
FIELD = re.compile(r'\.(name|title|id|model_title|dataset)\s*=\s*"([^"\\]*)"')


def registry(root):
    """(whole-literal names, substring names) from the registry's entries."""
    whole, inside, datasets = set(), set(), set()
    for rel, whole_fields, inside_fields in (
        ("src/nn/models.cpp", {"name", "title"}, set()),
        ("src/nn/tasks.cpp", {"id", "model_title"}, {"title"}),
    ):
        path = root / rel
        if not path.is_file():
            sys.exit(f"check_model_names: no registry at {rel}")
        for field, value in FIELD.findall(path.read_text()):
            if field in whole_fields:
                whole.add(value.lower())
            elif field in inside_fields:
                inside.add(value.lower())
            elif field == "dataset":
                datasets.add(value.lower())
    if not whole or not inside:
        sys.exit("check_model_names: found no names in the registry (has its layout changed?)")
    return whole, inside, datasets


def string_literals(text):
    """(line, contents) of every string literal outside comments."""
    out = []
    i, n, line = 0, len(text), 1
    while i < n:
        c = text[i]
        if c == "\n":
            line += 1
            i += 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            line += text.count("\n", i, j)
            i = j
        elif c == '"':
            prefix = re.search(r"(?<![A-Za-z0-9_])(u8|u|U|L)?R$", text[max(0, i - 3):i])
            if prefix:  # raw string: R"delim( ... )delim"
                open_paren = text.find("(", i)
                close = ")" + text[i + 1:open_paren] + '"'
                j = text.find(close, open_paren)
                j = n if j < 0 else j
                out.append((line, text[open_paren + 1:j]))
                line += text.count("\n", i, j)
                i = j + len(close)
                continue
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append((line, text[i + 1:j]))
            i = j + 1
        elif c == "'":
            if i > 0 and (text[i - 1].isalnum() or text[i - 1] == "_") and not re.search(
                    r"(?<![A-Za-z0-9_])(u8|u|U|L)$", text[max(0, i - 3):i]):
                i += 1  # a digit separator: 1'000
                continue
            j = i + 1
            while j < n and text[j] != "'":
                j += 2 if text[j] == "\\" else 1
            i = j + 1
        else:
            i += 1
    return out


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).resolve().parent.parent)
    whole, inside, datasets = registry(root)
    problems, scanned = [], 0
    for base in (root / "src", root / "include" / "mantissa"):
        if not base.is_dir():
            continue
        for folder in sorted(p for p in base.iterdir() if p.is_dir() and p.name not in EXEMPT):
            substrings = inside | (set() if folder.name in DATASET_READERS else datasets)
            for path in sorted(folder.rglob("*")):
                if path.suffix not in SUFFIXES:
                    continue
                scanned += 1
                for number, literal in string_literals(path.read_text()):
                    low = literal.lower()
                    hit = low if low in whole else next((s for s in sorted(substrings) if s in low), None)
                    if hit is not None:
                        problems.append(f'{path.relative_to(root)}:{number}: "{literal}" names \'{hit}\'')
    if problems:
        print(f"check_model_names: {len(problems)} literal(s) name a model or task outside nn/ "
              "(read it from nn/models.hpp or nn/tasks.hpp instead):")
        for p in problems:
            print("  " + p)
        return 1
    print(f"check_model_names: {scanned} files name no model or task outside nn/ and cli/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
