"""Cold sync of one package of 1k, 10k and 100k generated files, in every format publish writes, against
the baseline script; beside it, for information, the same script made durable at its end (syncfs).

One package is where per-file costs show: creating, hashing and flushing each file. The script leaves
its files to the kernel's writeback after it exits, while a sync makes the tree durable before it
switches, so the flushed script is the like-for-like comparison and the plain one the target.
"""
import os, shutil
import sites
from harness import median, ratio

SIZES = {"1k": (1000, 50), "10k": (10000, 100), "100k": (100000, 200)}
FORMATS = ["tar.gz", "tar.zst", "zip"]


def measures(h, id):
    return not id.endswith(".before") or h.before


def run(h):
    baseline = os.path.join(os.path.dirname(__file__), "..", "baseline.sh")
    www = h.path("www")
    repos = {}
    for name, (full, smoke) in SIZES.items():
        n = h.size(full, smoke)
        site = h.path(f"site-{name}")
        sites.bundle(site, n)
        for format in FORMATS:
            # zstd at its default level 3; gzip and deflate at 6 (gzip's own default): 9 takes minutes at
            # 100k files and unpacks no faster.
            level = "3" if format == "tar.zst" else "6"
            h.opk("publish", site, "--repo", f"{www}/{name}-{format}", "--id", "app", "--version", "1",
                  "--route", "https://m.example.com/", "--format", format, "--compression-level", level, "--quiet")
        h.wipe(site)
        repos[name] = n
    nginx = h.nginx(www)
    for name, n in repos.items():
        for format in FORMATS:
            url = nginx.url(f"{name}-{format}/manifest.json")
            root, dest = h.path("root"), h.path("script")
            sides = {
                "offlinepkg": ([h.offlinepkg, "sync", url, "--root", root, "--quiet"], lambda: h.wipe(root)),
                "script": ([baseline, url, dest], lambda: h.wipe(dest)),
                "flushed": (["env", "BASELINE_FLUSH=1", baseline, url, dest], lambda: h.wipe(dest)),
            }
            if h.before:
                sides["before"] = ([h.before, "sync", url, "--root", root, "--quiet"], lambda: h.wipe(root))
            if name == "100k" and not h.smoke:
                # A run takes seconds: as many rounds as sides, no warm-up, so every side goes first once.
                samples = h.race(sides, h.runs(len(sides)), warmup=False)
            else:
                samples = h.race(sides, h.runs(5))
            ours, theirs, flushed = (median(samples[s]) for s in ("offlinepkg", "script", "flushed"))
            ms = lambda s: f"{s * 1000:.0f} ms"
            h.figure(f"sync-single.{name}.{format}", f"one package, {n} files, {format}: offlinepkg / script",
                     ratio(ours, theirs), ours=ms(ours), theirs=ms(theirs), samples=samples)
            h.figure(f"sync-single.{name}.{format}.flushed", f"one package, {n} files, {format}: offlinepkg / flushed script",
                     ratio(ours, flushed), ours=ms(ours), theirs=ms(flushed))
            if h.before:
                before = median(samples["before"])
                h.figure(f"sync-single.{name}.{format}.before", f"one package, {n} files, {format}: offlinepkg / --before",
                         ratio(ours, before), ours=ms(ours), theirs=ms(before))
