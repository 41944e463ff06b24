#!/usr/bin/env bash
# Build the container images the real node runs, without a registry or a
# container engine: a root filesystem (a static Go binary on an empty base, or
# Debian `mmdebstrap --variant=minbase`), written as an OCI image archive by
# oci-image.py, cached by a hash of the recipe's inputs under
# ${LOCKSTEP_CACHE:-~/.cache/lockstep}/images/<image>-<hash>.tar.
#
#   tools/images/build.sh [IMAGE...]   build if needed (default: all); print the archives
#   tools/images/build.sh --name IMAGE print the image reference (e.g. lockstep.local/pause:3.10)
#   tools/images/build.sh --path IMAGE print the archive path (no build)
#   tools/images/build.sh --list       print the image names
#
# Images (name: reference):
#   pause:          lockstep.local/pause:3.10              pod sandbox (static Go, empty base)
#   etcd-3.6:       lockstep.local/etcd:v3.6.16            etcd, etcdctl, etcdutl + entrypoint/hooks, Debian minbase + curl
#                                                          (runs as nonroot, uid/gid 65532)
#   etcd-3.7:       lockstep.local/etcd:v3.7.3             the same at 3.7
#   postgres-15:    ghcr.io/lockstep-dev/postgres:15       PostgreSQL 15 + curl + pgBackRest (postgres uid 999 as in the official image):
#                                                          the backup and restore Jobs' image (their scripts upload with curl)
#   postgres-15-bare: lockstep.local/postgres:15-bare      postgres-15 without curl or perl: what the instances of the real
#                                                          e2e tier run (the server binaries, pgBackRest, no file of Lockstep's)
#   postgres-15-next: lockstep.local/postgres:15-next      postgres-15-bare's root filesystem under a second tag (and
#                                                          LOCKSTEP_IMAGE_BUILD=next): the target of upgrade tests
#   postgres-17:    ghcr.io/lockstep-dev/postgres:17       postgres-15's recipe on Debian trixie (PostgreSQL 17)
#   postgres-18:    ghcr.io/lockstep-dev/postgres:18       postgres-15's recipe on Debian sid (PostgreSQL 18)
#   backup:         lockstep.local/backup:1                curl (S3 SigV4 uploads), etcdctl, etcdutl, s3 helper (nonroot, 65532)
#   s3:             lockstep.local/s3:v1.8.0               versitygw S3 gateway, POSIX backend (static Go)
#   lockstep:       ghcr.io/lockstep-dev/operator:<version> the operator (static Rust binary, empty base),
#                                                          its tag Cargo.toml's version
#   lockstep-next:  ghcr.io/lockstep-dev/operator:<version>-next lockstep's root filesystem under a second tag
#                                                          (and LOCKSTEP_IMAGE_BUILD=next): the target of the
#                                                          install e2e's `helm upgrade` of the operator
#
# ghcr.io/lockstep-dev/... are the project's published names (tools/registry/push.sh
# pushes them to any registry); lockstep.local/... are for the local tiers only.
set -euo pipefail

command -v go >/dev/null 2>&1 || PATH="$PATH:/usr/local/go/bin"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
CACHE_ROOT="${LOCKSTEP_CACHE:-${HOME:-/root}/.cache/lockstep}"
IMAGES_DIR="$CACHE_ROOT/images"
ALL=(pause etcd-3.6 etcd-3.7 postgres-15 postgres-15-bare postgres-15-next postgres-17 postgres-18 backup s3 lockstep lockstep-next)
# The Debian suite a minbase root filesystem comes from; build_one sets it per image
# (suite_of), so debian_rootfs and debian_base read it as they always have.
DEBIAN_SUITE=bookworm
IMAGE_PROFILE="${LOCKSTEP_IMAGE_PROFILE:-release}"

log() { echo "[images] $*" >&2; }

