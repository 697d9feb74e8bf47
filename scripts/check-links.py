#!/usr/bin/env python3
"""Every relative link in the project's Markdown goes somewhere.

Reads README.md, ARCHITECTURE.md and docs/**/*.md; for each link or image
outside code (`[text](target)`, `![alt](target)`) whose target is not a
URL, the file must exist (relative to the page), and an anchor
(`page.md#anchor`, `#anchor`) must name a heading of that page, as GitHub
and mdBook make heading ids (lower case, spaces to dashes, punctuation
dropped, `-1`, `-2` for repeats). Prints each broken link with its page
and line, and exits 1 when there is one.

Links to the repository's own files (`../examples/...`) are checked
against the checkout: they are meant for the pages read in the repository
(a forge renders them); the built book keeps them as they are.
"""
import pathlib
import re
import sys

root = pathlib.Path(__file__).resolve().parent.parent
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    heading = heading.strip().lower().replace("`", "")
    return "".join(c if c.isalnum() or c in "-_" else "-" if c.isspace() else "" for c in heading)


def prose(path: pathlib.Path, code: bool = False):
    """(line number, line) outside fenced code; inline code blanked unless
    `code` (a heading's id keeps its code's text)."""
    fence = False
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.lstrip().startswith("```"):
            fence = not fence
            continue
        if not fence:
            yield n, line if code else re.sub(r"`[^`]*`", "``", line)


def anchors(path: pathlib.Path) -> set:
    seen, found = {}, set()
    for _, line in prose(path, code=True):
        m = re.match(r"#{1,6} (.*)", line)
        if m:
            s = slug(m.group(1))
            k = seen.get(s, 0)
            found.add(s if k == 0 else f"{s}-{k}")
            seen[s] = k + 1
    return found


def pages():
    yield root / "README.md"
    yield root / "ARCHITECTURE.md"
    yield from sorted((root / "docs").rglob("*.md"))


def main() -> int:
    broken = []
    for page in pages():
        for n, line in prose(page):
            for target in LINK.findall(line):
                if re.match(r"[a-z][a-z0-9+.-]*:", target):
                    continue
                file, _, anchor = target.partition("#")
                dest = (page.parent / file).resolve() if file else page
                where = f"{page.relative_to(root)}:{n}: {target}"
                if not dest.exists():
                    broken.append(f"{where}: no such file")
                elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                    broken.append(f"{where}: no heading `{anchor}` in {dest.relative_to(root)}")
    for b in broken:
        print(f"broken link: {b}", file=sys.stderr)
    checked = len(list(pages()))
    print(f"links: {checked} pages checked, {len(broken)} broken link(s)")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
