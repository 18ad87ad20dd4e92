#!/usr/bin/env bash
# temporal-down.sh - stop the Temporal dev server started by temporal-up.sh
# (by its pid file under REVIVE_TEMPORAL_DIR, default /tmp/revive-temporal).
# The SQLite file is kept; --purge deletes the state dir. Safe when nothing runs.
set -uo pipefail
PURGE=0
for a in "$@"; do
  case "$a" in --purge) PURGE=1 ;; *) echo "usage: $0 [--purge]" >&2; exit 2 ;; esac
done
DIR="${REVIVE_TEMPORAL_DIR:-/tmp/revive-temporal}"
[ -d "$DIR" ] || { echo "temporal-down.sh: $DIR does not exist; nothing to do"; exit 0; }
pid_alive() {
  local pid="$1" st
  [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
  st="$(sed -E 's/^[0-9]+ \(.*\) ([A-Za-z]).*/\1/' "/proc/$pid/stat" 2>/dev/null)" || return 1
  [ "$st" != Z ] && [ "$st" != X ]
}
pid="$(cat "$DIR/server.pid" 2>/dev/null || true)"
if pid_alive "$pid"; then
  kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 1 50); do pid_alive "$pid" || break; sleep 0.2; done
  pid_alive "$pid" && { echo "temporal-down.sh: SIGKILL $pid"; kill -KILL "$pid" 2>/dev/null; }
  echo "temporal-down.sh: stopped server $pid (state kept in $DIR)"
else
  echo "temporal-down.sh: no server running from $DIR"
fi
rm -f "$DIR/server.pid" "$DIR/settings"
[ "$PURGE" = 1 ] && rm -rf "${DIR:?}" && echo "temporal-down.sh: removed $DIR"
exit 0