ref_of() {
  case "$1" in
    pause) echo lockstep.local/pause:3.10 ;;
    etcd-3.6) echo lockstep.local/etcd:v3.6.16 ;;
    etcd-3.7) echo lockstep.local/etcd:v3.7.3 ;;
    postgres-15) echo ghcr.io/lockstep-dev/postgres:15 ;;
    postgres-15-bare) echo lockstep.local/postgres:15-bare ;;
    postgres-15-next) echo lockstep.local/postgres:15-next ;;
    backup) echo lockstep.local/backup:1 ;;
    s3) echo lockstep.local/s3:v1.8.0 ;;
    postgres-17) echo ghcr.io/lockstep-dev/postgres:17 ;;
    postgres-18) echo ghcr.io/lockstep-dev/postgres:18 ;;
    lockstep) echo "ghcr.io/lockstep-dev/operator:$(sed -n 's/^version = "\(.*\)"$/\1/p' "$ROOT/Cargo.toml" | head -1)" ;;
    lockstep-next) echo "$(ref_of lockstep)-next" ;;
    *) log "unknown image '$1' (known: ${ALL[*]})"; return 1 ;;
  esac
}

# suite_of IMAGE: the Debian suite IMAGE's root filesystem comes from. Each
# PostgreSQL major comes from the suite that serves it with pgBackRest:
# bookworm has 15, trixie 17, sid 18 (docs/postgres-versions.md).
suite_of() {
  case "$1" in
    postgres-17) echo trixie ;;
    postgres-18) echo sid ;;
    *) echo bookworm ;;
  esac
}

# Files (relative to the repo) whose content defines each image.
inputs_of() {
  local common="tools/images/oci-image.py"
  case "$1" in
    pause) echo "$common tools/images/go.mod tools/images/cmd/pause/main.go" ;;
    etcd-3.6) echo "$common $(cd "$ROOT" && ls tools/images/etcd/v3.6.16/go.* tools/images/etcd/bin/*)" ;;
    etcd-3.7) echo "$common $(cd "$ROOT" && ls tools/images/etcd/v3.7.3/go.* tools/images/etcd/bin/*)" ;;
    postgres-15 | postgres-15-bare | postgres-15-next | postgres-17 | postgres-18) echo "$common" ;;
    backup) echo "$common tools/images/etcd/v3.7.3/go.mod tools/images/etcd/v3.7.3/go.sum tools/images/backup/s3 tools/images/etcd/bin/etcd-backup tools/images/etcd/bin/etcd-lib.sh" ;;
    s3) echo "$common tools/images/s3/go.mod tools/images/s3/go.sum" ;;
    lockstep | lockstep-next) echo "$common Cargo.toml Cargo.lock $(cd "$ROOT" && find src -type f | LC_ALL=C sort)" ;;
  esac
}

# recipe_text IMAGE: the image's arm of the case in build_one (so that editing
# one recipe, or this driver, does not invalidate every other image).
recipe_text() {
  awk -v n="$1" '
    /^    [a-z0-9 .|-]+\)$/ { on = 0; split(substr($0, 5, length($0) - 5), a, / \| /); for (i in a) if (a[i] == n) on = 1 }
    on { print }
    on && /^      ;;$/ { on = 0 }' "$HERE/build.sh"
}

hash_of() {
  (
    cd "$ROOT"
    echo "image=$1 ref=$(ref_of "$1") go=$(go env GOVERSION) suite=$(suite_of "$1")"
    case "$1" in lockstep | lockstep-next) echo "profile=$IMAGE_PROFILE" ;; esac
    recipe_text "$1"
    # postgres-15-next is postgres-15-bare's root filesystem, which is postgres-15's:
    # their recipes count too.
    [ "$1" != postgres-15-next ] || recipe_text postgres-15-bare
    case "$1" in postgres-15-bare | postgres-15-next) recipe_text postgres-15 ;; esac
    # lockstep-next is lockstep's root filesystem: its recipe counts too.
    [ "$1" != lockstep-next ] || recipe_text lockstep
    declare -f debian_rootfs debian_base go_static oci unpack_image
    case "$1" in etcd-* | backup) declare -f nonroot_user ;; esac
    for f in $(inputs_of "$1"); do echo "$f $(sha256sum <"$f" | cut -d' ' -f1)"; done
  ) | sha256sum | cut -c1-16
}

