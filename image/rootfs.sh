#!/usr/bin/env bash
# Lays out the image's root filesystem in OUT: the host binary as /capstan, the parts of the Debian
# packages in image/packages that it needs, and the nonroot user (65532). Both image builds use it:
# `make image` (image/build.sh, no Docker) and the Dockerfile, so the two images hold the same files.
#
#   image/rootfs.sh OUT BINARY [DEB_DIR]
#
# DEB_DIR holds the packages' .deb files; without it they are fetched with `apt-get download` (apt's
# candidate versions). Needs dpkg-deb. Everything is owned by whoever runs it: image/build.sh sets the
# owners in the layer (root, /home/nonroot 65532); run as root (as in the Dockerfile) it sets them too.
set -euo pipefail

out=${1:?usage: rootfs.sh OUT BINARY [DEB_DIR]}
binary=${2:?usage: rootfs.sh OUT BINARY [DEB_DIR]}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mapfile -t packages < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$here/packages")

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
debs=${3:-}
if [ -z "$debs" ]; then
  debs="$work/debs"
  mkdir -p "$debs"
  (cd "$debs" && apt-get download -q "${packages[@]}") 2>&1 | { grep -v '^W: Download is performed unsandboxed' || true; } >&2
fi

rm -rf "$out"
mkdir -p "$out"/{etc/ssl/certs,home/nonroot,tmp,usr/lib,var/lib/dpkg/status.d}

for pkg in "${packages[@]}"; do
  deb=$(find "$debs" -maxdepth 1 -name "${pkg}_*.deb" | sort | tail -n 1)
  [ -n "$deb" ] || { echo "rootfs.sh: no ${pkg}_*.deb in $debs" >&2; exit 1; }
  x="$work/x/$pkg"
  mkdir -p "$x"
  dpkg-deb -x "$deb" "$x"
  # The package's dpkg record, where scanners (trivy, grype) look in distroless-style images.
  { dpkg-deb -f "$deb" Package; echo "Status: install ok installed"; dpkg-deb -f "$deb" | sed '/^Package:/d'; } \
    >"$out/var/lib/dpkg/status.d/$pkg"
  if [ -f "$x/usr/share/doc/$pkg/copyright" ]; then
    install -D -m 0644 "$x/usr/share/doc/$pkg/copyright" "$out/usr/share/doc/$pkg/copyright"
  fi
  case "$pkg" in
    libc6 | libgcc-s1)
      # Shared libraries and the loader only: no gconv modules, locales, ldconfig or tools.
      for d in "$x"/lib*; do
        [ -d "$d" ] && cp -a "$d" "$out/"
      done
      ;;
    ca-certificates)
      # What update-ca-certificates would write with the default configuration (every Mozilla root).
      find "$x/usr/share/ca-certificates/mozilla" -name '*.crt' | LC_ALL=C sort | xargs cat \
        >"$out/etc/ssl/certs/ca-certificates.crt"
      ;;
    gcc-12-base)
      # Only its copyright file (above), which covers libgcc_s.
      ;;
    base-files)
      cp "$x/usr/lib/os-release" "$out/usr/lib/os-release"
      ln -s ../usr/lib/os-release "$out/etc/os-release"
      ;;
    *)
      echo "rootfs.sh: image/packages names $pkg, which this script does not know what to take from" >&2
      exit 1
      ;;
  esac
done

# The nonroot user and group of distroless images (the chart runs as 65532:65532).
cat >"$out/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/sbin/nologin
nobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin
nonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin
EOF
cat >"$out/etc/group" <<'EOF'
root:x:0:
nobody:x:65534:
nonroot:x:65532:
EOF
printf 'hosts: files dns\n' >"$out/etc/nsswitch.conf"

install -m 0755 "$binary" "$out/capstan"

# Modes that do not depend on the umask; /tmp is sticky (the chart mounts an emptyDir there anyway).
find "$out" -type d -exec chmod 0755 {} +
find "$out/etc" "$out/usr" "$out/var" -type f -exec chmod 0644 {} +
chmod 1777 "$out/tmp"
chmod 0700 "$out/home/nonroot"
if [ "$(id -u)" = 0 ]; then
  chown -R 0:0 "$out"
  chown 65532:65532 "$out/home/nonroot"
fi
