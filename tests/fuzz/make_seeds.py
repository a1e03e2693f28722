#!/usr/bin/env python3
"""Writes the seed inputs of tests/fuzz/corpus/<target>/seed-*: inputs the repository already has
(example schedules and policies, the documents and strings the unit tests use) plus a few valid and
invalid ones written here, and, given a theseus-schedule binary, every built-in schedule exported
as JSON for 2..4 ranks. Inputs fuzzing found are the other files of each corpus (named by their
SHA-1, written by `scripts/fuzz.sh --merge`); this script leaves them alone.

usage: tests/fuzz/make_seeds.py [path/to/theseus-schedule]
"""
import hashlib
import json
import os
import re
import struct
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CORPUS = os.path.join(ROOT, "tests", "fuzz", "corpus")


def read(rel):
    with open(os.path.join(ROOT, rel), "rb") as f:
        return f.read()


def put(target, name, data):
    if isinstance(data, str):
        data = data.encode()
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", name)[:60]
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data)


def raw_strings(rel):
    """The C++ raw string literals R"delim(...)delim" of a source file."""
    text = read(rel).decode()
    return [m.group(2) for m in re.finditer(r'R"([^(\s]*)\((.*?)\)\1"', text, re.S)]


def call_strings(rel, functions):
    """Plain string literals passed first to one of `functions` ("eval(\"...\")")."""
    text = read(rel).decode()
    pattern = r'\b(?:%s)\("((?:[^"\\]|\\.)*)"' % "|".join(functions)
    return [bytes(m.group(1), "utf-8").decode("unicode_escape") for m in re.finditer(pattern, text)]


def short_hash(data):
    return hashlib.sha1(data.encode() if isinstance(data, str) else data).hexdigest()[:10]


# ---- schedules -------------------------------------------------------------------------------------

