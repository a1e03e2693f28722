#!/usr/bin/python3
"""Compares the ABI layout probe built against our nccl.h with the reference.

    compare_probes.py <our probe> <reference probe or ""> <facts file>

Our header declares NCCL 2.30.7, the reference is NVIDIA's 2.28.9 header.
Each probe line is one fact, keyed by the text before its first '='. The facts
file lists what 2.29/2.30 changed or added, as the 2.30.7 header compiles to:
  * every fact must be printed by our probe, exactly (lines starting "type "
    only by the C++ probe, which alone prints function types);
  * every reference line must be printed unchanged by ours unless a fact with
    its key supersedes it, or the facts file retires the key ("- <key>");
  * every line of ours must be a reference line or a fact: nothing unreviewed.
Without the reference probe only the facts are checked (and the output says so).
"""
import subprocess
import sys


def run(exe):
    out = subprocess.run([exe], check=True, capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if line]


def key(line):
    return line.split("=", 1)[0]


def main():
    ours_exe, ref_exe, facts_path = sys.argv[1:4]
    ours = run(ours_exe)
    is_cxx = "language=C++" in ours
    facts, retired = [], set()
    with open(facts_path) as f:
        for raw in f:
            line = raw.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            if line.startswith("- "):
                retired.add(line[2:])
            elif is_cxx or not line.startswith("type "):
                facts.append(line)
    problems = [f"missing 2.30.7 fact: {fact}" for fact in facts if fact not in ours]
    fact_keys = {key(fact) for fact in facts}
    if ref_exe:
        ref = run(ref_exe)
        if len(ref) < 100:
            sys.exit(f"the reference probe printed only {len(ref)} lines")
        for line in ref:
            if line not in ours and key(line) not in fact_keys and key(line) not in retired:
                problems.append(f"reference line changed or missing: {line}")
        for line in ours:
            if line not in ref and line not in facts:
                problems.append(f"line in neither the reference nor the facts: {line}")
    if problems:
        print("our nccl.h differs from NCCL 2.30.7:\n  " + "\n  ".join(problems))
        return 1
    if ref_exe:
        print(f"{len(ours)} lines: the 2.28.9 reference's unchanged, {len(facts)} 2.30.7 facts as listed")
    else:
        print(f"{len(facts)} 2.30.7 facts as listed (no reference nccl.h: the comparison with 2.28.9 did not run)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
