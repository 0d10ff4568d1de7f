"""A sync that finds nothing new (the manifest answers 304) against one curl of the manifest.

Both are one process of a few milliseconds: process start and one conditional request are most of it.
The root holds one package of the bundle site; nginx answers `If-None-Match` with a 304. With
`--before`, the other build's no-op sync (on a root of its own) races in the same rounds.
"""
import sites
from harness import median, ratio


def measures(h, id):
    return not id.endswith(".before") or h.before


def run(h):
    site = h.path("site")
    sites.bundle(site, h.size(1000, 50))
    h.opk("publish", site, "--repo", h.path("www", "repo"), "--id", "app", "--version", "1",
          "--route", "https://m.example.com/", "--quiet")
    nginx = h.nginx(h.path("www"))
    url, root = nginx.url("repo/manifest.json"), h.path("root")
    h.opk("sync", url, "--root", root, "--quiet")
    sides = {
        "offlinepkg": ([h.offlinepkg, "sync", url, "--root", root, "--quiet"], None),
        "curl": (["curl", "-fsS", "-o", "/dev/null", url], None),
    }
    if h.before:
        before_root = h.path("root-before")
        h.opk("sync", url, "--root", before_root, "--quiet", binary=h.before)
        sides["before"] = ([h.before, "sync", url, "--root", before_root, "--quiet"], None)
    samples = h.race(sides, h.runs(50, 3))
    ours, theirs = median(samples["offlinepkg"]), median(samples["curl"])
    h.figure("sync-noop", "no-op sync (304) / one curl of the manifest", ratio(ours, theirs),
             ours=f"{ours * 1000:.1f} ms", theirs=f"{theirs * 1000:.1f} ms", samples=samples)
    if h.before:
        before = median(samples["before"])
        h.figure("sync-noop.before", "no-op sync, --before / one curl of the manifest", ratio(before, theirs),
                 ours=f"{before * 1000:.1f} ms", theirs=f"{theirs * 1000:.1f} ms")
