#!/bin/sh
# Fail-open hold release (operators' copy of revive.failopen.GUARD_SCRIPT).
#
#   scripts/release-hold.sh JOB_ID [AFTER_S] [SLURM_CONF]
#
# Detaches (new session, stdio on /dev/null), waits AFTER_S seconds (default 30), then runs
# `scontrol release JOB_ID` only if the job is still PENDING with
# Reason=job_requeued_in_held_state (the reason `scontrol requeuehold` sets, i.e. held by Revive).
# Prints the guard's pid. Needs only sh, setsid and scontrol. See docs/operations/fail-open.md.
set -eu
job="${1:?usage: release-hold.sh JOB_ID [AFTER_S] [SLURM_CONF]}"
after="${2:-30}"
conf="${3:-}"
case "$job" in *[!0-9_]*|"") echo "not a Slurm job id: $job" >&2; exit 2 ;; esac
case "$after" in *[!0-9.]*|"") echo "not a number of seconds: $after" >&2; exit 2 ;; esac

guard='
sleep "$2"
if [ -n "$3" ]; then SLURM_CONF="$3"; export SLURM_CONF; fi
out=$(scontrol show job -o "$1" 2>/dev/null) || exit 0
case "$out" in *"JobState=PENDING"*) ;; *) exit 0 ;; esac
case "$out" in *"Reason=job_requeued_in_held_state"*) ;; *) exit 0 ;; esac
if scontrol release "$1"; then
  command -v logger >/dev/null 2>&1 && logger -t revive-release-hold "released held job $1"
fi
exit 0
'
setsid sh -c "$guard" revive-release-hold "$job" "$after" "$conf" </dev/null >/dev/null 2>&1 &
echo $!