def schedules(tool):
    sched_dir = "policies/schedules"
    for f in sorted(os.listdir(os.path.join(ROOT, sched_dir))):
        target = "schedule_json" if f.endswith(".json") else "msccl_xml" if f.endswith(".xml") else None
        if target:
            put(target, "example-" + f, read(os.path.join(sched_dir, f)))
    for rel in ["tests/unit/schedule_user/json_errors_test.cc", "tests/unit/schedule_user/json_schedule_test.cc"]:
        for s in raw_strings(rel):
            if s.lstrip().startswith("{") and '"version"' in s:
                put("schedule_json", "test-" + short_hash(s), s)
    step = lambda op, **kw: dict(op=op, **kw)
    two = {"version": 1, "name": "t", "collective": "allreduce", "nranks": 2, "ranks": [
        [step("send", peer=1, src="input[0]"), step("recv_reduce", peer=1, src="input[0]", dst="output[0]")],
        [step("send", peer=0, src="input[0]"), step("recv_reduce", peer=0, src="input[0]", dst="output[0]")]]}
    put("schedule_json", "hand-allreduce2", json.dumps(two))
    inplace = dict(two, in_place="both", chunks_per_block=2, channels=2, scratch_blocks=1)
    put("schedule_json", "hand-allreduce2-fields", json.dumps(inplace))
    put("schedule_json", "hand-programs", json.dumps({
        "version": 1, "name": "p", "collective": "broadcast", "root": 0,
        "programs": [{"nranks": 1, "ranks": [[step("copy", src="input[0]", dst="output[0]")]]},
                     {"nranks": 2, "ranks": [[step("send", peer=1, src="input[0]"),
                                              step("copy", src="input[0]", dst="output[0]")],
                                             [step("recv", peer=0, dst="output[0]")]]}]}))
    put("schedule_json", "bad-deadlock", json.dumps({"version": 1, "name": "d", "collective": "allreduce", "nranks": 2,
        "ranks": [[step("recv_reduce", peer=1, src="input[0]", dst="output[0]"), step("send", peer=1, src="input[0]")],
                  [step("recv_reduce", peer=0, src="input[0]", dst="output[0]"), step("send", peer=0, src="input[0]")]]}))
    put("schedule_json", "bad-syntax", '{"version": 1, "name": ')
    if tool:
        for name in ["ring", "tree", "double_binary_tree", "recursive_doubling", "halving_doubling", "direct",
                     "hierarchical"]:
            for coll in ["allreduce", "allgather", "reducescatter", "broadcast", "reduce", "alltoall", "gather",
                         "scatter"]:
                for n in [2, 3, 4] if name in ("ring", "recursive_doubling", "halving_doubling") else [2, 3]:
                    r = subprocess.run([tool, "export", name, "--nranks", str(n), "--collective", coll,
                                        "--name", "x_" + name], capture_output=True)
                    if r.returncode == 0 and len(r.stdout) < 12000:
                        put("schedule_json", "builtin-%s-%s-%d" % (name, coll, n), r.stdout)
    # MSCCL XML: a 2-gpu allgather, an in-place allreduce with scratch and deps, broken ones.
    ag = ['<algo name="ag2" proto="Simple" nchannels="1" nchunksperloop="2" ngpus="2" coll="allgather" '
          'inplace="0" outofplace="1" minBytes="0" maxBytes="0">']
    for g in range(2):
        ag.append('<gpu id="%d" i_chunks="1" o_chunks="2" s_chunks="0">' % g)
        ag.append('<tb id="0" send="%d" recv="%d" chan="0">' % (1 - g, 1 - g))
        ag.append('<step s="0" type="s" srcbuf="i" srcoff="0" dstbuf="o" dstoff="%d" cnt="1" depid="-1" deps="-1" '
                  'hasdep="0"/>' % g)
        ag.append('<step s="1" type="r" srcbuf="o" srcoff="%d" dstbuf="o" dstoff="%d" cnt="1" depid="-1" deps="-1" '
                  'hasdep="0"/>' % (1 - g, 1 - g))
        ag.append('</tb>')
        ag.append('<tb id="1" send="-1" recv="-1" chan="-1">')
        ag.append('<step s="0" type="cpy" srcbuf="i" srcoff="0" dstbuf="o" dstoff="%d" cnt="1" depid="-1" deps="-1" '
                  'hasdep="0"/>' % g)
        ag.append('</tb></gpu>')
    ag.append('</algo>')
    put("msccl_xml", "hand-allgather2", "\n".join(ag))
    ar = ['<algo name="ar2" nchannels="1" nchunksperloop="2" ngpus="2" coll="allreduce" inplace="1" redop="sum">']
    for g in range(2):
        ar.append('<gpu id="%d" i_chunks="2" o_chunks="2" s_chunks="1">' % g)
        ar.append('<tb id="0" send="%d" recv="%d" chan="0">' % (1 - g, 1 - g))
        ar.append('<step s="0" type="s" srcbuf="i" srcoff="%d" dstbuf="s" dstoff="0" cnt="1" depid="-1" deps="-1" '
                  'hasdep="0"/>' % (1 - g))
        ar.append('<step s="1" type="r" srcbuf="s" srcoff="0" dstbuf="s" dstoff="0" cnt="1" depid="-1" deps="-1" '
                  'hasdep="1"/>')
        ar.append('<step s="2" type="nop" depid="-1" deps="-1" hasdep="0"/>')
        ar.append('<step s="3" type="s" srcbuf="o" srcoff="%d" dstbuf="o" dstoff="%d" cnt="1" depid="1" deps="0" '
                  'hasdep="0"/>' % (g, g))
        ar.append('<step s="4" type="r" srcbuf="o" srcoff="%d" dstbuf="o" dstoff="%d" cnt="1" depid="-1" deps="-1" '
                  'hasdep="0"/>' % (1 - g, 1 - g))
        ar.append('</tb>')
        ar.append('<tb id="1" send="-1" recv="-1" chan="-1">')
        ar.append('<step s="0" type="re" srcbuf="s" srcoff="0" dstbuf="o" dstoff="%d" cnt="1" depid="0" deps="1" '
                  'hasdep="1"/>' % g)
        ar.append('</tb></gpu>')
    ar.append('</algo>')
    put("msccl_xml", "hand-allreduce2-scratch", "\n".join(ar))
    put("msccl_xml", "bad-syntax", '<algo name="x"><gpu></algo>')
    put("msccl_xml", "bad-root", "<algorithm/>")
    put("msccl_xml", "bad-type", '<algo name="b" nchannels="1" nchunksperloop="2" ngpus="1" coll="allreduce" '
        'inplace="0"><gpu id="0" i_chunks="2" o_chunks="2" s_chunks="1"><tb id="0" send="-1" recv="-1" chan="-1">'
        '<step s="0" type="res" srcbuf="i" srcoff="0" dstbuf="o" dstoff="0" cnt="2" depid="-1" deps="-1" '
        'hasdep="0"/></tb></gpu></algo>')


