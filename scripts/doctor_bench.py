#!/usr/bin/python3
"""`make doctor-bench`: does theseus-doctor name the right rank, host and link?

Each scenario injects one fault (or two) into a fresh 8-rank job running a training-like loop
(tests/bench/doctor/doctor_bench.cc): over shared memory on this machine, or on four network-
namespace hosts of two ranks each over TCP (theseus-run --netns; root, ip and tc needed). Faults
come from Theseus' own emulation (THESEUS_EMULATE: a throttled link, a rank's slow sends, a
straggler in compute), from the kernel's traffic control (a slow path between two hosts, a slow
NIC, a host whose every link is slow, a flapping link), or from the rank program (SIGSTOP, SIGKILL,
another collective, another count). Then theseus-doctor reads the ranks' flight-recorder dumps and
its culprits are compared with the truth:

  rank level   TP: a culprit rank that is a true one, FP: one that is not, FN: a true one missed
  host level   the same with the culprits' hosts
A scenario is localized when its verdict names every true rank and no other. A slow link's truth
is its sender (where the shaper acts): a slow path from host A to host B blames A's ranks.
The live column is what the leader published as doctor.* attributes during the fault.

  scripts/doctor_bench.py [build-dir] [--short] [--only name,name] [--keep]
--short: the sample `make test` runs (3 scenarios, shorter phases; exit 1 unless all localized).
Exits 77 (ctest: skipped) with the reason when not root or without ip/tc.
"""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

NETNS_HOSTS = "h0:2,h1:2,h2:2,h3:2"  # ranks 2h and 2h+1 on host h

# name, what, transport, faults (--fault), THESEUS_EMULATE, extra args, true ranks, true hosts
SCENARIOS = [
    ("slow-link", "host 1 -> host 2 shaped to 400 Mbit/s (tc htb)", "netns", "tc-link:1:2", "", [],
     [2, 3], [1]),
    ("slow-nic", "host 2's NIC sends at 400 Mbit/s (tbf on its eth0)", "netns", "tc-nic:2", "", [],
     [4, 5], [2]),
    ("compute-straggler", "rank 5 starts every collective 20 ms late", "shm", "none", "straggle:5:20ms", [],
     [5], [0]),
    ("comm-straggler", "rank 3's sends at 20 MB/s (every link)", "shm", "none", "throttle:3->*:20MB/s", [],
     [3], [0]),
    ("hung-rank", "rank 6 stops (SIGSTOP)", "shm", "hang:6", "", [], [6], [0]),
    ("killed-rank", "rank 1 dies (SIGKILL)", "shm", "kill:1", "", [], [1], [0]),
    ("mismatch", "rank 2 calls allgather instead of allreduce", "shm", "mismatch:2", "", [], [2], [0]),
    ("wrong-count", "rank 7 allreduces 1024 elements fewer", "shm", "count:7", "", [], [7], [0]),
    ("slow-host", "every link of host 1 at 400 Mbit/s (tbf both ways)", "netns", "tc-host:1", "", [],
     [2, 3], [1]),
    ("two-faults", "host 3 -> host 0 shaped, and rank 2 20 ms late", "netns", "tc-link:3:0",
     "straggle:2:20ms", [], [2, 6, 7], [1, 3]),
    ("flapping-link", "host 0 -> host 2 slow 1 s, fine 1 s, ...", "netns", "tc-flap:0:2", "", ["--seconds", "8"],
     [0, 1], [0]),
    ("degrade-recover", "rank 4 20 ms late from 2 s to 5 s, then on time", "shm", "none",
     "straggle:4:20ms@t=2s-5s", ["--seconds", "8"], [4], [0]),
    ("throttled-link", "link 1 -> 6 at 10 MB/s (emulated)", "shm", "none", "throttle:1->6:10MB/s", [], [1], [0]),
]
SHORT = ["compute-straggler", "hung-rank", "slow-nic"]


def skip(why):
    print("doctor-bench: skipped: " + why)
    sys.exit(77)


