#!/usr/bin/env bash
# Remakes Fixtures/demo-repo from Fixtures/demo-site with stock tools only (bsdtar, sha256sum, stat),
# the way an outside publisher would. See Fixtures/README.md.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
site="$here/demo-site"
repo="$here/demo-repo"
rm -rf "$repo"
mkdir -p "$repo/archives"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

tree_hash() {  # docs/protocol.md#the-tree-hash, verbatim
  (cd "$1" && find . -type f -printf './%P\0' | LC_ALL=C sort -z | xargs -0 -r sha256sum | sed 's|  \./|  |' | sha256sum | cut -d' ' -f1)
}

entry() {  # id version route...
  local id=$1 version=$2; shift 2
  local archive="archives/$id-$version.tar.gz"
  # Reproducible from any checkout: a copy with fixed modes and times, entries in byte order, numeric
  # root owner, no gzip timestamp. The same site gives the same bytes.
  local copy="$work/$id"
  cp -R "$site/$id" "$copy"
  find "$copy" -type d -exec chmod 755 {} + -o -type f -exec chmod 644 {} +
  find "$copy" -exec touch -h -d @0 {} +
  (cd "$copy" && find . -mindepth 1 | LC_ALL=C sort) > "$work/$id.list"
  bsdtar --options gzip:!timestamp --uid 0 --gid 0 --numeric-owner -n -czf "$repo/$archive" -C "$copy" -T "$work/$id.list"
  local sha size tree routes
  sha=$(sha256sum "$repo/$archive" | cut -d' ' -f1)
  size=$(stat -c %s "$repo/$archive")
  tree=$(tree_hash "$site/$id")
  routes=$(printf '"%s",' "$@"); routes=${routes%,}
  printf '    {"id": "%s", "version": "%s", "routes": [%s], "entry": "index.html",\n' "$id" "$version" "$routes"
  printf '     "archive": {"url": "%s", "sha256": "%s", "size": %s},\n' "$archive" "$sha" "$size"
  printf '     "tree": "%s"}' "$tree"
}

{
  echo '{'
  echo '  "format": 1,'
  echo '  "sequence": 1,'
  echo '  "packages": ['
  entry home 1.0.0 "https://demo.offlinepkg.test/"
  echo ','
  entry docs 1.0.0 "https://demo.offlinepkg.test/docs/"
  echo
  echo '  ]'
  echo '}'
} > "$repo/manifest.json"
echo "wrote $repo"
