#!/usr/bin/env bash
# `make run`: the adaptive-schedule demo. Four rank processes of tools/theseus-demo
# (launched with theseus-run) run a training-like loop of allreduces on host
# memory; after a healthy phase, link 0->1 is throttled to 10% (THESEUS_EMULATE)
# for a while, then it heals. The same scenario runs twice: with the static
# policy (the fixed size-threshold choice) and with policies/adaptive.json. The
# output shows, per phase, time per step and bus bandwidth, the decision tables
# that took effect (collective number, schedule, why), and a side-by-side summary.
#   scripts/demo.sh [build-dir] [nranks]
# Environment: DEMO_BYTES (default 8 MiB per allreduce), DEMO_STEPS (healthy,degraded,healed;
# default 20,60,260), DEMO_COMPUTE_MS (the compute part of each training step, default 20),
# DEMO_THROTTLE (default 10%). The policy's ages are in milliseconds (adaptive.json: a link
# not measured for 5 s gets re-tested), so the healed phase lasts a few seconds.
# It ends with theseus-doctor's verdict on the ranks' flight recorders of each run's degraded
# phase, and a PNG timeline (busbw per step, the throttle window shaded, the adaptive run's swap
# marked, static and adaptive side by side; gnuplot) in DEMO_OUT (default <build>/demo).
set -euo pipefail
build=${1:-build}
nranks=${2:-4}
demo="$build/bin/theseus-demo"
run="$build/bin/theseus-run"
root=$(cd "$(dirname "$0")/.." && pwd)
for tool in "$demo" "$run"; do
  if [[ ! -x "$tool" ]]; then
    echo "demo.sh: $tool is missing; build first (make build)" >&2
    exit 1
  fi
done
bytes=${DEMO_BYTES:-$((8 << 20))}
steps=${DEMO_STEPS:-20,60,260}
compute=${DEMO_COMPUTE_MS:-20}
throttle=${DEMO_THROTTLE:-10%}
outdir=${DEMO_OUT:-$build/demo}
mkdir -p "$outdir"
rm -f "$outdir"/*.fr.* "$outdir"/*.steps "$outdir"/*.swap
IFS=, read -r healthy degraded healed <<< "$steps"
window="seq=$healthy-$((healthy + degraded))"
emulate="throttle:0->1:$throttle@$window"
echo "== Theseus adaptive demo: $nranks ranks on this host, allreduce of $((bytes >> 20)) MiB per step"
echo "   steps: $healthy healthy, $degraded with link 0->1 at $throttle (THESEUS_EMULATE=\"$emulate\"), $healed healed;"
echo "   each step computes for $compute ms, then allreduces"
echo "   load: $(uptime | sed 's/.*load average/load average/')"
summaries=()
for policy in static "$root/policies/adaptive.json"; do
  label=$([[ $policy == static ]] && echo static || echo adaptive)
  echo
  echo "== run with THESEUS_POLICY=$policy"
  out=$(THESEUS_POLICY="$policy" THESEUS_EMULATE="$emulate" \
        "$run" -np "$nranks" --timeout 120 -- "$demo" --bytes "$bytes" --steps "$steps" --compute-ms "$compute" --label "$label" --out "$outdir" 2>&1) || {
    echo "$out"
    echo "demo.sh: the $label run failed" >&2
    exit 1
  }
  echo "$out" | grep -v '^SUMMARY'
  summaries+=("$(echo "$out" | grep '^SUMMARY')")
done
echo
echo "== busbw (GB/s) side by side"
printf "  %-9s %10s %10s %10s\n" policy healthy degraded healed
for s in "${summaries[@]}"; do
  read -r _ label b0 b1 b2 <<< "$s"
  printf "  %-9s %10s %10s %10s\n" "$label" "$b0" "$b1" "$b2"
done
read -r _ _ _ sd _ <<< "${summaries[0]}"
read -r _ _ _ ad _ <<< "${summaries[1]}"
awk -v s="$sd" -v a="$ad" 'BEGIN { if (s > 0) printf "  with link 0->1 degraded, the adaptive policy moves %.1fx the bytes of the static one\n", a / s }'

for label in static adaptive; do
  echo
  echo "== theseus-doctor on the $label run's degraded phase ($outdir/$label.fr.*)"
  "$build/bin/theseus-doctor" "$outdir"/"$label".fr.* | sed 's/^/  /' || true
done
if command -v gnuplot >/dev/null; then
  swap=$(cat "$outdir/adaptive.swap" 2>/dev/null || echo -1)
  if gnuplot -e "dir='$outdir'; t0=$healthy; t1=$((healthy + degraded)); swap=${swap:--1}; outfile='$outdir/timeline.png'" \
       "$root/scripts/plot_demo.gnuplot"; then
    echo
    echo "== timeline: $outdir/timeline.png (busbw per step, throttle window shaded, swap marked)"
  fi
else
  echo "demo.sh: gnuplot is missing (scripts/setup-deps.sh installs it): no timeline" >&2
fi
