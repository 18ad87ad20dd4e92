#!/usr/bin/env bash
# =============================================================================
# cluster-up.sh - start Revive's local Slurm 22.05 test cluster on ONE machine.
#
#   scripts/cluster-up.sh            (as root; Debian 12)
#   source "${REVIVE_CLUSTER_DIR:-/tmp/revive-cluster}/env.sh"
#   scripts/cluster-down.sh
#
# One munged, one slurmctld, four real `slurmd -N nodeN` (all on 127.0.0.1, one
# port each), fake `gpu` GRES (symlinks to /dev/null), and slurmrestd (JWT) on
# 127.0.0.1. No systemd, no cgroups, no slurmdbd. Everything (configs, keys,
# state, spool, logs, pid files) lives under the cluster dir; nothing is written
# to /etc (apart from what apt-get does when packages are missing).
#
# Written for this project; the approach (slurmd -N per node, per-node Port=,
# %n in spool/pid/log paths, cred_expire=5, SLURM_JWT=daemon for slurmrestd)
# follows a recipe verified on Debian 12 with Slurm 22.05.8.
#
# Environment (all optional):
#   REVIVE_CLUSTER_DIR=/tmp/revive-cluster   cluster dir
#   REVIVE_CLUSTER_NAME=local                Slurm ClusterName and cluster.yaml name
#   REVIVE_SLURM_NODES=4                     node1..nodeN
#   REVIVE_SLURM_CPUS=2  REVIVE_SLURM_MEM=1024  REVIVE_SLURM_GPUS=4   per node
#   REVIVE_SLURMCTLD_PORT=6817               slurmctld port
#   REVIVE_SLURMD_PORT_BASE=17000            nodeI listens on BASE+I
#   REVIVE_SLURMRESTD_ADDR=127.0.0.1:6820    slurmrestd (JWT) listener
#   REVIVE_SLURMD_TIMEOUT=5  REVIVE_SLURM_MSG_TIMEOUT=3   a dead slurmd is DOWN after ~13 s
#   REVIVE_SLURM_MIN_JOB_AGE=3600            finished jobs stay requeueable this long
#                                            (must exceed the 30 min approval timeout)
#   REVIVE_TEMPORAL_ADDRESS=127.0.0.1:7233   written into cluster.yaml
#   REVIVE_INSTALL=1                         0 = never call apt-get
#   REVIVE_WAIT=60                           seconds per readiness check
#
# Idempotent: a healthy cluster with the same settings is left alone. A stale or
# different one is stopped (cluster-down.sh) and started from clean state.
# =============================================================================
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
T0=$(date +%s%N)
log() { local ms=$(( ($(date +%s%N) - T0) / 1000000 )); printf '[cluster-up %3d.%ds] %s\n' $((ms/1000)) $((ms%1000/100)) "$*"; }
die() { echo "cluster-up.sh: ERROR: $*" >&2; exit 1; }

[ "$(id -u)" = 0 ] || die "must run as root: slurmd runs jobs as their users and apt-get installs the Slurm packages (try: sudo $0)"

DIR="${REVIVE_CLUSTER_DIR:-/tmp/revive-cluster}"
NAME="${REVIVE_CLUSTER_NAME:-local}"
NODES="${REVIVE_SLURM_NODES:-4}"
CPUS="${REVIVE_SLURM_CPUS:-2}"
MEM="${REVIVE_SLURM_MEM:-1024}"
GPUS="${REVIVE_SLURM_GPUS:-4}"
CTLD_PORT="${REVIVE_SLURMCTLD_PORT:-6817}"
PORT_BASE="${REVIVE_SLURMD_PORT_BASE:-17000}"
REST_ADDR="${REVIVE_SLURMRESTD_ADDR:-127.0.0.1:6820}"
SLURMD_TIMEOUT="${REVIVE_SLURMD_TIMEOUT:-5}"
MSG_TIMEOUT="${REVIVE_SLURM_MSG_TIMEOUT:-3}"
MIN_JOB_AGE="${REVIVE_SLURM_MIN_JOB_AGE:-3600}"
TEMPORAL_ADDRESS="${REVIVE_TEMPORAL_ADDRESS:-127.0.0.1:${REVIVE_TEMPORAL_PORT:-7233}}"
INSTALL="${REVIVE_INSTALL:-1}"
WAIT="${REVIVE_WAIT:-60}"
REST_PORT="${REST_ADDR##*:}"
REST_HOST="${REST_ADDR%:*}"

