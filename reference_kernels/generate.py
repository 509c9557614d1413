"""Splice the shared source parts into the hand-written solutions.

The solutions must stay self-contained (a user copies one file alone, and the evaluator sends
one file's text), so the code they share (the CUDA GEMM core, the LayerNorm epilogue, ...) is
written once in reference_kernels/solutions/<backend>/_parts/ and copied into each file
between two marker lines:

    // ---- BEGIN generated from _parts/NAME: edit there, then run reference_kernels/generate.py ----
    ...
    // ---- END generated from _parts/NAME ----

A part may hold marker pairs of its own (left empty there): they are filled in the same way.

    python reference_kernels/generate.py           rewrite the files whose blocks are stale
    python reference_kernels/generate.py --check   change nothing; exit 1 naming the stale files
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

SOLUTIONS = Path(__file__).resolve().parent / "solutions"
BEGIN = "// ---- BEGIN generated from _parts/{}: edit there, then run reference_kernels/generate.py ----"
END = "// ---- END generated from _parts/{} ----"
BEGIN_RE = re.compile(r"^// ---- BEGIN generated from _parts/([\w.-]+)(?::.*)? ----$", re.M)
END_RE = re.compile(r"^// ---- END generated from _parts/[\w.-]+ ----$")


class GenerateError(Exception):
    pass


def fill(text: str, parts: Path, where: str, stack: tuple[str, ...] = ()) -> str:
    """text with every marker pair's body replaced by its part (itself filled first)."""
    for line in text.splitlines():  # a marker the patterns miss (indented, misspelt) would go stale unseen
        if "generated from _parts/" in line and not (BEGIN_RE.match(line) or END_RE.match(line)):
            raise GenerateError(f"{where}: not a marker line: {line.strip()!r}")
    out, pos = [], 0
    for m in BEGIN_RE.finditer(text):
        if m.start() < pos:
            continue  # a nested marker inside a block being replaced: the part brings its own
        name = m.group(1)
        end = text.find("\n" + END.format(name) + "\n", m.end())
        if end < 0:
            raise GenerateError(f"{where}: BEGIN {name} has no END line")
        if name in stack:
            raise GenerateError(f"{where}: part {name} includes itself ({' > '.join(stack + (name,))})")
        try:
            body = (parts / name).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise GenerateError(f"{where}: no part _parts/{name}") from None
        body = fill(body, parts, f"_parts/{name}", stack + (name,))
        if not body.endswith("\n"):
            body += "\n"
        out += [text[pos:m.start()], BEGIN.format(name), "\n", body, END.format(name)]
        pos = end + 1 + len(END.format(name))  # at the END line's newline
    return "".join(out) + text[pos:]


def generate(root: Path, check: bool) -> list[Path]:
    """The solution files (root/<backend>/*.py, for each backend with a _parts/ folder) whose
    blocks are stale; rewritten unless check. Nothing is written if any file or part is in error."""
    new_texts = {}
    for parts in sorted(root.glob("*/_parts")):
        used = set()
        for path in sorted(parts.parent.glob("*.py")):
            text = path.read_text(encoding="utf-8")
            new = fill(text, parts, str(path.relative_to(root)))
            used |= set(BEGIN_RE.findall(new))
            if new != text:
                new_texts[path] = new
        unused = sorted(p.name for p in parts.iterdir() if p.is_file() and p.name not in used)
        if unused:  # a part no file splices in would drift unnoticed
            raise GenerateError(f"{parts.relative_to(root)}: parts no solution uses: {', '.join(unused)}")
    if not check:
        for path, new in new_texts.items():
            path.write_text(new, encoding="utf-8")
    return list(new_texts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 if a file is stale")
    ap.add_argument("--root", type=Path, default=SOLUTIONS, help="the solutions folder (default: %(default)s)")
    args = ap.parse_args(argv)
    try:
        stale = generate(args.root, args.check)
    except GenerateError as e:
        print(f"generate: {e}", file=sys.stderr)
        return 2
    for path in stale:
        print(f"{'stale' if args.check else 'regenerated'}: {path.relative_to(args.root)}")
    if stale and args.check:
        print("run: python reference_kernels/generate.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
