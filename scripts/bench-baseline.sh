#!/usr/bin/env bash
# The script a team would write instead of offlinepkg, for scripts/bench to race against: fetch the
# manifest, then for each package, one after another, download its archive, check its sha256 and
# unpack it. It does less than `offlinepkg sync` (no tree hash, no read-only tree, no flush to disk,
# no atomic switch, no resume or retry): it is the floor a sync has to beat, not an equivalent.
#
#   scripts/bench-baseline.sh MANIFEST_URL DEST_DIR
#
# Needs curl, jq, coreutils and bsdtar (libarchive-tools).
set -euo pipefail
manifest_url=$1
dest=$2
base=${manifest_url%/*}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

curl -fsSL -o "$tmp/manifest.json" "$manifest_url"
jq -r '.packages[] | [.id, .archive.url, .archive.sha256] | @tsv' "$tmp/manifest.json" >"$tmp/archives"
while IFS=$'\t' read -r id url sha; do
  f="$tmp/$id.archive"
  curl -fsSL -o "$f" "$base/$url"
  echo "$sha  $f" | sha256sum -c --quiet
  mkdir -p "$dest/$id"
  bsdtar -xf "$f" -C "$dest/$id"
  rm -f "$f"
done <"$tmp/archives"
