#!/usr/bin/env bash
# =============================================================================
# sshd-down.sh - stop the login-node sshd started by sshd-up.sh.
#
#   scripts/sshd-down.sh [--purge]     (REVIVE_CLUSTER_DIR, default /tmp/revive-cluster)
#
# Stops the sshd listener named by DIR/ssh/sshd.pid (only when it is an sshd
# started with DIR/ssh/sshd_config) and its session processes (children). Safe to
# run when nothing runs. --purge also deletes DIR/ssh (and DIR itself when
# sshd-up.sh created it and nothing else is left in it). The Slurm cluster in
# the same DIR is not touched.
# =============================================================================
set -uo pipefail

PURGE=0
for a in "$@"; do
  case "$a" in
    --purge) PURGE=1 ;;
    *) echo "usage: $0 [--purge]" >&2; exit 2 ;;
  esac
done
DIR="${REVIVE_CLUSTER_DIR:-/tmp/revive-cluster}"
[ -d "$DIR/ssh" ] || { echo "sshd-down.sh: $DIR/ssh does not exist; nothing to do"; exit 0; }
DIR="$(cd "$DIR" && pwd -P)"
S="$DIR/ssh"
T0=$(date +%s%N)
log() { local ms=$(( ($(date +%s%N) - T0) / 1000000 )); printf '[sshd-down %3d.%ds] %s\n' $((ms/1000)) $((ms%1000/100)) "$*"; }

pid_alive() {
  local pid="$1" st
  [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
  st="$(sed -E 's/^[0-9]+ \(.*\) ([A-Za-z]).*/\1/' "/proc/$pid/stat" 2>/dev/null)" || return 1
  [ "$st" != Z ] && [ "$st" != X ]
}
wait_gone() {  # wait_gone <seconds> pid...; prints the survivors and fails if any
  local end=$(( $(date +%s) + $1 )); shift
  local p left
  while :; do
    left=""
    for p in "$@"; do pid_alive "$p" && left="$left $p"; done
    [ -z "$left" ] && return 0
    [ "$(date +%s)" -ge "$end" ] && { echo "$left"; return 1; }
    sleep 0.1
  done
}
children_of() {  # all descendants of the given pids
  local tree queue="$*" out="" p c
  tree="$(for s in /proc/[0-9]*/stat; do sed -E 's/^([0-9]+) \(.*\) [A-Za-z] ([0-9]+) .*/\2 \1/' "$s" 2>/dev/null; done)"
  while [ -n "${queue// }" ]; do
    set -- $queue; p="$1"; shift; queue="$*"
    for c in $(awk -v pp="$p" '$1==pp {print $2}' <<<"$tree"); do out="$out $c"; queue="$queue $c"; done
  done
  echo $out
}

pid="$(cat "$S/sshd.pid" 2>/dev/null || true)"
if [ -n "$pid" ] && pid_alive "$pid"; then
  if tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "-f $S/sshd_config"; then
    kids="$(children_of "$pid")"
    log "stopping sshd (pid $pid${kids:+, sessions:$kids})"
    kill -TERM "$pid" $kids 2>/dev/null
    left="$(wait_gone 5 "$pid" $kids)" || { log "SIGKILL:$left"; kill -KILL $left 2>/dev/null; wait_gone 3 $left >/dev/null; }
  else
    log "pid $pid in $S/sshd.pid is not this dir's sshd; leaving it alone"
  fi
else
  log "sshd not running"
fi
rm -f "$S/sshd.pid" "$S/settings"

if [ "$PURGE" = 1 ]; then
  rm -rf "${S:?}"
  if [ "$(ls -A "$DIR")" = ".revive-cluster" ] && grep -q sshd-up "$DIR/.revive-cluster" 2>/dev/null; then
    rm -rf "${DIR:?}"; log "stopped; removed $DIR"
  else
    log "stopped; removed $S"
  fi
else
  log "stopped (log in $S/sshd.log)"
fi
