#!/usr/bin/env bash
# `make demo-recovery`: a job that survives losing a rank. Four ranks of tools/theseus-recovery-demo
# under theseus-run --keep-going run a loop of checked allreduces; one rank is SIGKILLed at step 20;
# the survivors' next allreduce fails naming it, they shrink it away (ncclCommShrink with
# NCCL_SHRINK_ABORT) and finish the loop on three ranks. See docs/reliability.md.
#   scripts/recovery-demo.sh [build-dir] [nranks]
set -euo pipefail
build=${1:-build}
nranks=${2:-4}
demo="$build/bin/theseus-recovery-demo"
run="$build/bin/theseus-run"
for tool in "$demo" "$run"; do
  [[ -x "$tool" ]] || { echo "recovery-demo.sh: $tool is missing; build first (make build)" >&2; exit 1; }
done
victim=$((nranks - 2))
echo "== $nranks ranks; rank $victim is killed (SIGKILL) at step 20 of 60"
set +e
out=$("$run" -np "$nranks" --keep-going --timeout 120 -- "$demo" --steps 60 --kill-rank "$victim" --kill-step 20 2>&1)
status=$?
set -e
echo "$out"
# theseus-run reports the killed rank's status (137); the job itself must have finished.
if [[ $status -ne 137 ]] || ! grep -q '^done: 60 steps' <<< "$out"; then
  echo "recovery-demo.sh: the job did not recover (theseus-run exit $status)" >&2
  exit 1
fi
echo "== recovered: the survivors finished the job without rank $victim"
