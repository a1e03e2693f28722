# Time-boxed phases for the hardware checks (gpu-check.sh, rdma-check.sh): sourced after
# LOG_DIR is set. phase NAME SECONDS COMMAND... runs the command with its output in
# $LOG_DIR/NAME.log, shows the log's tail, and adds a line to SUMMARY (and to
# $LOG_DIR/NAME.summary, so that a phase run in the background still reports).
# PHASE_DEADLINE (a value of $SECONDS, optional) caps every phase: a device lease is short,
# so a phase that would start past it is skipped and one that would run past it is cut.
# PHASE_ONLY (optional, names separated by spaces) runs only those phases: a rerun of what failed.
declare -a SUMMARY

phase() {  # name, timeout seconds, command...
  local name=$1 limit=$2
  shift 2
  local line
  if [[ -n ${PHASE_ONLY:-} && " $PHASE_ONLY " != *" $name "* ]]; then
    line=$(printf '%-16s skipped: not selected (PHASE_ONLY)' "$name")
    SUMMARY+=("$line"); echo "$line" > "$LOG_DIR/$name.summary"
    return 0
  fi
  if [[ -n ${PHASE_DEADLINE:-} ]]; then
    local left=$((PHASE_DEADLINE - SECONDS))
    if ((left < 10)); then
      line=$(printf '%-16s not run: out of time (PHASE_DEADLINE)' "$name")
      SUMMARY+=("$line"); echo "$line" > "$LOG_DIR/$name.summary"
      return 1
    fi
    ((limit > left)) && limit=$left
  fi
  echo "=== $name"
  local start=$SECONDS
  timeout -k 5 "$limit" "$@" > "$LOG_DIR/$name.log" 2>&1
  local rc=$?
  tail -n 40 "$LOG_DIR/$name.log"
  line=$(printf '%-16s rc=%-3s %4ss' "$name" "$rc" "$((SECONDS - start))")
  SUMMARY+=("$line"); echo "$line" > "$LOG_DIR/$name.summary"
  return $rc
}
