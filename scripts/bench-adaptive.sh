#!/usr/bin/env bash
# `make bench-adaptive`: adaptivity on real degraded links. Four network-namespace hosts
# (theseus-run --netns, one rank each) over TCP; the kernel's traffic control slows one link
# (htb by destination), one host (tbf on its veth), a link that heals, a link that flaps;
# static against policies/adaptive.json in the same run (tests/bench/adaptive/links_bench.cc).
#
#   scripts/bench-adaptive.sh [build-dir] [--short] [links_bench options...]
#
# Prints each scenario's line, then a Markdown table of the results (docs/benchmarking.md).
# BENCH_SIZES (16M,64M), BENCH_RATE (400mbit), BENCH_SCENARIOS (slow-link,slow-host,flap).
# --short: the sample `make test` runs (adaptive_links test): 16 MiB, slow link then healed,
# checked against lenient goals (a busy CI machine): exit 1 when one fails.
# Needs root, ip and tc; exits 77 (ctest: skipped) with the reason otherwise.
set -uo pipefail

build=build
if [[ $# -gt 0 && $1 != --* ]]; then build=$1; shift; fi
short=0
if [[ ${1:-} == --short ]]; then short=1; shift; fi
bin="$build/bin/adaptive_links_bench"
[[ -x "$bin" && -x "$build/bin/theseus-run" ]] || { echo "bench-adaptive: build first (make build)" >&2; exit 2; }
if [[ $(id -u) -ne 0 ]]; then echo "bench-adaptive: skipped: needs root (network namespaces and tc)"; exit 77; fi
for tool in ip tc; do
  command -v "$tool" >/dev/null || { echo "bench-adaptive: skipped: '$tool' (iproute2) is missing"; exit 77; }
done
export LD_LIBRARY_PATH="$(cd "$build" && pwd)/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

if ((short)); then
  args=(--sizes 16M --scenarios slow-link --pairs 3 --min-ratio 1.5 --max-swaps 3 --max-back-ms 6000 --check)
else
  args=(--sizes "${BENCH_SIZES:-16M,64M}" --scenarios "${BENCH_SCENARIOS:-slow-link,slow-host,flap}"
        --rate "${BENCH_RATE:-400mbit}")
fi
out=$(mktemp)
trap 'rm -f "$out"' EXIT
timeout 1500 "$build/bin/theseus-run" -np 4 --netns -- "$bin" "${args[@]}" "$@" | tee "$out"
status=${PIPESTATUS[0]}
/usr/bin/python3 - "$out" <<'PY'
import json, sys
rows = [json.loads(l[7:]) for l in open(sys.argv[1]) if l.startswith("RESULT ")]
if rows:
    print("\n| scenario | size | static GB/s | adaptive GB/s | ratio | reaction | swaps while degraded | "
          "slow collectives after 1st swap | back after healing | logs identical | goals |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
for r in rows:
    ratio = r["adaptive_busbw"] / r["static_busbw"] if r["static_busbw"] > 0 else 0
    flap = r["scenario"] == "flap"
    reaction = "-" if flap else ("never" if r["reaction_collectives"] < 0 else
                                 "%.0f ms / %d coll" % (r["reaction_ms"], r["reaction_collectives"]))
    swaps = "%d (dwell allows %d)" % (r["flap_swaps"], r["flap_bound"]) if flap else str(r["swaps"])
    back = "-" if flap else ("never" if r["back_ms"] < 0 else "%.0f ms" % r["back_ms"])
    print("| %s | %d MiB | %.3f | %.3f | %.2fx | %s | %s | %s | %s | %s | %s |" % (
        r["scenario"], r["bytes"] >> 20, r["static_busbw"], r["adaptive_busbw"], ratio, reaction, swaps,
        "-" if flap else r["slow_after_swap"], back, "yes" if r["logs_identical"] else "NO", r["goals"]))
PY
exit "$status"
