#!/usr/bin/env bash
# =============================================================================
# cluster-down.sh - stop the local Slurm test cluster started by cluster-up.sh.
#
#   scripts/cluster-down.sh [--purge]     (REVIVE_CLUSTER_DIR, default /tmp/revive-cluster)
#
# Cancels every job, `scontrol shutdown` (slurmctld + all slurmd), then stops
# slurmrestd and munged by pid file. Leftovers are killed only when they belong
# to THIS cluster: pids from DIR/run/*.pid, processes whose environment carries
# REVIVE_CLUSTER_DAEMON=DIR (set by cluster-up.sh, inherited by slurmstepd), and
# their descendants. Safe to run when nothing runs. --purge also deletes DIR.
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
[ -d "$DIR" ] || { echo "cluster-down.sh: $DIR does not exist; nothing to do"; exit 0; }
DIR="$(cd "$DIR" && pwd -P)"
export SLURM_CONF="$DIR/etc/slurm.conf"
unset SLURM_JWT || true
T0=$(date +%s%N)
log() { local ms=$(( ($(date +%s%N) - T0) / 1000000 )); printf '[cluster-down %3d.%ds] %s\n' $((ms/1000)) $((ms%1000/100)) "$*"; }

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
    sleep 0.2
  done
}
children_of() {
  local tree queue="$*" out="" p c
  tree="$(for s in /proc/[0-9]*/stat; do sed -E 's/^([0-9]+) \(.*\) [A-Za-z] ([0-9]+) .*/\2 \1/' "$s" 2>/dev/null; done)"
  while [ -n "${queue// }" ]; do
    set -- $queue; p="$1"; shift; queue="$*"
    for c in $(awk -v pp="$p" '$1==pp {print $2}' <<<"$tree"); do out="$out $c"; queue="$queue $c"; done
  done
  echo $out
}
marked_pids() {
  local e pid
  for e in /proc/[0-9]*/environ; do
    pid="${e#/proc/}"; pid="${pid%/environ}"
    [ "$pid" = $$ ] && continue
    { tr '\0' '\n' < "$e"; } 2>/dev/null | grep -qx "REVIVE_CLUSTER_DAEMON=$DIR" && echo "$pid"
  done
}

shutdown_sent=0
if [ -f "$DIR/run/slurmctld.pid" ] && pid_alive "$(cat "$DIR/run/slurmctld.pid")" && \
   timeout 10 scontrol ping 2>/dev/null | grep -q 'is UP'; then
  jobs="$(squeue -h -o %A 2>/dev/null | sort -u | tr '\n' ' ')"
  if [ -n "${jobs// }" ]; then
    log "cancelling jobs: $jobs"
    scancel $jobs 2>/dev/null || true
    end=$(( $(date +%s) + 15 ))
    while [ -n "$(squeue -h -t R,CG,S,CF,SO,ST 2>/dev/null)" ] && [ "$(date +%s)" -lt "$end" ]; do sleep 0.3; done
  fi
  log "scontrol shutdown"
  timeout 10 scontrol shutdown >/dev/null 2>&1 && shutdown_sent=1
fi

daemons=(); munge_pid=""
for f in "$DIR"/run/*.pid; do
  [ -f "$f" ] || continue
  p="$(cat "$f" 2>/dev/null)"
  pid_alive "$p" || continue
  case "$(basename "$f")" in
    munged.pid) munge_pid="$p" ;;
    slurmrestd.pid) kill -TERM "$p" 2>/dev/null; daemons+=("$p") ;;
    *) [ "$shutdown_sent" = 1 ] || kill -TERM "$p" 2>/dev/null; daemons+=("$p") ;;
  esac
done
if [ ${#daemons[@]} -gt 0 ]; then
  left="$(wait_gone 10 "${daemons[@]}")" || true
  if [ -n "$left" ]; then
    log "SIGTERM:$left"; kill -TERM $left 2>/dev/null
    left="$(wait_gone 5 $left)" || { log "SIGKILL:$left"; kill -KILL $left 2>/dev/null; }
  fi
fi

extra="$(marked_pids | grep -vx "${munge_pid:-none}" | tr '\n' ' ')"
if [ -n "${extra// }" ]; then
  all="$extra $(children_of $extra | tr '\n' ' ')"
  log "killing leftover processes of this cluster:$all"
  kill -KILL $all 2>/dev/null
  wait_gone 5 $all >/dev/null
fi

if [ -n "$munge_pid" ]; then
  kill -TERM "$munge_pid" 2>/dev/null
  wait_gone 5 "$munge_pid" >/dev/null || kill -KILL "$munge_pid" 2>/dev/null
fi
rm -f "$DIR"/run/*.pid "$DIR/run/settings" "$DIR/munge/munge.socket.2"* 2>/dev/null

if [ "$PURGE" = 1 ]; then
  if [ -f "$DIR/.revive-cluster" ]; then rm -rf "${DIR:?}"; log "stopped; removed $DIR"
  else log "stopped; NOT removing $DIR (no .revive-cluster marker)"; fi
else
  log "stopped (logs in $DIR/log)"
fi
