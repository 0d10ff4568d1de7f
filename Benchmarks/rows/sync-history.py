"""A root after many activations of a large manifest: the history stays bounded, and a sync flushes the
disk a constant number of times, not once per package.

A 1,000-package manifest, then 500 activations, each a sync over file:// with one package at a new
version. Every package shares one small archive written with stock tools. The first sync (installing
every package) and the second (one changed package) run under `strace -c`. As root the work folder is
a tmpfs of its own, so each activation's syncfs flushes nothing of other processes: these figures are
sizes and counts, not disk times.
"""
import json, os, subprocess, time
from harness import median


def flushes(path):
    """(syncfs, fsync + fdatasync) calls from an `strace -c` summary."""
    syncfs = fsync = 0
    for line in open(path):
        words = line.split()
        if words and words[-1] == "syncfs":
            syncfs = int(words[3])
        elif words and words[-1] in ("fsync", "fdatasync"):
            fsync += int(words[3])
    return syncfs, fsync


def run(h):
    packages, activations = h.size(1000, 5), h.size(500, 3)
    work = h.path("history")
    os.makedirs(work)
    mounted = os.getuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2G", "tmpfs", work]).returncode == 0
    try:
        site, archives = os.path.join(work, "site"), os.path.join(work, "repo", "archives")
        os.makedirs(site)
        os.makedirs(archives)
        with open(os.path.join(site, "index.html"), "w") as f:
            f.write("<title>bench</title>\n")
        archive = os.path.join(archives, "page.tar.gz")
        h.run(["bsdtar", "-czf", archive, "-C", site, "."])
        sha = h.run(["sha256sum", archive]).split()[0]
        tree = subprocess.run(
            "find . -type f -printf './%P\\0' | LC_ALL=C sort -z | xargs -0 -r sha256sum | sed 's|  \\./|  |' | sha256sum",
            shell=True, cwd=site, capture_output=True, text=True, check=True).stdout.split()[0]
        manifest, root = os.path.join(work, "repo", "manifest.json"), os.path.join(work, "root")
        for sequence in range(1, activations + 1):
            with open(manifest, "w") as f:
                json.dump({"format": 1, "sequence": sequence, "packages": [{
                    "id": f"p{i}", "version": str(sequence) if i == 0 else "1", "routes": [f"https://p{i}.example.com/"],
                    "entry": "index.html", "archive": {"url": "archives/page.tar.gz", "sha256": sha,
                                                       "size": os.path.getsize(archive)}, "tree": tree}
                    for i in range(packages)]}, f)
            argv = [h.offlinepkg, "sync", f"file://{manifest}", "--root", root, "--quiet"]
            if sequence <= 2:
                argv = ["strace", "-f", "-c", "-e", "trace=syncfs,fsync,fdatasync", "-o", os.path.join(work, f"strace-{sequence}.txt")] + argv
            h.run(argv)
        history = json.load(open(os.path.join(root, "history.json")))
        size = os.path.getsize(os.path.join(root, "history.json"))
        status = median([h.time_once([h.offlinepkg, "status", "--root", root]) for _ in range(h.runs(10, 2))])
        all_syncfs, all_fsync = flushes(os.path.join(work, "strace-1.txt"))
        one_syncfs, one_fsync = flushes(os.path.join(work, "strace-2.txt")) if activations >= 2 else (None, None)
    finally:
        if mounted:
            subprocess.run(["chmod", "-R", "u+w", work])
            subprocess.run(["umount", work])
    h.figure("sync-history.entries", f"history after {activations} activations of {packages} packages (entries)",
             len(history), detail=f"history.json {size:,} B")
    h.figure("sync-history.status", f"status on that root", status * 1000)
    h.figure("sync-history.syncfs", f"syncfs calls of one sync installing {packages} packages", all_syncfs,
             detail=f"a sync of one changed package: {one_syncfs}")
    h.figure("sync-history.fsync", f"fsync calls of that sync, per package", all_fsync / packages,
             detail=f"{all_fsync} calls; a sync of one changed package: {one_fsync}")
