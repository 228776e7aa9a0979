#!/usr/bin/env bash
# Make sure the base image (debian:bookworm-slim by default) exists in the local engine.
#
# Found locally: nothing to do. Otherwise try `docker pull` (machines with a registry just pull);
# when that fails, build it here with debootstrap from the Debian mirror this machine's apt uses
# and `docker import` it (about 3 minutes, needs root). Usage: ensure-base-image.sh [IMAGE]
set -euo pipefail

IMAGE="${1:-${BASE_IMAGE:-debian:bookworm-slim}}"
SUITE="${BASE_SUITE:-bookworm}"

if docker image inspect "$IMAGE" >/dev/null 2>&1; then
  exit 0
fi

if [ "${HEADWATER_BASE_IMAGE_PULL:-1}" != "0" ]; then
  echo "base image $IMAGE not found locally: trying docker pull"
  if timeout 300 docker pull -q "$IMAGE" >/dev/null 2>&1; then
    echo "pulled $IMAGE"
    exit 0
  fi
  echo "no registry reachable: building $IMAGE with debootstrap"
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "ensure-base-image: building $IMAGE with debootstrap needs root" >&2
  exit 1
fi

# The Debian mirror (and security mirror) from this machine's apt sources; deb.debian.org if none.
debian_uri() {
  local want="$1" f uri suites line
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] || continue
    uri="" suites=""
    # deb822 stanzas are separated by blank lines.
    while IFS= read -r line || [ -n "$line" ]; do
      case "$line" in
        URIs:*) uri="$(echo "${line#URIs:}" | awk '{print $1}')" ;;
        Suites:*) suites="${line#Suites:}" ;;
        "")
          if [ -n "$uri" ] && [[ " $suites " == *" $want "* ]]; then echo "$uri"; return 0; fi
          uri="" suites="" ;;
      esac
    done <"$f"
    if [ -n "$uri" ] && [[ " $suites " == *" $want "* ]]; then echo "$uri"; return 0; fi
  done
  for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
    [ -f "$f" ] || continue
    uri="$(awk -v s="$want" '$1=="deb" && $0 !~ /\[/ && $3==s {print $2; exit} $1=="deb" && $0 ~ /\]/ {for(i=2;i<=NF;i++) if($i ~ /\]$/){ if($(i+2)==s){print $(i+1); exit}}}' "$f")"
    if [ -n "$uri" ]; then echo "$uri"; return 0; fi
  done
  return 1
}

MIRROR="${DEBIAN_MIRROR:-$(debian_uri "$SUITE" || echo http://deb.debian.org/debian)}"
SECURITY="${DEBIAN_SECURITY_MIRROR:-$(debian_uri "$SUITE-security" || echo http://deb.debian.org/debian-security)}"

if ! command -v debootstrap >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
fi

ROOT="$(mktemp -d /var/tmp/headwater-rootfs.XXXXXX)"
trap 'rm -rf "$ROOT"' EXIT
echo "debootstrap --variant=minbase $SUITE from $MIRROR (takes a few minutes)"
start=$(date +%s)
debootstrap --variant=minbase "$SUITE" "$ROOT" "$MIRROR" >"$ROOT.log" 2>&1 || {
  tail -20 "$ROOT.log" >&2
  rm -f "$ROOT.log"
  exit 1
}
rm -f "$ROOT.log"

# Make it like the official -slim image: apt sources in deb822 form, no docs/man/locales from
# future installs, apt caches cleaned after every install, nothing left over from the bootstrap.
rm -f "$ROOT/etc/apt/sources.list"
cat >"$ROOT/etc/apt/sources.list.d/debian.sources" <<SOURCES
Types: deb
URIs: $MIRROR
Suites: $SUITE $SUITE-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $SECURITY
Suites: $SUITE-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
cat >"$ROOT/etc/dpkg/dpkg.cfg.d/docker" <<'DPKG'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
DPKG
cat >"$ROOT/etc/apt/apt.conf.d/docker-clean" <<'APT'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
APT
cat >"$ROOT/etc/apt/apt.conf.d/docker-no-languages" <<'APT'
Acquire::Languages "none";
APT
find "$ROOT/usr/share/doc" -mindepth 2 -not -name copyright -not -type d -delete 2>/dev/null || true
find "$ROOT/usr/share/doc" -mindepth 1 -type d -empty -delete 2>/dev/null || true
rm -rf "$ROOT"/usr/share/man/* "$ROOT"/usr/share/info/* "$ROOT"/usr/share/locale/* \
  "$ROOT"/var/cache/apt/*.bin "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/* \
  "$ROOT"/var/log/* "$ROOT"/tmp/* "$ROOT"/root/.cache 2>/dev/null || true
: >"$ROOT/etc/machine-id" 2>/dev/null || true
echo "debian" >"$ROOT/etc/hostname"

tar --numeric-owner -C "$ROOT" -c . | docker import \
  --change 'CMD ["bash"]' \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --message "debootstrap --variant=minbase $SUITE $MIRROR" \
  - "$IMAGE" >/dev/null
echo "built $IMAGE in $(($(date +%s) - start)) s ($(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%d MB", $1/1e6}'))"
