#!/usr/bin/env bash
# =============================================================================
# sshd-up.sh - start a real OpenSSH login node for Revive's local testbed.
#
#   scripts/sshd-up.sh               (as root; Debian 12)
#   scripts/sshd-down.sh [--purge]
#
# One `sshd -D` of its own (Debian's openssh-server binary, started by absolute
# path under setsid, no systemd) on 127.0.0.1:PORT, with its own host key,
# client key, authorized_keys, known_hosts and sshd_config, all under
# DIR/ssh/. Every testbed node (node1..nodeN are `slurmd -N` processes on this
# machine) is "reachable" through the same sshd: DIR/ssh/nodes.yaml maps each
# node to 127.0.0.1:PORT, so a node connection made with the login node as a
# jump host (asyncssh tunnel=) lands on this sshd again. Nothing is written to
# /etc apart from what apt-get does when openssh-server is missing (its
# postinst makes /etc/ssh host keys, which this sshd does not use); /run/sshd
# (sshd's privilege-separation dir) is created when missing.
#
# The login user is the user running this script (root): `PermitRootLogin
# prohibit-password`, key only, `AllowUsers <that user>`. The remote PATH is
# DIR/ssh/bin first (empty; tests put stand-in commands there), then the
# usual system directories (sshd_config SetEnv; PermitUserEnvironment no).
#
# Environment (all optional):
#   REVIVE_CLUSTER_DIR=/tmp/revive-cluster   files go to DIR/ssh/
#   REVIVE_SSHD_PORT=2222                    sshd listens on 127.0.0.1:PORT
#   REVIVE_SLURM_NODES=4                     node1..nodeN in nodes.yaml
#   REVIVE_INSTALL=1                         0 = never call apt-get
#   REVIVE_WAIT=30                           seconds for sshd to answer
#
# Idempotent: an sshd of this dir that runs with the same settings and lets
# the client key log in is left alone (keys are kept across restarts, so
# known_hosts stays valid). A stale or different one is stopped first.
# =============================================================================
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
T0=$(date +%s%N)
log() { local ms=$(( ($(date +%s%N) - T0) / 1000000 )); printf '[sshd-up %3d.%ds] %s\n' $((ms/1000)) $((ms%1000/100)) "$*"; }
die() { echo "sshd-up.sh: ERROR: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root: apt-get installs openssh-server and sshd needs root to switch to the login user (try: sudo $0)"

DIR="${REVIVE_CLUSTER_DIR:-/tmp/revive-cluster}"
PORT="${REVIVE_SSHD_PORT:-2222}"
NODES="${REVIVE_SLURM_NODES:-4}"
INSTALL="${REVIVE_INSTALL:-1}"
WAIT="${REVIVE_WAIT:-30}"
LOGIN_USER="$(id -un)"
case "$PORT" in ''|*[!0-9]*) die "REVIVE_SSHD_PORT must be a port number, got '$PORT'" ;; esac
[ "$PORT" -ge 1 ] && [ "$PORT" -le 65535 ] || die "REVIVE_SSHD_PORT out of range: $PORT"
case "$NODES" in ''|*[!0-9]*) die "REVIVE_SLURM_NODES must be a number, got '$NODES'" ;; esac

mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd -P)"
if [ -n "$(ls -A "$DIR")" ] && [ ! -f "$DIR/.revive-cluster" ]; then
  die "$DIR is not empty and was not created by cluster-up.sh or sshd-up.sh; refusing to use it (set REVIVE_CLUSTER_DIR)"
fi
# the same marker cluster-up.sh writes: it accepts the dir afterwards
[ -f "$DIR/.revive-cluster" ] || echo "created by scripts/sshd-up.sh" > "$DIR/.revive-cluster"
S="$DIR/ssh"
install -d -m 0700 "$S"
install -d -m 0755 "$S/bin"
SETTINGS="port=$PORT nodes=$NODES user=$LOGIN_USER dir=$S"

