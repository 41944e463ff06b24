#!/usr/bin/env bash
# tools/apt-install.sh PACKAGE...: install the Debian packages that are missing, one apt
# at a time on the machine.
#
# CI builds the local cluster's binaries and images in the background while its tests
# run (tools/prebuild.sh), so two of Lockstep's installers (the pod-script tier's, the
# node's, the image builder's mmdebstrap) can meet; apt refuses a second apt outright.
# A machine-wide flock orders Lockstep's own; `DPkg::Lock::Timeout` waits for anyone
# else's (an unattended upgrade) instead of failing. Needs root when something is missing.
set -euo pipefail

missing=()
for p in "$@"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

exec 7>/var/lock/lockstep-apt.lock
flock 7
# Installed by whoever held the lock before us?
still=()
for p in "${missing[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || still+=("$p")
done
[ ${#still[@]} -eq 0 ] && exit 0

echo "apt-install: installing ${still[*]}" >&2
wait_lock=(-o DPkg::Lock::Timeout=600)
DEBIAN_FRONTEND=noninteractive apt-get "${wait_lock[@]}" update -qq
DEBIAN_FRONTEND=noninteractive apt-get "${wait_lock[@]}" install -y -qq --no-install-recommends \
  -o Dpkg::Options::=--force-confold "${still[@]}"