path_of() { echo "$IMAGES_DIR/$1-$(hash_of "$1").tar"; }

go_static() { # MODULE_DIR OUT PKG...: a static, stripped Go build
  local dir="$1" out="$2"
  shift 2
  (cd "$dir" && CGO_ENABLED=0 GOFLAGS="-buildvcs=false -mod=readonly" go build -trimpath -ldflags "-s -w" -o "$out" "$@")
}

# need_mmdebstrap: install Debian's mmdebstrap if missing (outside the hashed
# helpers: how it gets installed does not change an image).
need_mmdebstrap() {
  type -P mmdebstrap >/dev/null 2>&1 && return 0
  log "installing mmdebstrap (Debian package)"
  "$ROOT/tools/apt-install.sh" mmdebstrap >&2
}

# mmdebstrap ARGS...: Debian's mmdebstrap, as debian_rootfs calls it. A suite that
# moves (sid) publishes a Release file valid for a week, which a mirror frozen at a
# snapshot serves expired: apt is told not to check that date for it (the signature
# is still checked). Outside the hash, as need_mmdebstrap: which Release file apt
# accepts does not change what it installs.
mmdebstrap() {
  case "$DEBIAN_SUITE" in
    sid) command mmdebstrap --aptopt='Acquire::Check-Valid-Until "false"' "$@" ;;
    *) command mmdebstrap "$@" ;;
  esac
}

