#!/usr/bin/env bash
# Installs what tests/pg_scripts needs, idempotently (safe to run every time):
#   - PostgreSQL server binaries (Debian package `postgresql`, which also
#     creates the `postgres` OS user the servers run as), curl, shellcheck, pgbackrest,
#     util-linux (unshare, setpriv, nsenter)
#   - the Python packages in requirements.txt (pytest, pytest-xdist, boto3, moto server)
# Needs root (or sudo) only when something is missing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)

as_root() {
	if [[ "$(id -u)" == 0 ]]; then "$@"
	elif command -v sudo >/dev/null 2>&1; then sudo "$@"
	else echo "setup.sh: need root to run: $*" >&2; exit 1
	fi
}

missing=()
compgen -G '/usr/lib/postgresql/*/bin/pg_rewind' >/dev/null || missing+=(postgresql)
command -v curl >/dev/null 2>&1 || missing+=(curl)
command -v shellcheck >/dev/null 2>&1 || missing+=(shellcheck)
# pgbackrest: the base backups `lockstep instance` takes (test_backup_tool.py).
command -v pgbackrest >/dev/null 2>&1 || missing+=(pgbackrest)
# unshare, setpriv, nsenter: the manager as PID 1 of a PID namespace of its own.
for tool in unshare setpriv nsenter; do
	command -v "$tool" >/dev/null 2>&1 || { missing+=(util-linux); break; }
done
if ((${#missing[@]})); then
	echo "setup.sh: installing ${missing[*]}"
	# Don't let the Debian package create and start a default cluster on 5432.
	if [[ ! -e /etc/postgresql-common/createcluster.conf ]]; then
		as_root mkdir -p /etc/postgresql-common
		echo 'create_main_cluster = false' | as_root tee /etc/postgresql-common/createcluster.conf >/dev/null
	fi
	# One apt at a time: CI's background builds may be installing too (tools/apt-install.sh).
	as_root bash "$here/../../tools/apt-install.sh" "${missing[@]}" >/dev/null
fi
id postgres >/dev/null 2>&1 || { echo "setup.sh: OS user 'postgres' is missing (it comes with the postgresql package)" >&2; exit 1; }

if ! python3 -c 'import pytest, xdist, boto3, moto, flask, flask_cors' >/dev/null 2>&1; then
	echo "setup.sh: installing Python requirements"
	python3 -m pip install -q -r "$here/requirements.txt"
fi
echo "setup.sh: ok ($(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1), $(curl --version | head -n 1 | cut -d' ' -f1-2))"