# ------------------------------------------------------------------ packages --
if ! dpkg-query -W -f='${Status}' openssh-server 2>/dev/null | grep -q 'install ok installed' \
   || [ ! -x /usr/sbin/sshd ]; then
  [ "$INSTALL" = 1 ] || die "missing Debian package: openssh-server (REVIVE_INSTALL=0; install it with apt-get)"
  command -v apt-get >/dev/null || die "missing Debian package openssh-server, and apt-get is not available"
  log "installing: openssh-server"
  APTLOG="$S/apt.log"
  own_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then   # keep apt from starting the packaged ssh service
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod 755 /usr/sbin/policy-rc.d; own_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  ok=0
  if apt-get install -y -qq -o DPkg::Lock::Timeout=120 --no-install-recommends openssh-server >"$APTLOG" 2>&1; then ok=1
  else
    apt-get update -qq -o DPkg::Lock::Timeout=120 >>"$APTLOG" 2>&1 || true
    apt-get install -y -qq -o DPkg::Lock::Timeout=120 --no-install-recommends openssh-server >>"$APTLOG" 2>&1 && ok=1
  fi
  [ $own_policy = 1 ] && rm -f /usr/sbin/policy-rc.d
  [ $ok = 1 ] || { tail -15 "$APTLOG" >&2; die "apt-get install openssh-server failed (full log: $APTLOG)"; }
  log "installed openssh-server"
fi
SSHD="$(PATH="$PATH:/usr/sbin:/sbin" command -v sshd || true)"
[ -n "$SSHD" ] || die "sshd not found after installing openssh-server"
case "$SSHD" in /*) ;; *) die "sshd resolved to a relative path ($SSHD); sshd must be started by absolute path" ;; esac
command -v ssh >/dev/null || die "the ssh client is missing (Debian package openssh-client)"

# ------------------------------------------------------------------- helpers --
pid_alive() {  # running and not a zombie
  local pid="$1" st
  [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
  st="$(sed -E 's/^[0-9]+ \(.*\) ([A-Za-z]).*/\1/' "/proc/$pid/stat" 2>/dev/null)" || return 1
  [ "$st" != Z ] && [ "$st" != X ]
}
ours() {  # the pid in sshd.pid is an sshd started with THIS config
  local pid
  pid="$(cat "$S/sshd.pid" 2>/dev/null)" || return 1
  pid_alive "$pid" && tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "-f $S/sshd_config"
}
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
login_ok() {
  ssh -F none -n -T -p "$PORT" -i "$S/id_ed25519" \
      -o BatchMode=yes -o IdentitiesOnly=yes -o StrictHostKeyChecking=yes \
      -o UserKnownHostsFile="$S/known_hosts" -o GlobalKnownHostsFile=/dev/null \
      -o ConnectTimeout=5 "$LOGIN_USER@127.0.0.1" true
}
summary() {
  cat <<SUM
login node (OpenSSH $("$SSHD" -V 2>&1 | awk '{print $1}' | sed 's/^OpenSSH_//;s/,$//')) is up: $LOGIN_USER@127.0.0.1:$PORT (dir: $S)
  key        : $S/id_ed25519
  known_hosts: $S/known_hosts
  nodes      : $S/nodes.yaml (node1..node$NODES -> 127.0.0.1:$PORT, through the login node)
  log        : $S/sshd.log
  try        : ssh -F none -p $PORT -i $S/id_ed25519 -o UserKnownHostsFile=$S/known_hosts $LOGIN_USER@127.0.0.1 hostname
SUM
}

# --------------------------------------------------- already up? (idempotent) --
if [ -f "$S/settings" ] && [ "$(cat "$S/settings")" = "$SETTINGS" ] && ours && login_ok; then
  log "sshd of $S already running on 127.0.0.1:$PORT with the same settings; nothing to do"
  summary
  exit 0
fi
if [ -f "$S/sshd.pid" ]; then
  log "stale or different sshd in $S; stopping it first"
  REVIVE_CLUSTER_DIR="$DIR" "$HERE/sshd-down.sh" >/dev/null
fi
port_in_use "$PORT" && die "port $PORT on 127.0.0.1 is already in use (another sshd? stop it, or set REVIVE_SSHD_PORT)"

