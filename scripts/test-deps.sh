#!/usr/bin/env bash
# Debian packages the test suite uses beyond the Slurm testbed (scripts/cluster-up.sh installs
# Slurm and munge): a real Prometheus server and promtool (metrics scrape, alert rules), an OpenSSH
# server (the SSH login node, scripts/sshd-up.sh), Chromium (the Web UI check) and munge itself,
# installed here too because tests/deploy/test_chart.py decides at collection time, before any
# fixture has brought the testbed up, whether it can run the chart's in-pod munged wrapper (on a
# fresh machine it was skipped in every CI run).
#
#   REVIVE_INSTALL=0   never call apt-get: report what is missing and exit 1
#
# apt is kept from starting the packaged services (policy-rc.d): the tests start their own
# prometheus and sshd on loopback ports.
set -euo pipefail
PKGS=(prometheus openssh-server chromium munge)
INSTALL="${REVIVE_INSTALL:-1}"
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$INSTALL" != 1 ] || [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "test-deps: missing Debian packages: ${missing[*]} (install them: apt-get install ${missing[*]})" >&2
  exit 1
fi
t0=$(date +%s)
own_policy=0
if [ ! -e /usr/sbin/policy-rc.d ]; then
  printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d; chmod 755 /usr/sbin/policy-rc.d; own_policy=1
fi
trap '[ $own_policy = 1 ] && rm -f /usr/sbin/policy-rc.d' EXIT
export DEBIAN_FRONTEND=noninteractive
log=/tmp/revive-test-deps-apt.log
if ! apt-get install -y -qq -o DPkg::Lock::Timeout=120 --no-install-recommends "${missing[@]}" >"$log" 2>&1; then
  apt-get update -qq -o DPkg::Lock::Timeout=120 >>"$log" 2>&1 || true
  apt-get install -y -qq -o DPkg::Lock::Timeout=120 --no-install-recommends "${missing[@]}" >>"$log" 2>&1 \
    || { tail -15 "$log" >&2; echo "test-deps: apt-get install ${missing[*]} failed (log: $log)" >&2; exit 1; }
fi
echo "test-deps: installed ${missing[*]} in $(( $(date +%s) - t0 )) s"
