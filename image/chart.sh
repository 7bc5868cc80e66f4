#!/usr/bin/env bash
# Packages charts/capstan for the image `make image` built (`make chart`):
#
#   image/chart.sh HELM [IMAGE_DIR]
#
# IMAGE_DIR is a directory image/build.sh wrote (default $CAPSTAN_CACHE/image/current). The chart's
# values get that image's repository, tag and digest, `helm template` checks the Deployment then
# names exactly `repository:tag@digest`, and `helm package` writes capstan-<chart version>.tgz into
# IMAGE_DIR. Prints the package's path.
set -euo pipefail

helm=${1:?usage: chart.sh HELM [IMAGE_DIR]}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
dir=$(cd "${2:-${CAPSTAN_CACHE:-$HOME/.cache/capstan}/image/current}" && pwd -P)
json="$dir/image.json"
[ -f "$json" ] || { echo "chart.sh: no $json (run make image)" >&2; exit 1; }
field() { sed -n "s/^ *\"$1\": \"\(.*\)\",\{0,1\}$/\1/p" "$json"; }
repository=$(field repository) tag=$(field tag) digest=$(field digest)
if [ -z "$repository" ] || [ -z "$tag" ] || [ -z "$digest" ]; then
  echo "chart.sh: $json lacks repository, tag or digest" >&2
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# helm keeps its caches and config out of the user's home.
export HELM_CACHE_HOME="$work/helm/cache" HELM_CONFIG_HOME="$work/helm/config" HELM_DATA_HOME="$work/helm/data"
cp -r "$here/../charts/capstan" "$work/capstan"
values="$work/capstan/values.yaml"
# Only the three keys of the top-level `image:` block change.
sed -i -e "/^image:/,/^[^ #]/{
  s|^  repository: .*|  repository: $repository|
  s|^  tag: .*|  tag: \"$tag\"|
  s|^  digest: .*|  digest: \"$digest\"|
}" "$values"

want="$repository:$tag@$digest"
got=$("$helm" template rel "$work/capstan" --show-only templates/deployment.yaml | sed -n 's/^ *image: "\(.*\)"$/\1/p')
[ "$got" = "$want" ] || { echo "chart.sh: the packaged chart's Deployment names image '$got', not '$want'" >&2; exit 1; }

rm -f "$dir"/capstan-*.tgz
"$helm" package "$work/capstan" --destination "$dir" >&2
ls "$dir"/capstan-*.tgz
