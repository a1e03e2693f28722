#!/usr/bin/env python3
"""Every relative link in README.md and docs/*.md points at a file of the
repository (a user's clone has nothing outside it, e.g. no ../shared/).

usage: check_links.py <repo root>
"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
link_re = re.compile(r"\]\(([^)\s]+)\)")
problems = []
for doc in [root / "README.md", *sorted((root / "docs").glob("*.md"))]:
    for n, line in enumerate(doc.read_text().splitlines(), 1):
        for target in link_re.findall(line):
            if re.match(r"^[a-z]+:", target) or target.startswith("#"):
                continue  # URLs and anchors in the same page
            path = (doc.parent / target.split("#")[0]).resolve()
            if root not in path.parents and path != root:
                problems.append(f"{doc.relative_to(root)}:{n}: {target} is outside the repository")
            elif not path.exists():
                problems.append(f"{doc.relative_to(root)}:{n}: {target} does not exist")
if problems:
    print("\n".join(problems))
    sys.exit(1)
print("every relative link in README.md and docs/ resolves inside the repository")