mkdir -p "$DIR"
DIR="$(cd "$DIR" && pwd -P)"
if [ -n "$(ls -A "$DIR")" ] && [ ! -f "$DIR/.revive-cluster" ]; then
  die "$DIR is not empty and was not created by cluster-up.sh; refusing to use it (set REVIVE_CLUSTER_DIR)"
fi
echo "created by scripts/cluster-up.sh" > "$DIR/.revive-cluster"

SETTINGS="name=$NAME nodes=$NODES cpus=$CPUS mem=$MEM gpus=$GPUS ctld=$CTLD_PORT base=$PORT_BASE rest=$REST_ADDR slurmd_timeout=$SLURMD_TIMEOUT msg_timeout=$MSG_TIMEOUT min_job_age=$MIN_JOB_AGE temporal=$TEMPORAL_ADDRESS"
export SLURM_CONF="$DIR/etc/slurm.conf"
unset SLURM_JWT || true   # a stray SLURM_JWT switches the clients to JWT auth
NODELIST="node[1-$NODES]"; [ "$NODES" = 1 ] && NODELIST=node1

# ------------------------------------------------------------------ packages --
PKGS=(munge slurmctld slurmd slurm-client slurm-wlm-jwt-plugin slurmrestd)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  [ "$INSTALL" = 1 ] || die "missing Debian packages: ${missing[*]} (REVIVE_INSTALL=0; install them with apt-get)"
  command -v apt-get >/dev/null || die "missing Debian packages: ${missing[*]}, and apt-get is not available"
  log "installing: ${missing[*]}"
  APTLOG="$DIR/apt.log"
  own_policy=0
  if [ ! -e /usr/sbin/policy-rc.d ]; then   # keep apt from starting the packaged services
    printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod 755 /usr/sbin/policy-rc.d; own_policy=1
  fi
  export DEBIAN_FRONTEND=noninteractive
  ok=0
  # another apt run may hold the dpkg lock: wait for it (DPkg::Lock::Timeout)
  if apt-get install -y -qq -o DPkg::Lock::Timeout=120 --no-install-recommends "${missing[@]}" >"$APTLOG" 2>&1; then ok=1
  else
    apt-get update -qq -o DPkg::Lock::Timeout=120 >>"$APTLOG" 2>&1 || true
    apt-get install -y -qq -o DPkg::Lock::Timeout=120 --no-install-recommends "${missing[@]}" >>"$APTLOG" 2>&1 && ok=1
  fi
  [ $own_policy = 1 ] && rm -f /usr/sbin/policy-rc.d
  [ $ok = 1 ] || { tail -15 "$APTLOG" >&2; die "apt-get install ${missing[*]} failed (full log: $APTLOG)"; }
fi
# the slurm-wlm-emulator package (FrontEnd build) hijacks the alternatives; undo that
for a in slurmctld slurmd; do
  if [ -x "/usr/sbin/$a-wlm" ] && [ "$(readlink -f "/usr/sbin/$a")" != "/usr/sbin/$a-wlm" ]; then
    update-alternatives --set "$a" "/usr/sbin/$a-wlm" >/dev/null
  fi
done
SLURM_VERSION="$(slurmctld -V 2>/dev/null | awk '{print $2}')"

