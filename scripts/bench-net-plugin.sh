#!/usr/bin/env bash
# `make bench-net`: Theseus' TCP network through the NCCL net-plugin backend
# (libnccl-net-theseus.so) against the built-in socket backend, between
# network-namespace hosts (theseus-run --netns; needs root), in one run.
#
#   scripts/bench-net-plugin.sh [build-dir]
#
# For each rank count in BENCH_RANKS ("2 4"), BENCH_ROUNDS (5) interleaved
# rounds of all_reduce_perf at BENCH_BYTES (64M), built-in then plugin, each
# BENCH_ITERS (10) timed iterations; prints every round's out-of-place busbw
# and the ratio of the medians (plugin / built-in). Exit 1 when a run failed.
set -uo pipefail

build=${1:-build}
ranks=${BENCH_RANKS:-"2 4"}
rounds=${BENCH_ROUNDS:-5}
size=${BENCH_BYTES:-64M}
iters=${BENCH_ITERS:-10}
plugin="$(cd "$build" && pwd)/lib/libnccl-net-theseus.so"
[[ -x "$build/bin/theseus-run" && -f "$plugin" ]] || { echo "bench-net: build first (make build)" >&2; exit 2; }
export LD_LIBRARY_PATH="$(cd "$build" && pwd)/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

busbw() {  # ranks, extra theseus-run args...
  local n=$1; shift
  timeout 300 "$build/bin/theseus-run" -np "$n" --netns "$@" -- "$build/bin/all_reduce_perf" -b "$size" -e "$size" \
    -c 0 -n "$iters" -w 2 2>&1 | awk '$1 ~ /^[0-9]+$/ && NF >= 12 { print $8; exit }'
}
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "nan"; else print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }

status=0
for n in $ranks; do
  builtin=() viaplugin=()
  for ((r = 1; r <= rounds; ++r)); do
    a=$(busbw "$n") b=$(busbw "$n" -x NCCL_NET_PLUGIN="$plugin")
    [[ -n "$a" && -n "$b" ]] || { echo "bench-net: a run with $n ranks failed" >&2; status=1; continue; }
    builtin+=("$a") viaplugin+=("$b")
    printf '%d ranks, round %d: built-in socket %s GB/s, net plugin %s GB/s\n' "$n" "$r" "$a" "$b"
  done
  ma=$(printf '%s\n' "${builtin[@]}" | median) mb=$(printf '%s\n' "${viaplugin[@]}" | median)
  printf '%d ranks, %s allreduce busbw, medians: built-in %s GB/s, plugin %s GB/s, plugin/built-in %s\n' "$n" "$size" \
    "$ma" "$mb" "$(awk -v a="$ma" -v b="$mb" 'BEGIN { if (a > 0) printf "%.3f", b / a; else print "nan" }')"
done
exit $status
