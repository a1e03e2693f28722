#!/usr/bin/env python3
"""Checks docs/schemas/schedule.schema.json against the example schedules.

Every example JSON schedule must validate (the broken one too: its mistake is
semantic, which only Theseus' verifier can see), and a set of documents with
shape or type mistakes must not. Exits 77 (CTest "skipped") when the Python
jsonschema package is not installed.
"""
import glob
import json
import os
import sys

try:
    import jsonschema
except ImportError:
    print("python3 jsonschema is not installed; skipping")
    sys.exit(77)


def main(schema_path, examples_dir):
    with open(schema_path) as f:
        schema = json.load(f)
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    validator = validator_class(schema)
    failures = 0
    examples = sorted(glob.glob(os.path.join(examples_dir, "*.json")))
    if not examples:
        print("no examples found in", examples_dir)
        return 1
    for path in examples:
        with open(path) as f:
            doc = json.load(f)
        errors = list(validator.iter_errors(doc))
        if errors:
            failures += 1
            print("FAIL (should validate):", path)
            for e in errors[:5]:
                print("   ", "/".join(str(p) for p in e.absolute_path), e.message[:200])
        else:
            print("ok", os.path.basename(path))
    step = {"op": "send", "peer": 1, "src": "input[0]"}
    base = {"version": 1, "name": "t", "collective": "allreduce", "nranks": 2, "ranks": [[step], []]}
    bad = {
        "wrong version": dict(base, version=2),
        "built-in name": dict(base, name="ring"),
        "name with a space": dict(base, name="a b"),
        "unknown field": dict(base, nrank=2),
        "ranks and programs": dict(base, programs=[{"nranks": 1, "ranks": [[]]}]),
        "unknown op": dict(base, ranks=[[{"op": "sendd", "peer": 1, "src": "input[0]"}], []]),
        "bad range": dict(base, ranks=[[{"op": "send", "peer": 1, "src": "input[x]"}], []]),
        "send with dst": dict(base, ranks=[[dict(step, dst="output[0]")], []]),
        "fused op with peer": dict(base, ranks=[[{"op": "recv_reduce_send", "peer": 1, "src": "input[0]"}], []]),
        "string count": dict(base, nranks="2"),
        "bad in_place": dict(base, in_place="yes"),
        "too many channels": dict(base, channels=33),
    }
    for what, doc in bad.items():
        if validator.is_valid(doc):
            failures += 1
            print("FAIL (should be rejected):", what)
        else:
            print("ok rejects", what)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