# ------------------------------------------------------------------- helpers --
pid_alive() {  # running and not a zombie (PID 1 here reaps late)
  local pid="$1" st
  [ -n "$pid" ] && [ -r "/proc/$pid/stat" ] || return 1
  st="$(sed -E 's/^[0-9]+ \(.*\) ([A-Za-z]).*/\1/' "/proc/$pid/stat" 2>/dev/null)" || return 1
  [ "$st" != Z ] && [ "$st" != X ]
}
pidfile_alive() { [ -f "$1" ] && pid_alive "$(cat "$1" 2>/dev/null)"; }
port_in_use() { (exec 3<>"/dev/tcp/$1/$2") 2>/dev/null; }
wait_for() {  # wait_for <message> <cmd...>
  local what="$1"; shift
  local end=$(( $(date +%s) + WAIT ))
  until "$@" >/dev/null 2>&1; do
    [ "$(date +%s)" -lt "$end" ] || return 1
    sleep 0.2
  done
  log "$what"
}
ctld_up() { timeout 5 scontrol ping | grep -q 'is UP'; }
nodes_idle() {
  local n
  n="$(sinfo -h -N -o '%N %T' 2>/dev/null | awk '$2=="idle"' | sort -u | wc -l)"
  [ "$n" -eq "$NODES" ]
}
nodes_responding() {  # every node registered (not DOWN, not '*')
  local n
  n="$(sinfo -h -N -o '%N %T' 2>/dev/null | awk '$2 !~ /\*|down|unk|fail|inval/' | sort -u | wc -l)"
  [ "$n" -eq "$NODES" ]
}
rest_ping() {
  curl -sf -o /dev/null -H "X-SLURM-USER-NAME: root" -H "X-SLURM-USER-TOKEN: $(cat "$DIR/run/jwt.token")" \
    "http://$REST_ADDR/slurm/v0.0.38/ping"
}
healthy() { ctld_up && nodes_responding && rest_ping; }
summary() {
  cat <<SUM
Slurm ${SLURM_VERSION:-?} local cluster '$NAME' is up (dir: $DIR)
  nodes     : $NODELIST on 127.0.0.1, ports $((PORT_BASE+1))..$((PORT_BASE+NODES)), $CPUS CPUs, ${MEM}MB, gpu:$GPUS each
  slurmctld : 127.0.0.1:$CTLD_PORT   logs: $DIR/log/
  REST (JWT): http://$REST_ADDR/slurm/v0.0.38/   user root, token $DIR/run/jwt.token
  config    : $DIR/cluster.yaml
  use       : source $DIR/env.sh
SUM
}

# cluster.yaml (local access) and cluster-ssh.yaml (the same cluster through the SSH login node)
write_configs() {
cat > "$DIR/cluster.yaml" <<YAML
# Generated by scripts/cluster-up.sh for the local test cluster (revive.config.ClusterConfig)
name: $NAME
slurm_conf: $DIR/etc/slurm.conf
scheduler:
  mode: local
  rest:
    url: http://$REST_ADDR
    user: root
    token_file: $DIR/run/jwt.token
logs:
  poll_interval_s: 0.5
kernel_log:
  path_template: $DIR/nodes/{node}/kern.log
temporal:
  address: $TEMPORAL_ADDRESS
  namespace: default
audit_file: $DIR/audit.jsonl
state_dir: $DIR/revive-state
# partitions: [debug]   # uncomment to watch every job of a partition; by default jobs opt in
#                        # with --comment='{"revive":{"policy":"default"}}'
local_testbed: true
YAML
# The same cluster reached only through an SSH login node (scripts/sshd-up.sh starts it on
# 127.0.0.1:$SSHD_PORT): every Slurm command, job log, kernel log and node command goes over SSH.
SSHD_PORT="${REVIVE_SSHD_PORT:-2222}"
node_hosts=""
for i in $(seq 1 "$NODES"); do node_hosts+="      node$i: \"127.0.0.1:$SSHD_PORT\"\n"; done
cat > "$DIR/cluster-ssh.yaml" <<YAML
# Generated by scripts/cluster-up.sh: the local test cluster in SSH mode (run scripts/sshd-up.sh first)
name: $NAME
slurm_conf: $DIR/etc/slurm.conf
scheduler:
  mode: ssh
  ssh:
    host: 127.0.0.1
    port: $SSHD_PORT
    user: $(id -un)
    known_hosts: $DIR/ssh/known_hosts
    key_file: $DIR/ssh/id_ed25519
    node_hosts:
$(printf "$node_hosts")
  rest:
    url: http://$REST_ADDR
    user: root
    token_file: $DIR/run/jwt.token
logs:
  poll_interval_s: 0.5
  over_ssh: true
kernel_log:
  path_template: $DIR/nodes/{node}/kern.log
  over_ssh: true
temporal:
  address: $TEMPORAL_ADDRESS
  namespace: default
audit_file: $DIR/audit.jsonl
state_dir: $DIR/revive-state
local_testbed: true
YAML
}

# --------------------------------------------------- already up? (idempotent) --
if [ -f "$DIR/run/settings" ] && [ "$(cat "$DIR/run/settings")" = "$SETTINGS" ] \
   && pidfile_alive "$DIR/run/slurmctld.pid" && healthy; then
  log "cluster in $DIR already running with the same settings; nothing to do"
  write_configs
  summary
  exit 0