# ---- policies, conditions, attributes -------------------------------------------------------------

def policies():
    conds = []
    docs = []
    for f in ["policies/static.json", "policies/adaptive.json"]:
        put("policy_json", "shipped-" + os.path.basename(f), read(f))
        docs.append(read(f).decode())
    for rel in ["tests/unit/policy/json_policy_errors_test.cc", "tests/unit/policy/json_policy_eval_test.cc",
                "tests/unit/policy/forced_schedule_test.cc"]:
        for s in raw_strings(rel):
            s = s.strip()
            if s.startswith("["):
                s = '{"version":1,"rules":' + s + "}"
            if s.startswith("{") and len(s) < 8000:
                put("policy_json", "test-" + short_hash(s), s)
                docs.append(s)
    for d in docs:
        conds += re.findall(r'"when"\s*:\s*"((?:[^"\\]|\\.)*)"', d)
    conds += call_strings("tests/unit/policy/condition_test.cc", ["eval", "error", "parse"])
    for c in dict.fromkeys(conds):
        put("condition", "test-" + short_hash(c), c)
    for rel in ["tests/unit/attrs/external_attributes_test.cc"]:
        for s in raw_strings(rel):
            put("attributes", "test-" + short_hash(s), s)
    put("attributes", "hand-links", json.dumps({"version": 1, "comment": "agent", "attributes": {
        "link.0.1.gbps": 10, "link.1.2.gbps": 0.5, "link.2.3.bottleneck": 0.95, "link.0.3.penalty": 8,
        "node.h0.healthy": True, "node.h1.nic.mlx5_0.healthy": False, "rank.2.wait_us": 4000,
        "link.12.4.gbps": 1e-3}}))
    put("attributes", "bad-name", '{"version":1,"attributes":{"link..gbps":1}}')
    put("attributes", "bad-value", '{"version":1,"attributes":{"x":"1"}}')


# ---- environment strings ---------------------------------------------------------------------------

def strings():
    emulate = [" throttle:0->1:10%@seq=100-400 ; latency:2->3:50us;straggle:3:2ms@t=5s-20s;"
               "throttle:*<->2:2.5GB/s;throttle:1->*:800MB/s@seq=5-;throttle:0->2:25Gbps",
               "straggle:1:1ms@seq=10-20;straggle:*:2ms@t=0ms-50ms", "throttle:0->1:1GB/s;latency:2->1:1us",
               "throttle:0->1:0.5GB/s", "", ";;"]
    emulate += call_strings("tests/unit/epoch/emulation_test.cc", ["expectError", "parseEmulation"])
    for s in dict.fromkeys(emulate):
        put("emulate", "test-" + short_hash(s), s)
    for s in ["ring", "^nvls", "ring,tree;allreduce:tree", "Tree", "PAT", "allreduce:^ring,direct;broadcast:tree",
              "CollNetDirect,NVLS", "^", "allgather:", "ring;ring", "foo:ring", " Ring , TREE ", "Simple",
              "LL,LL128", "allreduce:LL,Simple", "allreduce:Simple;Simple", "^LL128"]:
        put("nccl_algo", "hand-" + short_hash(s), s)
    for s in ["ring", "allreduce:my_allreduce;allgather:direct", "allgather:direct;tree", "tree;ring",
              "broadcast:double_binary_tree;reduce:tree;alltoall:direct", "allreduce:", ";;ring;",
              "file:policies/schedules/allreduce_rhd_4.json", "all_reduce:halving_doubling", "hierarchical",
              "nope"]:
        put("forced_schedule", "hand-" + short_hash(s), s)


# ---- binary protocols ------------------------------------------------------------------------------

def wire_str(s):
    s = s.encode() if isinstance(s, str) else s
    return struct.pack("<I", len(s)) + s


def peer(rank, host="h0", addr="10.0.0.1:4000"):
    return struct.pack("<iiiQ", rank, 1000 + rank, rank, 0x1234) + wire_str(host) + wire_str(addr)


def frame(ftype, payload):
    return struct.pack("<III", 0x31524654, ftype, len(payload)) + payload


def hash_bytes(data, seed=0):
    m = (1 << 64) - 1
    h = 0xcbf29ce484222325 ^ seed
    for b in data:
        h ^= b
        h = (h * 0x100000001b3) & m
    h ^= h >> 30
    h = (h * 0xbf58476d1ce4e5b9) & m
    h ^= h >> 27
    h = (h * 0x94d049bb133111eb) & m
    h ^= h >> 31
    return h


