"""Bytes one sync writes to the disk, against the baseline script: one write per byte installed.

One package of incompressible files (so the archive is as large as the tree), synced over file:// into a
fresh root, counted as the kernel counts them for the process and its children: write_bytes less
cancelled_write_bytes of /proc/PID/io (pages dirtied, less those dropped before writeback because their
file was deleted first). A download kept beside the tree, or a copy where a rename would do, shows here.
As root the work folder is an ext4 image of its own, so another process's syncfs cannot write our dirty
pages early.
"""
import os, subprocess

COUNT = 'awk "/^write_bytes/ {w=\\$2} /^cancelled_write_bytes/ {c=\\$2} END {print w-c}" /proc/$$/io'


def net_written(h, argv, env=None):
    """Bytes written by argv and its children (reaped by the shell, so counted in its /proc/PID/io)."""
    return int(h.run(["sh", "-c", f'"$@" >/dev/null 2>&1 || exit 1; {COUNT}', "sh", *argv], env=env).strip())


def run(h):
    megabytes = h.size(64, 2)
    work = h.path("writes")
    os.makedirs(work)
    image = None
    if os.getuid() == 0:
        image = h.path("writes.img")
        subprocess.run(["truncate", "-s", f"{megabytes * 6 + 256}M", image], check=True)
        subprocess.run(["mkfs.ext4", "-q", "-F", image], check=True)
        subprocess.run(["mount", "-o", "loop", image, work], check=True)
    try:
        site = os.path.join(work, "site")
        os.makedirs(site)
        for i in range(8):
            with open(os.path.join(site, f"part-{i}.bin"), "wb") as f:
                f.write(os.urandom(megabytes * 1048576 // 8))
        with open(os.path.join(site, "index.html"), "w") as f:
            f.write("<title>bench</title>\n")
        repo = os.path.join(work, "repo")
        h.opk("publish", site, "--repo", repo, "--id", "home", "--version", "1", "--route", "https://m.example.com/",
              "--format", "tar.gz", "--quiet")
        os.sync()
        ours = net_written(h, [h.offlinepkg, "sync", f"file://{repo}/manifest.json", "--root", os.path.join(work, "root"), "--quiet"])
        os.sync()
        # The script's download folder (mktemp -d) on the same file system as offlinepkg's downloads/.
        os.makedirs(os.path.join(work, "tmp"))
        baseline = os.path.join(os.path.dirname(__file__), "..", "baseline.sh")
        theirs = net_written(h, [baseline, f"file://{repo}/manifest.json", os.path.join(work, "script-out")],
                             env={"TMPDIR": os.path.join(work, "tmp")})
        os.sync()
    finally:
        if image:
            subprocess.run(["chmod", "-R", "u+w", work])
            subprocess.run(["umount", work])
    h.figure("sync-writes", f"bytes written by one sync ({megabytes} MiB archive) / script", ours / theirs if theirs else None,
             ours=f"{ours:,} B", theirs=f"{theirs:,} B")
