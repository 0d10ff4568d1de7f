"""Peak resident memory of syncing one 1 GiB incompressible file (an uncompressed tar).

A sync streams: the archive is hashed while it is written and unpacked from disk, never held whole, so
its memory should not grow with the archive. The repository is written by hand with stock tools
(bsdtar, sha256sum, the coreutils tree hash of docs/protocol.md#the-tree-hash). The highest of 3 runs.
"""
import json, os, subprocess


def run(h):
    megabytes = h.size(1024, 4)
    site, www = h.path("big-site"), h.path("www", "archives")
    os.makedirs(site)
    os.makedirs(www)
    with open(os.path.join(site, "blob.bin"), "wb") as f:
        for _ in range(megabytes):
            f.write(os.urandom(1 << 20))
    archive = os.path.join(www, "blob-1.tar")
    h.run(["bsdtar", "-cf", archive, "-C", site, "."])
    tree = subprocess.run(
        "find . -type f -printf './%P\\0' | LC_ALL=C sort -z | xargs -0 -r sha256sum | sed 's|  \\./|  |' | sha256sum",
        shell=True, cwd=site, capture_output=True, text=True, check=True).stdout.split()[0]
    sha = h.run(["sha256sum", archive]).split()[0]
    manifest = {"format": 1, "sequence": 1, "packages": [{
        "id": "blob", "version": "1", "routes": ["https://m.example.com/blob/"], "entry": "blob.bin",
        "archive": {"url": "archives/blob-1.tar", "sha256": sha, "size": os.path.getsize(archive)}, "tree": tree}]}
    with open(h.path("www", "manifest.json"), "w") as f:
        json.dump(manifest, f)
    h.wipe(site)
    nginx = h.nginx(h.path("www"))
    peaks = []
    for _ in range(3):
        root = h.path("root")
        h.wipe(root)
        out = h.path("time.txt")
        h.run(["/usr/bin/time", "-v", "-o", out, h.offlinepkg, "sync", nginx.url("manifest.json"), "--root", root, "--quiet"])
        kib = next(int(line.split(":")[1]) for line in open(out) if "Maximum resident set size" in line)
        peaks.append(kib / 1024)
    h.figure("sync-rss", f"peak RSS, {megabytes} MiB archive sync (highest of 3)", max(peaks), samples=peaks)