def unique_id():
    sockaddr = struct.pack("<HH4s", 2, 0x5d17, bytes([127, 0, 0, 1])) + bytes(20)  # AF_INET, port, 127.0.0.1
    head = struct.pack("<Q", 0x0123456789abcdef) + sockaddr + b"THID"
    return head + struct.pack("<Q", hash_bytes(head)) + bytes(128 - 48)


def protocols():
    uid = unique_id()
    join = struct.pack("<iiiiQ", 1, 4, 1, 0, 0xfeed) + wire_str(uid) + peer(1)
    table = struct.pack("<QI", 0xabc, 4) + b"".join(peer(r) for r in range(4))
    link = struct.pack("<iiQ", 2, 4, 0xc0ffee) + peer(2)
    put("bootstrap_wire", "join", frame(2, join))
    put("bootstrap_wire", "table", frame(3, table))
    put("bootstrap_wire", "link-join-bye", frame(2, link) + frame(1, b""))
    put("bootstrap_wire", "error", frame(4, b"rank 3 did not join in time") + frame(9, b"timed out"))
    put("bootstrap_wire", "control", frame(5, struct.pack("<Q", 7) + b"contribution") +
        frame(6, struct.pack("<QI", 7, 2) + wire_str("a") + wire_str("b")) +
        frame(7, struct.pack("<Q", 8) + wire_str("why")) + frame(8, struct.pack("<i", 3) + wire_str("gone")) +
        frame(17, b"user message"))
    put("bootstrap_wire", "bad-marker", b"GET / HTTP/1.1\r\n\r\n")
    put("bootstrap_wire", "bad-length", struct.pack("<III", 0x31524654, 3, 0xffffffff))
    put("bootstrap_wire", "unique-id", uid)

    def epoch(kind, body):
        return b"EP\x01" + bytes([kind]) + body
    table_json = json.dumps({"format": 1, "version": 3, "ranges": [
        {"collective": 4, "min": 0, "max": 65536, "schedule": "ring", "params": "order=0,2,1,3;channels=2",
         "slice": 0, "why": "rule 0 'x'"},
        {"collective": 4, "min": 65537, "max": 18446744073709551615, "schedule": "tree", "params": "", "slice": 4096,
         "why": ""},
        {"collective": 0, "min": 0, "max": 18446744073709551615, "schedule": "ring", "params": "bidirectional=1",
         "slice": 0}]})
    q = lambda *v: struct.pack("<" + "Q" * len(v), *v)
    msgs = {"grant": epoch(1, q(128, 64)), "prepare": epoch(2, q(3, 192) + wire_str(table_json) + wire_str("slow link")),
            "commit": epoch(3, q(3, 192, 256, 224)), "cancel": epoch(4, q(3) + wire_str("rank 2 failed")),
            "progress": epoch(5, q(99)), "ack": epoch(6, q(3) + b"\x01" + wire_str("")),
            "nack": epoch(6, q(3) + b"\x00" + wire_str("cannot build")), "bad-version": b"EP\x02\x01" + q(1, 1)}
    for name, m in msgs.items():
        put("control_messages", "epoch-" + name, b"\x00" + m)
    put("control_messages", "table", b"\x01" + table_json.encode())
    put("control_messages", "table-bad", b"\x01" + b'{"format":1,"version":1,"ranges":[{"collective":99}]}')
    snap = {"format": 1, "rank": 2, "a": [["link.2.3.gbps", 9.5, 0, 120, 7], ["node.h1.healthy", 1, 1, 0, 8],
                                          ["rank.0.wait_us", 30, 2, 5, 9, 0]]}
    put("control_messages", "snapshot", b"\x02" + json.dumps(snap).encode())
    put("control_messages", "snapshot-unsorted", b"\x02" + json.dumps(
        {"format": 1, "rank": 0, "a": [["b", 1, 0, 0, 1], ["a", 1, 0, 0, 2]]}).encode())
    put("control_messages", "failure", b"\x03" + b"6 2 rank 2: corrupt message from rank 1")
    put("control_messages", "failure-bad", b"\x03" + b"0 1 success is no failure")


def main():
    tool = sys.argv[1] if len(sys.argv) > 1 else None
    schedules(tool)
    policies()
    strings()
    protocols()


if __name__ == "__main__":
    main()