def run_scenario(build, sc, short, keep):
    name, what, transport, fault, emulate, extra, truth_ranks, truth_hosts = sc
    out = tempfile.mkdtemp(prefix="theseus-doctor-bench-")
    env = dict(os.environ)
    env.update({
        "THESEUS_FLIGHT_RECORDER_ENTRIES": "4096",
        "THESEUS_FLIGHT_RECORDER_DUMP": out + "/fr.%r",
        "THESEUS_STALL_TIMEOUT_MS": "3000",
        "LD_LIBRARY_PATH": os.path.join(build, "lib") + ":" + env.get("LD_LIBRARY_PATH", ""),
    })
    if emulate:
        env["THESEUS_EMULATE"] = emulate
    cmd = [os.path.join(build, "bin", "theseus-run"), "-np", "8", "--keep-going", "--timeout", "90"]
    if transport == "netns":
        cmd += ["--netns", "--hosts", NETNS_HOSTS]
    args = ["--out", out, "--fault", fault] + (["--seconds", "4"] if short else []) + extra
    cmd += ["--", os.path.join(build, "bin", "doctor_bench")] + args
    started = time.time()
    log = open(os.path.join(out, "run.log"), "w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    hung = [int(f.split(":")[1]) for f in fault.split(",") if f.startswith("hang:")]
    while proc.poll() is None:
        time.sleep(0.2)
        # A hung rank never exits: kill it once every other rank wrote its dump.
        dumps = [f for f in os.listdir(out) if f.startswith("fr.") and not f.endswith(".tmp")]
        if hung and len(dumps) >= 8 - len(hung):
            for r in hung:
                try:
                    os.kill(int(open(os.path.join(out, "pid.%d" % r)).read()), signal.SIGKILL)
                except (OSError, ValueError):
                    pass
            hung = []
    log.close()
    seconds = time.time() - started
    verdict_path = os.path.join(out, "verdict.json")
    dumps = sorted(os.path.join(out, f) for f in os.listdir(out) if f.startswith("fr.") and not f.endswith(".tmp"))
    verdict = {"findings": [], "culprits": {"ranks": [], "hosts": []}}
    if dumps:
        r = subprocess.run([os.path.join(build, "bin", "theseus-doctor"), "--json"] + dumps,
                           capture_output=True, text=True)
        if r.returncode == 0:
            verdict = json.loads(r.stdout)
            open(verdict_path, "w").write(r.stdout)
        else:
            print("doctor-bench: %s: theseus-doctor failed: %s" % (name, r.stderr.strip()))
    live = {}
    if os.path.exists(os.path.join(out, "live.json")):
        live = json.load(open(os.path.join(out, "live.json")))
    result = score(sc, verdict, live, len(dumps), seconds)
    if keep or not result["localized"]:
        result["kept"] = out
    else:
        shutil.rmtree(out, ignore_errors=True)
    return result


def score(sc, verdict, live, ndumps, seconds):
    name, what, transport, fault, emulate, extra, truth_ranks, truth_hosts = sc
    ranks = set(verdict["culprits"]["ranks"])
    hosts = set(verdict["culprits"]["hosts"])
    # One host over shared memory: host 0 is the only host and the truth is trivially there.
    tr, th = set(truth_ranks), set(truth_hosts)
    res = {"name": name, "what": what, "transport": transport, "dumps": ndumps, "seconds": seconds,
           "kinds": sorted({f["kind"] for f in verdict["findings"]}),
           "words": [f["words"] for f in verdict["findings"]],
           "ranks": sorted(ranks), "hosts": sorted(hosts), "truth_ranks": truth_ranks, "truth_hosts": truth_hosts,
           "rank_tp": len(ranks & tr), "rank_fp": len(ranks - tr), "rank_fn": len(tr - ranks),
           "host_tp": len(hosts & th), "host_fp": len(hosts - th), "host_fn": len(th - hosts),
           "live": sorted(set(live.get("seen", [])) - {"doctor.culprit.rank", "doctor.culprit.host"}),
           "live_after": live.get("after", [])}
    res["localized"] = res["rank_fn"] == 0 and res["rank_fp"] == 0 and res["host_fn"] == 0 and res["host_fp"] == 0
    # The live verdicts' ranks (performance faults only: hangs and divergence are for the dumps).
    live_ranks = set()
    for name in res["live"]:
        parts = name.split(".")
        if parts[1] == "slow_host":
            live_ranks.update(r for r in range(8) if host_of(transport, r) == int(parts[2]))
        elif parts[1] in ("slow_link", "comm_straggler", "compute_straggler"):
            live_ranks.add(int(parts[2]))
    res["live_scored"] = fault.split(":")[0] not in ("hang", "kill", "mismatch", "count")
    res["live_tp"], res["live_fp"], res["live_fn"] = len(live_ranks & tr), len(live_ranks - tr), len(tr - live_ranks)
    return res


def host_of(transport, rank):
    return rank // 2 if transport == "netns" else 0


def ratio(a, b):
    return "%.1f%%" % (100.0 * a / b) if b else "-"


def report(results):
    print("\n| scenario | transport | fault | doctor's findings | culprit ranks (truth) | culprit hosts (truth) "
          "| localized | live verdict |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print("| %s | %s | %s | %s | %s (%s) | %s (%s) | %s | %s |" % (
            r["name"], r["transport"], r["what"], ", ".join(r["kinds"]) or "none",
            r["ranks"], r["truth_ranks"], r["hosts"], r["truth_hosts"], "yes" if r["localized"] else "**no**",
            ", ".join(x[len("doctor."):] for x in r["live"]) or "-"))
    tot = {k: sum(r[k] for r in results) for k in
           ("rank_tp", "rank_fp", "rank_fn", "host_tp", "host_fp", "host_fn")}
    print("\nlocalized: %d/%d scenarios" % (sum(r["localized"] for r in results), len(results)))
    print("rank level: precision %s, recall %s (TP %d, FP %d, FN %d)" % (
        ratio(tot["rank_tp"], tot["rank_tp"] + tot["rank_fp"]), ratio(tot["rank_tp"], tot["rank_tp"] + tot["rank_fn"]),
        tot["rank_tp"], tot["rank_fp"], tot["rank_fn"]))
    print("host level: precision %s, recall %s (TP %d, FP %d, FN %d)" % (
        ratio(tot["host_tp"], tot["host_tp"] + tot["host_fp"]), ratio(tot["host_tp"], tot["host_tp"] + tot["host_fn"]),
        tot["host_tp"], tot["host_fp"], tot["host_fn"]))
    live = [r for r in results if r["live_scored"]]
    ltp, lfp, lfn = (sum(r[k] for r in live) for k in ("live_tp", "live_fp", "live_fn"))
    print("live verdicts (every doctor.* name the leader published during the fault; %d performance scenarios): "
          "rank level precision %s, recall %s (TP %d, FP %d, FN %d)" % (
              len(live), ratio(ltp, ltp + lfp), ratio(ltp, ltp + lfn), ltp, lfp, lfn))
    for r in results:
        if not r["localized"] or "kept" in r:
            print("\n%s: %s" % (r["name"], "; ".join(r["words"]) or "no finding"))
            if "kept" in r:
                print("    dumps and verdict kept in " + r["kept"])


