#!/usr/bin/env python3
"""Checks src/ against the module map of docs/architecture.md.

The map is the block between <!-- layering:begin --> and <!-- layering:end -->:
one line per module, "module  dep dep ..." ("-" for none). For every source
file under src/<module>/, each #include "x/..." must name the module itself,
one of its listed dependencies, or a public header directory of include/.
Also: default-visibility extern "C" definitions (NCCL_API, THESEUS_API) only
under src/api/, and a transport backend folder (src/transport/<backend>/)
included only from src/transport/.

usage: check_layering.py <repo root>
"""
import pathlib
import re
import sys

root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
doc = (root / "docs/architecture.md").read_text()
m = re.search(r"<!-- layering:begin -->(.*?)<!-- layering:end -->", doc, re.S)
if not m:
    sys.exit("docs/architecture.md has no layering block")

allowed = {}
order = []
for line in m.group(1).splitlines():
    line = line.strip()
    if not line or line.startswith("```") or line.startswith("module"):
        continue
    name, *deps = line.split()
    deps = [d for d in deps if d != "-"]
    for d in deps:
        if d not in allowed:
            sys.exit(f"layering block: {name} depends on {d}, which is not listed above it (the map must be bottom-up)")
    allowed[name] = set(deps)
    order.append(name)

src = root / "src"
public = {p.name for p in (root / "include").iterdir() if p.is_dir()}
backends = {p.name for p in (src / "transport").iterdir() if p.is_dir()}
modules = {p.name for p in src.iterdir() if p.is_dir()}
problems = []
for missing in sorted(modules - set(allowed)):
    problems.append(f"src/{missing}/ is not in the module map of docs/architecture.md")

include_re = re.compile(r'^\s*#\s*include\s+"([^"]+)"')
api_re = re.compile(r'\b(NCCL_API|THESEUS_API)\s*\(|visibility\("default"\)')
for path in sorted(src.rglob("*")):
    if path.suffix not in {".cc", ".h", ".cu", ".cuh"}:
        continue
    rel = path.relative_to(src)
    module = rel.parts[0]
    if module not in allowed:
        continue
    text = path.read_text(errors="replace")
    for n, line in enumerate(text.splitlines(), 1):
        im = include_re.match(line)
        if im:
            target = im.group(1)
            first = target.split("/")[0]
            if "/" not in target or first in public or first not in allowed:
                pass  # a file next to it, or a public header
            elif first != module and first not in allowed[module]:
                problems.append(f"src/{rel}:{n}: {module}/ may not include {target} ({first}/ is not below {module}/)")
            parts = target.split("/")
            if first == "transport" and len(parts) > 2 and parts[1] in backends and module != "transport":
                problems.append(f"src/{rel}:{n}: the {parts[1]} backend's headers are private to transport/ ({target})")
        if module != "api" and api_re.search(line) and "define" not in line:
            problems.append(f"src/{rel}:{n}: exported C entry points belong in src/api/")

if problems:
    print("\n".join(problems))
    sys.exit(1)
print(f"{len(order)} modules, every include follows docs/architecture.md")
