#!/usr/bin/env bash
# Push images built by tools/images/build.sh (built first if needed) to a registry,
# with crane (tools/registry/build.sh).
#
#   tools/registry/push.sh [--registry R] [--tag T] [--insecure] IMAGE...
#
# IMAGE is a name of tools/images/build.sh (`build.sh --list`). R is a registry with
# a repository prefix, e.g. `registry.example.com/lockstep-dev`; the default is the
# running local cluster's registry, `$(tools/registry/registry.sh address)/lockstep-dev`.
# An image is pushed as R/<repository>:<tag>, its repository the last path element
# of its name in build.sh:
#   lockstep     ghcr.io/lockstep-dev/operator:<version>  -> R/operator:<version> (Cargo.toml's)
#   postgres-N   ghcr.io/lockstep-dev/postgres:N          -> R/postgres:N and R/postgres:N.<minor>,
#                the minor from the version of Debian's postgresql-N package in the image
#   others       lockstep.local/NAME:TAG                  -> R/NAME:TAG
# --tag T pushes each image under T alone instead (a test's fresh tag).
# --insecure talks plain HTTP to R (a registry without TLS).
#
# Pushing to the local cluster's registry trusts the cluster's CA for that push
# (SSL_CERT_DIR); any other registry is reached with the system's CAs and the
# credentials `crane auth login` (or docker's config) holds. Prints one line per
# pushed tag: the reference pushed, then the same by digest (REPOSITORY@sha256:...).
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
BUILD="$ROOT/tools/images/build.sh"

usage() {
  echo "usage: $0 [--registry R] [--tag T] [--insecure] IMAGE..." >&2
  exit 2
}

registry="" tag="" crane_flags=() names=()
while [ $# -gt 0 ]; do
  case "$1" in
    --registry) [ $# -ge 2 ] || usage; registry="$2"; shift 2 ;;
    --tag) [ $# -ge 2 ] || usage; tag="$2"; shift 2 ;;
    --insecure) crane_flags+=(--insecure); shift ;;
    -*) usage ;;
    *) names+=("$1"); shift ;;
  esac
done
[ ${#names[@]} -gt 0 ] || usage

local_addr="$("$HERE/registry.sh" address 2>/dev/null || true)"
if [ -z "$registry" ]; then
  [ -n "$local_addr" ] || { "$HERE/registry.sh" address >/dev/null; exit 1; }
  registry="$local_addr/lockstep-dev"
fi
registry="${registry%/}"
if [ -n "$local_addr" ] && [ "${registry%%/*}" = "$local_addr" ]; then
  SSL_CERT_DIR="$("$HERE/registry.sh" ca-dir)"
  export SSL_CERT_DIR
fi

CRANE="$("$HERE/build.sh")/crane"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT

# debian_minor ARCHIVE MAJOR: "MAJOR.MINOR" from the postgresql-MAJOR package's
# version in the image's dpkg status (e.g. 15.14-0+deb12u1 -> 15.14). awk reads the
# whole file: exiting at the match would break tar's pipe, and pipefail would end the
# script without a word whenever tar still had a block to write.
debian_minor() {
  local layout="$1" major="$2" manifest layer
  manifest="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"].split(":")[1])' "$layout/index.json")"
  layer="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["layers"][0]["digest"].split(":")[1])' "$layout/blobs/sha256/$manifest")"
  tar -xOf "$layout/blobs/sha256/$layer" --wildcards '*var/lib/dpkg/status' |
    awk -v p="postgresql-$major" '
      /^Package: / { on = ($2 == p) }
      on && /^Version: / && found == "" { split($2, v, "-"); found = v[1] }
      END { print found }'
}

for n in "${names[@]}"; do
  tar_path="$("$BUILD" "$n")"
  ref="$("$BUILD" --name "$n")"
  repo="${ref%:*}"
  repo="${repo##*/}"
  layout="$TMP/$n"
  mkdir -p "$layout"
  tar -C "$layout" -xf "$tar_path"
  tags=()
  if [ -n "$tag" ]; then
    tags=("$tag")
  else
    tags=("${ref##*:}")
    case "$n" in
      postgres-[0-9]*)
        major="${ref##*:}"
        minor="$(debian_minor "$layout" "$major")"
        case "$minor" in
          "$major".[0-9]*) tags+=("$minor") ;;
          *) echo "push.sh: no postgresql-$major package version found in $tar_path" >&2; exit 1 ;;
        esac
        ;;
    esac
  fi
  for t in "${tags[@]}"; do
    dest="$registry/$repo:$t"
    # The archive is an OCI image layout with one image: crane pushes it as it is.
    digest="$("$CRANE" push "${crane_flags[@]}" "$layout" "$dest" 2>"$TMP/crane.log")" || {
      cat "$TMP/crane.log" >&2
      echo "push.sh: pushing $n to $dest failed" >&2
      exit 1
    }
    echo "$dest $digest"
  done
  rm -rf "$layout"
done