# ---------------------------------------------------------------------- keys --
[ -s "$S/ssh_host_ed25519_key" ] || ssh-keygen -q -t ed25519 -N '' -C "revive-testbed-host" -f "$S/ssh_host_ed25519_key"
[ -s "$S/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C "revive-testbed-client" -f "$S/id_ed25519"
chmod 0600 "$S/ssh_host_ed25519_key" "$S/id_ed25519"
# restrict: no pty, no agent/X11 forwarding, no ~/.ssh/rc; port-forwarding back
# on because nodes are reached with this login node as the jump host
echo "restrict,port-forwarding $(cat "$S/id_ed25519.pub")" > "$S/authorized_keys"
HOSTPUB="$(awk '{print $1" "$2}' "$S/ssh_host_ed25519_key.pub")"
printf '[127.0.0.1]:%s %s\n[localhost]:%s %s\n' "$PORT" "$HOSTPUB" "$PORT" "$HOSTPUB" > "$S/known_hosts"
chmod 0644 "$S/authorized_keys" "$S/known_hosts"
log "keys ready ($(ssh-keygen -l -f "$S/ssh_host_ed25519_key.pub" | awk '{print $2}'))"

# -------------------------------------------------------------------- config --
cat > "$S/sshd_config" <<CONF
# Generated by scripts/sshd-up.sh: Revive's local login node (TEST only).
Port $PORT
ListenAddress 127.0.0.1
HostKey $S/ssh_host_ed25519_key
PidFile $S/sshd.pid
AuthorizedKeysFile $S/authorized_keys
AuthenticationMethods publickey
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
HostbasedAuthentication no
PermitRootLogin prohibit-password
AllowUsers $LOGIN_USER
# the files live under /tmp (world-writable): StrictModes would refuse them
StrictModes no
UsePAM no
PermitUserEnvironment no
SetEnv PATH=$S/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
# one multiplexed connection carries many channels (SFTP, commands, tunnels)
MaxSessions 64
MaxStartups 64:30:128
AllowTcpForwarding local
PermitOpen any
GatewayPorts no
AllowAgentForwarding no
AllowStreamLocalForwarding no
X11Forwarding no
PermitTunnel no
PrintMotd no
UseDNS no
ClientAliveInterval 15
ClientAliveCountMax 4
LogLevel VERBOSE
Subsystem sftp internal-sftp
CONF
chmod 0644 "$S/sshd_config"
install -d -m 0755 /run/sshd
"$SSHD" -t -f "$S/sshd_config" 2>"$S/sshd-t.err" || die "sshd rejects $S/sshd_config: $(cat "$S/sshd-t.err")"
rm -f "$S/sshd-t.err"

# --------------------------------------------------------------------- start --
rm -f "$S/sshd.pid"
setsid "$SSHD" -D -f "$S/sshd_config" -E "$S/sshd.log" </dev/null >>"$S/sshd.out" 2>&1 &
SPID=$!
end=$(( $(date +%s) + WAIT ))
until login_ok >/dev/null 2>&1; do
  pid_alive "$SPID" || { tail -5 "$S/sshd.log" "$S/sshd.out" >&2 2>/dev/null; die "sshd exited at start (see $S/sshd.log)"; }
  [ "$(date +%s)" -lt "$end" ] || { tail -5 "$S/sshd.log" >&2; die "sshd does not let the client key in after ${WAIT}s (see $S/sshd.log)"; }
  sleep 0.1
done
# sshd -D writes PidFile itself; make sure it names the listener we started
[ "$(cat "$S/sshd.pid" 2>/dev/null)" = "$SPID" ] || echo "$SPID" > "$S/sshd.pid"
log "sshd up on 127.0.0.1:$PORT (pid $SPID), key login works"

# ----------------------------------------------------------------- nodes.yaml --
{
  echo "# Generated by scripts/sshd-up.sh: node -> host:port, all through the login node."
  echo "# Every testbed node is this machine, so all are the same sshd on 127.0.0.1."
  echo "login: {host: 127.0.0.1, port: $PORT, user: $LOGIN_USER, key_file: $S/id_ed25519, known_hosts: $S/known_hosts}"
  echo "nodes:"
  for i in $(seq 1 "$NODES"); do echo "  node$i: {host: 127.0.0.1, port: $PORT}"; done
} > "$S/nodes.yaml.tmp"
mv "$S/nodes.yaml.tmp" "$S/nodes.yaml"
echo "$SETTINGS" > "$S/settings"
log "done"
summary