def main():
    argv = sys.argv[1:]
    build = "build"
    if argv and not argv[0].startswith("--"):
        build = argv.pop(0)
    short = "--short" in argv
    keep = "--keep" in argv
    only = None
    if "--only" in argv:
        only = argv[argv.index("--only") + 1].split(",")
    for tool in ("theseus-run", "doctor_bench", "theseus-doctor"):
        if not os.access(os.path.join(build, "bin", tool), os.X_OK):
            print("doctor-bench: build first (make build): %s/bin/%s is missing" % (build, tool), file=sys.stderr)
            return 2
    if os.geteuid() != 0:
        skip("needs root (network-namespace hosts and tc)")
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            skip("'%s' (iproute2) is missing" % tool)
    names = SHORT if short else [s[0] for s in SCENARIOS]
    if only:
        names = [n for n in names if n in only]
    results = []
    for sc in SCENARIOS:
        if sc[0] not in names:
            continue
        r = run_scenario(build, sc, short, keep)
        print("%-18s %-5s %5.1f s  %s  culprits %s (truth %s)  %s" % (
            r["name"], r["transport"], r["seconds"], "localized" if r["localized"] else "NOT LOCALIZED",
            r["ranks"], r["truth_ranks"], "; ".join(r["words"])[:300]), flush=True)
        results.append(r)
    report(results)
    return 0 if not short or all(r["localized"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