# debian_rootfs DIR PACKAGES...: Debian minbase plus PACKAGES (apt caches and
# docs removed). The essential hook gives postgres uid/gid 999 like the
# official image (harmless where PostgreSQL is not installed).
debian_rootfs() {
  local dir="$1"
  shift
  local inc
  inc="$(IFS=,; echo "$*")"
  # shellcheck disable=SC2016 # the hooks' "$1" is the rootfs, expanded by mmdebstrap
  mmdebstrap --variant=minbase --include="$inc" \
    --essential-hook='echo "postgres:x:999:999:PostgreSQL administrator:/var/lib/postgresql:/bin/bash" >>"$1/etc/passwd"; echo "postgres:x:999:" >>"$1/etc/group"; echo "postgres:*:19000:0:99999:7:::" >>"$1/etc/shadow"' \
    --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/* "$1"/usr/share/doc/* "$1"/usr/share/man/* "$1"/usr/share/locale/*' \
    "$DEBIAN_SUITE" "$dir" >&2
}

# unpack_image IMAGE DIR: IMAGE's single layer (built first), unpacked into DIR.
unpack_image() {
  local base manifest layer
  base="$(path_of "$1")"
  [ -f "$base" ] || { log "$1 must be built first ($base)"; return 1; }
  manifest="$(tar -xOf "$base" index.json | python3 -c 'import json,sys; print(json.load(sys.stdin)["manifests"][0]["digest"].split(":")[1])')"
  layer="$(tar -xOf "$base" "blobs/sha256/$manifest" | python3 -c 'import json,sys; print(json.load(sys.stdin)["layers"][0]["digest"].split(":")[1])')"
  tar -xOf "$base" "blobs/sha256/$layer" | tar -C "$2" --numeric-owner -xf -
}

# debian_base DIR: minbase + ca-certificates + curl, built once and cached as
# a tar (shared by the etcd and backup images).
debian_base() {
  local dir="$1" h tar
  h="$( (echo "$DEBIAN_SUITE"; declare -f debian_rootfs) | sha256sum | cut -c1-16)"
  tar="$IMAGES_DIR/rootfs-base-$h.tar"
  if [ ! -f "$tar" ]; then
    local t="$IMAGES_DIR/.rootfs-base.$$"
    rm -rf "$t" && mkdir -p "$t"
    debian_rootfs "$t" ca-certificates curl
    tar -C "$t" --numeric-owner -cf "$tar.part" . && mv "$tar.part" "$tar"
    rm -rf "$t"
    for old in "$IMAGES_DIR"/rootfs-base-*.tar; do [ "$old" = "$tar" ] || rm -f -- "$old"; done
  fi
  tar -C "$dir" --numeric-owner -xf "$tar"
}

oci() { python3 "$HERE/oci-image.py" "$@" >&2; }

# nonroot_user ROOTFS: the `nonroot` user and group (65532, as in distroless images),
# which the etcd and backup images run as, with a home of its own.
nonroot_user() {
  echo "nonroot:x:65532:65532:nonroot:/home/nonroot:/usr/sbin/nologin" >>"$1/etc/passwd"
  echo "nonroot:x:65532:" >>"$1/etc/group"
  mkdir -p "$1/home/nonroot"
  chown 65532:65532 "$1/home/nonroot"
}

build_one() {
  local name="$1" ref out tmp rootfs
  ref="$(ref_of "$name")"
  out="$(path_of "$name")"
  if [ -f "$out" ]; then
    touch "$out"
    echo "$out"
    return 0
  fi
  mkdir -p "$IMAGES_DIR"
  tmp="$(mktemp -d "$IMAGES_DIR/.build-$name.XXXXXX")"
  # shellcheck disable=SC2064
  trap "rm -rf '$tmp'" RETURN
  rootfs="$tmp/rootfs"
  mkdir -p "$rootfs"
  local t0=$SECONDS
  # Read by debian_rootfs and debian_base (dynamic scope): this image's suite.
  local DEBIAN_SUITE
  DEBIAN_SUITE="$(suite_of "$name")"
  log "building $name ($ref, Debian $DEBIAN_SUITE)"
  case "$name" in etcd-* | postgres-* | backup) need_mmdebstrap ;; esac
  case "$name" in
    pause)
      go_static "$HERE" "$rootfs/pause" ./cmd/pause
      oci --rootfs "$rootfs" --name "$ref" --out "$out" --entrypoint '["/pause"]' --user 65535:65535
      ;;
    etcd-3.6 | etcd-3.7)
      local v
      v="$(basename "$(ls -d "$HERE"/etcd/v"${name#etcd-}".*)")"
      debian_base "$rootfs"
      mkdir -p "$rootfs/usr/local/bin" "$rootfs/var/lib/etcd"
      go_static "$HERE/etcd/$v" "$rootfs/usr/local/bin/" go.etcd.io/etcd/server/v3 go.etcd.io/etcd/etcdctl/v3 go.etcd.io/etcd/etcdutl/v3
      # go names a .../server/v3 binary "server".
      mv "$rootfs/usr/local/bin/server" "$rootfs/usr/local/bin/etcd"
      install -m 0755 "$HERE"/etcd/bin/* "$HERE/backup/s3" "$rootfs/usr/local/bin/"
      # No root needed: etcd runs as the nonroot user, which owns its working directory;
      # the data lives on the volume, whose group the pod's fsGroup makes its own.
      nonroot_user "$rootfs"
      chown 65532:65532 "$rootfs/var/lib/etcd"
      oci --rootfs "$rootfs" --name "$ref" --out "$out" --entrypoint '["/usr/local/bin/etcd-entrypoint"]' \
        --env "LOCKSTEP_ETCD_VERSION=${v#v}" --workdir /var/lib/etcd --user 65532:65532
      ;;
    postgres-15)
      debian_rootfs "$rootfs" ca-certificates curl postgresql-15 postgresql-client-15 pgbackrest
      # /var/run is an absolute symlink to /run: create the socket directory
      # through /run, or mkdir would follow the link onto the build machine.
      mkdir -p "$rootfs/run/postgresql" "$rootfs/var/lib/postgresql/data"
      chown 999:999 "$rootfs/run/postgresql" "$rootfs/var/lib/postgresql" "$rootfs/var/lib/postgresql/data"
      chmod 2775 "$rootfs/run/postgresql"
      oci --rootfs "$rootfs" --name "$ref" --out "$out" --cmd '["postgres"]' --user 999:999 \
        --env PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --env PGDATA=/var/lib/postgresql/data --env PG_MAJOR=15
      ;;
    postgres-17 | postgres-18)
      # postgres-15's recipe for another major, from the suite that serves it
      # (suite_of). No bare variant: postgres-15-bare proves the instances need
      # no curl or perl, and the instance manager runs the same code on every major.
      local major="${name#postgres-}"
      debian_rootfs "$rootfs" ca-certificates curl "postgresql-$major" "postgresql-client-$major" pgbackrest
      mkdir -p "$rootfs/run/postgresql" "$rootfs/var/lib/postgresql/data"
      chown 999:999 "$rootfs/run/postgresql" "$rootfs/var/lib/postgresql" "$rootfs/var/lib/postgresql/data"
      chmod 2775 "$rootfs/run/postgresql"
      oci --rootfs "$rootfs" --name "$ref" --out "$out" --cmd '["postgres"]' --user 999:999 \
        --env "PATH=/usr/lib/postgresql/$major/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
        --env PGDATA=/var/lib/postgresql/data --env "PG_MAJOR=$major"
      ;;
    postgres-15-bare)
      # postgres-15's single layer without curl and perl (perl-base is Essential
      # in Debian, so its files are removed rather than the package): the server
      # binaries (under /usr/lib/postgresql/15/bin, PATH's first entry; Debian's
      # /usr/bin wrappers are perl and go with it), pgBackRest and /bin/sh.
      unpack_image postgres-15 "$rootfs"
      rm -rf "$rootfs"/usr/bin/curl "$rootfs"/usr/bin/perl "$rootfs"/usr/bin/perl5* \
        "$rootfs"/usr/share/perl "$rootfs"/usr/share/perl5 \
        "$rootfs"/usr/lib/x86_64-linux-gnu/perl "$rootfs"/usr/lib/x86_64-linux-gnu/perl5 \
        "$rootfs"/usr/lib/x86_64-linux-gnu/perl-base
      # What the e2e tier promises of this image (no curl, no perl, no lockstep): checked, not assumed.
      if ls "$rootfs"/usr/bin/curl "$rootfs"/usr/bin/perl "$rootfs"/usr/local/bin/curl 2>/dev/null ||
        [ -n "$(find "$rootfs" -name '*lockstep*' -print -quit)" ]; then
        log "postgres-15-bare still holds curl, perl or a file of Lockstep's"
        return 1
      fi
      oci --rootfs "$rootfs" --name "$ref" --out "$out" --cmd '["postgres"]' --user 999:999 \
        --env PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --env PGDATA=/var/lib/postgresql/data --env PG_MAJOR=15
      ;;
    postgres-15-next)
      # postgres-15-bare's single layer, unpacked and written again under a second
      # tag with one more variable: a distinct image (config digest) for
      # upgrade tests without a second 5-minute rootfs build.
      unpack_image postgres-15-bare "$rootfs"
      oci --rootfs "$rootfs" --name "$ref" --out "$out" --cmd '["postgres"]' --user 999:999 \
        --env PATH=/usr/lib/postgresql/15/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        --env PGDATA=/var/lib/postgresql/data --env PG_MAJOR=15 --env LOCKSTEP_IMAGE_BUILD=next
      ;;
    backup)
      debian_base "$rootfs"
      mkdir -p "$rootfs/usr/local/bin"
      go_static "$HERE/etcd/v3.7.3" "$rootfs/usr/local/bin/" go.etcd.io/etcd/etcdctl/v3 go.etcd.io/etcd/etcdutl/v3
      install -m 0755 "$HERE/backup/s3" "$HERE/etcd/bin/etcd-backup" "$HERE/etcd/bin/etcd-lib.sh" "$rootfs/usr/local/bin/"
      # Snapshots go to /tmp (world-writable): nothing needs root.
      nonroot_user "$rootfs"
      oci --rootfs "$rootfs" --name "$ref" --out "$out" --cmd '["/bin/sh"]' --user 65532:65532
      ;;
    s3)
      mkdir -p "$rootfs/data" "$rootfs/tmp"
      go_static "$HERE/s3" "$rootfs/versitygw" github.com/versity/versitygw/cmd/versitygw
      oci --rootfs "$rootfs" --name "$ref" --out "$out" --entrypoint '["/versitygw"]'
      ;;
    lockstep)
      # A static binary on the installed gnu target (the musl target is not
      # available here); the Dockerfile does the same.
      # Its cargo target dir lives in the cache, outside the clone, so a fresh clone
      # rebuilds only the lockstep crate, not every dependency (release + crt-static
      # share nothing with the test build). flock: one clone builds and copies at a time.
      local target="$CACHE_ROOT/rust-image-target"
      mkdir -p "$target"
      # LOCKSTEP_IMAGE_PROFILE picks the cargo profile: `release` (the default, what
      # is shipped) or `image-test` (the e2e tiers: the same code unoptimized, minutes
      # faster to build on a cold CI machine).
      # The lockstep crate itself is always rebuilt from this tree: the target dir is
      # shared by every clone on the machine, and cargo judges freshness by mtimes, so
      # a tree whose files are older than another clone's last build would otherwise
      # get that clone's binary (seen: an image without the code its hash named).
      (cd "$ROOT" && flock "$target/.lockstep-image.lock" bash -c '
        CARGO_TARGET_DIR="$1" cargo clean --profile "$3" -p lockstep --target x86_64-unknown-linux-gnu >&2 &&
        RUSTFLAGS="-C target-feature=+crt-static" CARGO_TARGET_DIR="$1" \
          cargo build --locked --profile "$3" --bin lockstep --target x86_64-unknown-linux-gnu >&2 &&
          install -D -m 0755 "$1/x86_64-unknown-linux-gnu/$3/lockstep" "$2/lockstep"' _ "$target" "$rootfs" "$IMAGE_PROFILE")
      mkdir -p "$rootfs/etc/ssl/certs" "$rootfs/tmp"
      cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/" 2>/dev/null || true
      printf 'root:x:0:0:root:/:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$rootfs/etc/passwd"
      printf 'root:x:0:\nnonroot:x:65532:\n' >"$rootfs/etc/group"
      oci --rootfs "$rootfs" --name "$ref" --out "$out" --entrypoint '["/lockstep"]' \
        --cmd '["run","--leader-election"]' --user 65532:65532
      ;;
    lockstep-next)
      # lockstep's single layer, unpacked and written again under a second tag with one
      # more variable: a distinct operator image (config digest) for the install e2e's
      # `helm upgrade`, without a second build of the binary.
      unpack_image lockstep "$rootfs"
      oci --rootfs "$rootfs" --name "$ref" --out "$out" --entrypoint '["/lockstep"]' \
        --cmd '["run","--leader-election"]' --user 65532:65532 --env LOCKSTEP_IMAGE_BUILD=next
      ;;
  esac
  log "built $name in $((SECONDS - t0)) s: $(du -h "$out" | cut -f1) $out"
  # Older archives of the same image go (only the current recipe is used).
  local old
  for old in "$IMAGES_DIR/$name"-*.tar; do
    [ "$old" = "$out" ] || [ ! -f "$old" ] || rm -f -- "$old"
  done
  echo "$out"
}

case "${1:-}" in
  --name) ref_of "$2"; exit ;;
  --path) path_of "$2"; exit ;;
  --list) printf '%s\n' "${ALL[@]}"; exit ;;
esac

names=("$@")
[ ${#names[@]} -gt 0 ] || names=("${ALL[@]}")
# postgres-15-bare is made from postgres-15's archive, postgres-15-next from
# postgres-15-bare's: those are built first, quietly (only the requested archives
# are printed).
order=()
add() { case " ${order[*]} " in *" $1 "*) ;; *) order+=("$1") ;; esac; }
for n in "${names[@]}"; do
  case "$n" in
    postgres-15-next) add postgres-15; add postgres-15-bare ;;
    postgres-15-bare) add postgres-15 ;;
    lockstep-next) add lockstep ;;
  esac
  add "$n"
done
for n in "${names[@]}"; do ref_of "$n" >/dev/null; done
mkdir -p "$IMAGES_DIR"
for n in "${order[@]}"; do
  # One build per image at a time (CI and a dev shell may race).
  exec 8>"$IMAGES_DIR/.lock-$n"
  flock 8
  case " ${names[*]} " in
    *" $n "*) build_one "$n" ;;
    *) build_one "$n" >/dev/null ;;
  esac
  exec 8>&-
done
