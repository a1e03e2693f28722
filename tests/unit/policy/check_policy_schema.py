#!/usr/bin/env python3
"""Checks docs/schemas/policy.schema.json against the shipped policies.

Every policy in policies/*.json must validate, and documents with shape or type
mistakes must not. Exits 77 (CTest "skipped") when the Python jsonschema
package is not installed.
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


def main(schema_path, policies_dir):
    with open(schema_path) as f:
        schema = json.load(f)
    validator_class = jsonschema.validators.validator_for(schema)
    validator_class.check_schema(schema)
    validator = validator_class(schema)
    failures = 0
    policies = sorted(glob.glob(os.path.join(policies_dir, "*.json")))
    if len(policies) < 2:
        print("expected the shipped policies in", policies_dir)
        return 1
    for path in policies:
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
    rule = {"name": "r", "collectives": ["allreduce"], "min_bytes": "64K", "when": "min(link.*.*.gbps) < 5",
            "use": {"schedule": ["ring", "tree"], "order": "avoid_slow_links", "channels": 2}}
    base = {"version": 1, "name": "t", "settings": {"hold": 2}, "rules": [rule]}
    if not validator.is_valid(base):
        failures += 1
        print("FAIL (should validate): the base document")
    bad = {
        "wrong version": dict(base, version=2),
        "no rules": {"version": 1},
        "unknown top-level field": dict(base, rule=[]),
        "unknown setting": dict(base, settings={"dwell": 1}),
        "hold zero": dict(base, settings={"hold": 0}),
        "unknown rule field": dict(base, rules=[dict(rule, min_byte=1)]),
        "rule without use": dict(base, rules=[{"name": "x"}]),
        "bad size suffix": dict(base, rules=[dict(rule, min_bytes="64Q")]),
        "negative size": dict(base, rules=[dict(rule, max_bytes=-1)]),
        "unknown collective": dict(base, rules=[dict(rule, collectives=["allreduc"])]),
        "bad order": dict(base, rules=[dict(rule, use={"schedule": "ring", "order": "fast"})]),
        "too many channels": dict(base, rules=[dict(rule, use={"schedule": "ring", "channels": 33})]),
        "bad root": dict(base, rules=[dict(rule, use={"schedule": "tree", "root": "leader"})]),
        "condition not a string": dict(base, rules=[dict(rule, when=True)]),
        "empty schedule list": dict(base, rules=[dict(rule, use={"schedule": []})]),
        "ranks zero": dict(base, rules=[dict(rule, ranks=0)]),
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
