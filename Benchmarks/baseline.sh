#!/usr/bin/env bash
# The script a team would write instead of offlinepkg, for the benchmark rows to race against: fetch the
# manifest, then for each package, one after another, download its archive, check its sha256 and
# unpack it. It does less than `offlinepkg sync` (no tree hash, no read-only tree, no flush to disk unless
# BASELINE_FLUSH=1, no atomic switch, no resume or retry): it is the floor a sync has to beat, not an equivalent.
#
#   Benchmarks/baseline.sh MANIFEST_URL DEST_DIR
#   BASELINE_FLUSH=1 Benchmarks/baseline.sh MANIFEST_URL DEST_DIR   # then `sync -f DEST_DIR` (syncfs)
#
# BASELINE_FLUSH=1 makes the unpacked files durable before the script ends, as `offlinepkg sync` does
# before it switches: the same script, plus the flush whose cost the plain one leaves to the kernel's
# writeback after it has exited.
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
if [ "${BASELINE_FLUSH:-0}" = 1 ]; then sync -f "$dest"; fi
