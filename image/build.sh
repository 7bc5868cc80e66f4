#!/usr/bin/env bash
# Builds the host's OCI image without a container engine (`make image`):
#
#   image/build.sh BINARY [OUT_ROOT]
#
# BINARY is a release build of `capstan`. The root filesystem comes from image/rootfs.sh (the same
# script the Dockerfile runs), is packed as one layer with GNU tar (owners, modes, order and times
# fixed, so the same inputs give the same digest), and `umoci` writes the OCI image layout and
# config: user 65532:65532, entrypoint /capstan, as in the Dockerfile. Outputs, in
# OUT_ROOT/<key>/ (OUT_ROOT defaults to $CAPSTAN_CACHE/image; OUT_ROOT/current points at the
# newest):
#
#   oci/                        the OCI image layout, tagged with the host's version
#   capstan-<version>.oci.tar   the same layout as one archive (`skopeo copy oci-archive:...`)
#   image.json                  {"repository", "tag", "digest", "layout", "archive", ...}
#
# <key> hashes the binary, the image scripts, the package versions and SOURCE_DATE_EPOCH: a second
# run with the same inputs only prints the cached result.
set -euo pipefail

binary=${1:?usage: build.sh BINARY [OUT_ROOT]}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out_root=${2:-${CAPSTAN_CACHE:-$HOME/.cache/capstan}/image}
repository=${CAPSTAN_IMAGE_REPOSITORY:-capstan}
epoch=${SOURCE_DATE_EPOCH:-0}
created=$(date -u -d "@$epoch" +%Y-%m-%dT%H:%M:%SZ)

for tool in umoci dpkg-deb apt-get tar sha256sum; do
  command -v "$tool" >/dev/null || { echo "build.sh: $tool is missing (apt-get install umoci)" >&2; exit 1; }
done
[ -x "$binary" ] || { echo "build.sh: $binary is not an executable" >&2; exit 1; }

version=$("$binary" --version | awk '{print $2}')
mapfile -t packages < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$here/packages")
# apt's candidate of each package (no download): part of the key, so a Debian update rebuilds.
policy=$(apt-cache policy "${packages[@]}")
pinned=()
for pkg in "${packages[@]}"; do
  v=$(awk -v p="$pkg:" '$0 == p {found = 1; next} found && $1 == "Candidate:" {print $2; exit}' <<<"$policy")
  if [ -z "$v" ] || [ "$v" = "(none)" ]; then
    echo "build.sh: apt has no candidate for $pkg (run apt-get update)" >&2
    exit 1
  fi
  pinned+=("$pkg=$v")
done

key=$(
  {
    sha256sum <"$binary"
    cat "$here/packages" "$here/rootfs.sh" "$here/build.sh"
    printf '%s\n' "${pinned[@]}" "$repository" "$epoch"
  } | sha256sum | cut -c1-16
)
dir="$out_root/$key"
if [ -f "$dir/image.json" ]; then
  echo "build.sh: cached: $dir" >&2