fi
if ls "$DIR"/run/*.pid >/dev/null 2>&1; then
  log "stale or different cluster in $DIR; stopping it first"
  REVIVE_CLUSTER_DIR="$DIR" "$HERE/cluster-down.sh" >/dev/null
fi

for p in "$CTLD_PORT" $(seq $((PORT_BASE+1)) $((PORT_BASE+NODES))); do
  port_in_use 127.0.0.1 "$p" && die "port $p on 127.0.0.1 is already in use (another cluster? stop it, or set REVIVE_SLURMCTLD_PORT / REVIVE_SLURMD_PORT_BASE)"
done
port_in_use "$REST_HOST" "$REST_PORT" && die "port $REST_PORT on $REST_HOST is already in use (set REVIVE_SLURMRESTD_ADDR)"

# --------------------------------------------------------------- directories --
log "preparing $DIR"
rm -rf "${DIR:?}/state" "${DIR:?}/spool" "${DIR:?}/run" "${DIR:?}/log" "${DIR:?}/dev"
mkdir -p "$DIR"/{etc,state,spool,log,run,dev,jobs}
chmod 1777 "$DIR/jobs"
install -d -m 0711 "$DIR/munge"   # munged: socket dir 0711, key 0600, no group/world-writable parents
chmod 0755 "$DIR" "$DIR/etc"
for i in $(seq 1 "$NODES"); do
  mkdir -p "$DIR/spool/node$i" "$DIR/nodes/node$i"
  : > "$DIR/nodes/node$i/kern.log"      # the testbed's per-node kernel log (fresh cluster: empty)
  chmod 0644 "$DIR/nodes/node$i/kern.log"
done
[ -s "$DIR/munge/munge.key" ] || mungekey --create --bits=1024 --keyfile="$DIR/munge/munge.key" >/dev/null
chmod 0600 "$DIR/munge/munge.key"
[ -s "$DIR/etc/jwt_hs256.key" ] || dd if=/dev/urandom of="$DIR/etc/jwt_hs256.key" bs=32 count=1 status=none
chmod 0600 "$DIR/etc/jwt_hs256.key"
# gres/gpu needs one File= per GPU and it must be a char/block device: a symlink
# to /dev/null passes (stat follows it). Without File= 22.05 drops the GPUs and
# the node turns INVAL.
if [ "$GPUS" -gt 0 ]; then
  for i in $(seq 1 "$NODES"); do
    mkdir -p "$DIR/dev/node$i"
    for g in $(seq 0 $((GPUS-1))); do ln -s /dev/null "$DIR/dev/node$i/gpu$g"; done
  done
fi

# ------------------------------------------------------------------- configs --
{
cat <<CONF
# Generated by scripts/cluster-up.sh: single-machine multi-node TEST cluster.
ClusterName=$NAME
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire also sets how long a requeued job waits before it may start again
# (EligibleTime = requeue + cred_expire + 1; default 120; minimum 5)
AuthInfo=socket=$DIR/munge/munge.socket.2,cred_expire=5
AuthAltTypes=auth/jwt
AuthAltParameters=jwt_key=$DIR/etc/jwt_hs256.key
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool/%n
SlurmctldPidFile=$DIR/run/slurmctld.pid
SlurmdPidFile=$DIR/run/slurmd-%n.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
PlugStackConfig=$DIR/etc/plugstack.conf
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/filetxt
JobCompLoc=$DIR/log/jobcomp.log
MpiDefault=none
SwitchType=switch/none
MailProg=/bin/true
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=1,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SlurmdParameters=config_overrides
JobRequeue=1
ReturnToService=2
SlurmdTimeout=$SLURMD_TIMEOUT
MessageTimeout=$MSG_TIMEOUT
InactiveLimit=0
KillWait=5
# finished jobs stay visible (and requeueable) this long; above the approval timeout
MinJobAge=$MIN_JOB_AGE
Waittime=0
CONF
[ "$GPUS" -gt 0 ] && echo "GresTypes=gpu"
for i in $(seq 1 "$NODES"); do
  g=""; [ "$GPUS" -gt 0 ] && g=" Gres=gpu:$GPUS"
  echo "NodeName=node$i NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((PORT_BASE+i)) CPUs=$CPUS RealMemory=$MEM$g State=UNKNOWN"
done
echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
} > "$DIR/etc/slurm.conf"
{
  echo "AutoDetect=off"
  if [ "$GPUS" -gt 0 ]; then
    files="gpu0"; [ "$GPUS" -gt 1 ] && files="gpu[0-$((GPUS-1))]"
    for i in $(seq 1 "$NODES"); do echo "NodeName=node$i Name=gpu File=$DIR/dev/node$i/$files"; done
  fi
} > "$DIR/etc/gres.conf"
# 22.05's slurmd always loads a cgroup plugin; cgroup/v1's init touches nothing
printf 'CgroupPlugin=cgroup/v1\nIgnoreSystemd=yes\n' > "$DIR/etc/cgroup.conf"
: > "$DIR/etc/plugstack.conf"
chmod 0644 "$DIR"/etc/*.conf

# marker in every daemon's environment (inherited by slurmstepd), so
# cluster-down.sh can find leftovers of THIS cluster only
export REVIVE_CLUSTER_DAEMON="$DIR"

# --------------------------------------------------------------------- munge --
munged --socket="$DIR/munge/munge.socket.2" --key-file="$DIR/munge/munge.key" \
       --pid-file="$DIR/run/munged.pid" --log-file="$DIR/log/munged.log" \
       --seed-file="$DIR/munge/munged.seed" --num-threads=4 </dev/null >"$DIR/log/munged.out" 2>&1 \
  || die "munged failed: $(cat "$DIR/log/munged.out")"
munge_ok() { munge -n -S "$DIR/munge/munge.socket.2" | unmunge -S "$DIR/munge/munge.socket.2"; }
wait_for "munged up" munge_ok || die "munged not answering (see $DIR/log/munged.log)"

# ----------------------------------------------------------------- slurmctld --
setsid slurmctld </dev/null >/dev/null 2>&1 || die "slurmctld failed: $(tail -5 "$DIR/log/slurmctld.log")"
wait_for "slurmctld up on 127.0.0.1:$CTLD_PORT" ctld_up || { tail -20 "$DIR/log/slurmctld.log" >&2; die "slurmctld not up"; }

# ------------------------------------------------------------------- slurmds --
for i in $(seq 1 "$NODES"); do
  setsid slurmd -N "node$i" </dev/null >/dev/null 2>&1 || die "slurmd node$i failed: $(tail -5 "$DIR/log/slurmd-node$i.log")"
done
wait_for "all $NODES nodes idle" nodes_idle \
  || { sinfo -N -o '%N %T %E' >&2; die "nodes did not become idle (see $DIR/log/slurmd-*.log)"; }

# ---------------------------------------------------------------- slurmrestd --
# refuses to run as root: run as 'slurm' (or nobody); SLURM_JWT=daemon makes it
# use auth/jwt towards slurmctld; only the non-slurmdbd OpenAPI plugins load.
REST_USER=slurm; id -u slurm >/dev/null 2>&1 || REST_USER=nobody
REST_GROUP="$(id -gn "$REST_USER")"
SLURM_JWT=daemon setsid slurmrestd -a rest_auth/jwt -s openapi/v0.0.38,openapi/v0.0.37 \
    -u "$REST_USER" -g "$REST_GROUP" "$REST_ADDR" </dev/null >>"$DIR/log/slurmrestd.log" 2>&1 &
echo $! > "$DIR/run/slurmrestd.pid"
scontrol token username=root lifespan=$((90*24*3600)) | sed 's/^SLURM_JWT=//' > "$DIR/run/jwt.token"
chmod 0600 "$DIR/run/jwt.token"
wait_for "slurmrestd up on http://$REST_ADDR" rest_ping \
  || { tail -5 "$DIR/log/slurmrestd.log" >&2; die "slurmrestd not answering on $REST_ADDR"; }

# ------------------------------------------------------ env.sh, cluster.yaml --
cat > "$DIR/env.sh" <<ENV
# source me: environment for Revive's local test cluster in $DIR
export SLURM_CONF=$DIR/etc/slurm.conf
export REVIVE_CLUSTER_DIR=$DIR
export REVIVE_CLUSTER_CONFIG=$DIR/cluster.yaml
export REVIVE_SLURMRESTD_URL=http://$REST_ADDR
export REVIVE_SLURMRESTD_TOKEN_FILE=$DIR/run/jwt.token
ENV
mkdir -p "$DIR/revive-state"
write_configs
echo "$SETTINGS" > "$DIR/run/settings"
log "done"
summary