else
  mkdir -p "$out_root"
  tmp=$(mktemp -d "$out_root/.tmp.XXXXXX")
  chmod 0755 "$tmp"
  trap 'rm -rf "$tmp"' EXIT

  # The packages, kept under OUT_ROOT/debs (apt-get download fetches only what is missing there).
  debs="$out_root/debs"
  mkdir -p "$debs"
  missing=()
  for p in "${pinned[@]}"; do
    name=${p%%=*} v=${p#*=}
    # .deb file names spell the epoch's ':' as '%3a'.
    compgen -G "$debs/${name}_${v/:/%3a}_*.deb" >/dev/null || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    # (Without apt's note that root downloads unsandboxed.)
    (cd "$debs" && apt-get download -q "${missing[@]}") 2>&1 | { grep -v '^W: Download is performed unsandboxed' || true; } >&2
  fi
  sel="$tmp/debs"
  mkdir -p "$sel"
  for p in "${pinned[@]}"; do
    name=${p%%=*} v=${p#*=}
    f=$(compgen -G "$debs/${name}_${v/:/%3a}_*.deb" | head -n 1) \
      || { echo "build.sh: could not download $p" >&2; exit 1; }
    ln -s "$f" "$sel/"
  done

  bash "$here/rootfs.sh" "$tmp/rootfs" "$binary" "$sel"

  # Every library the binary asks for is in the root filesystem.
  if command -v readelf >/dev/null; then
    for lib in $(readelf -d "$binary" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'); do
      compgen -G "$tmp/rootfs/lib/*/$lib" >/dev/null || compgen -G "$tmp/rootfs/lib*/$lib" >/dev/null \
        || { echo "build.sh: $binary needs $lib, which image/packages does not provide" >&2; exit 1; }
    done
  fi

  # One layer: everything root's, but the nonroot user's home (a second archive, appended).
  tar_flags=(--sort=name --format=posix "--pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime"
    --mtime="@$epoch" --numeric-owner)
  tar -C "$tmp/rootfs" "${tar_flags[@]}" --owner=0 --group=0 --exclude=./home/nonroot -cf "$tmp/layer.tar" .
  tar -C "$tmp/rootfs" "${tar_flags[@]}" --owner=65532 --group=65532 --no-recursion -cf "$tmp/home.tar" ./home/nonroot
  tar -A -f "$tmp/layer.tar" "$tmp/home.tar"

  image="$tmp/oci:$version"
  history=(--history.created "$created" --history.created_by "image/build.sh")
  umoci init --layout "$tmp/oci"
  umoci new --image "$image"
  umoci raw add-layer --image "$image" "${history[@]}" --history.comment "capstan $version on ${pinned[*]}" \
    "$tmp/layer.tar"
  labels=(
    --config.label "org.opencontainers.image.title=capstan"
    --config.label "org.opencontainers.image.version=$version"
    --config.label "org.opencontainers.image.licenses=Apache-2.0"
    --config.label "dev.capstan.image.packages=${pinned[*]}"
  )
  # The same user, entrypoint and environment as the Dockerfile (a test compares them).
  umoci config --image "$image" --no-history --created "$created" \
    --config.user 65532:65532 \
    --config.entrypoint /capstan \
    --config.workingdir / \
    --config.env PATH=/usr/local/bin:/usr/bin:/bin \
    --config.env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    "${labels[@]}"
  umoci gc --layout "$tmp/oci"

  digest=$(sed -n 's/.*"digest":"\(sha256:[0-9a-f]*\)".*/\1/p' "$tmp/oci/index.json")
  [ -n "$digest" ] || { echo "build.sh: no digest in $tmp/oci/index.json" >&2; exit 1; }
  archive="capstan-$version.oci.tar"
  tar -C "$tmp/oci" --sort=name --mtime="@$epoch" --owner=0 --group=0 --numeric-owner -cf "$tmp/$archive" .
  # Compressed: what a registry stores and a node pulls (config and layer blobs).
  manifest="$tmp/oci/blobs/sha256/${digest#sha256:}"
  compressed=$(sed 's/"size":\([0-9]*\)/\n\1\n/g' "$manifest" | grep -x '[0-9]*' | awk '{s+=$1} END {print s}')
  uncompressed=$(stat -c %s "$tmp/layer.tar")
  rm -rf "$tmp/rootfs" "$tmp/debs" "$tmp/layer.tar" "$tmp/home.tar"
  cat >"$tmp/image.json" <<EOF
{
  "repository": "$repository",
  "tag": "$version",
  "digest": "$digest",
  "layout": "$dir/oci",
  "archive": "$dir/$archive",
  "packages": "${pinned[*]}",
  "created": "$created",
  "compressed_bytes": $compressed,
  "uncompressed_bytes": $uncompressed
}
EOF
  rm -rf "$dir"
  mv "$tmp" "$dir"
  trap - EXIT
fi

ln -sfn "$key" "$out_root/.current.tmp" && mv -T "$out_root/.current.tmp" "$out_root/current"
# Keep the three newest images.
find "$out_root" -mindepth 2 -maxdepth 2 -name image.json -printf '%T@ %h\n' | sort -rn | tail -n +4 \
  | while read -r _ old; do [ "$old" = "$dir" ] || rm -rf "$old"; done
cat "$dir/image.json"
