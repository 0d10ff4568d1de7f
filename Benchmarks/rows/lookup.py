"""`offlinepkg lookup` of one URL on roots of 1k, 10k and 100k files, process start included.

A lookup opens the root's index and answers one URL: what a shell that shells out pays per URL, and a
bound on how the index's open grows with the number of files (it is mapped, not read).
"""
import sites
from harness import median, ratio

SIZES = {"1k": (1000, 50), "10k": (10000, 100), "100k": (100000, 200)}


def measures(h, id):
    return not id.endswith(".before") or h.before


def run(h):
    for name, (full, smoke) in SIZES.items():
        n = h.size(full, smoke)
        site, repo, root = h.path(f"site-{name}"), h.path(f"repo-{name}"), h.path(f"root-{name}")
        sites.small_files(site, n)
        h.opk("publish", site, "--repo", repo, "--id", "app", "--version", "1", "--route", "https://bench.offlinepkg.test/", "--quiet")
        h.opk("sync", f"file://{repo}/manifest.json", "--root", root, "--quiet")
        url = "https://bench.offlinepkg.test/" + sites.small_file_path(n - 1)
        sides = {"offlinepkg": ([h.offlinepkg, "lookup", url, "--root", root], None)}
        if h.before:
            before_root = h.path(f"root-{name}-before")
            h.opk("sync", f"file://{repo}/manifest.json", "--root", before_root, "--quiet", binary=h.before)
            sides["before"] = ([h.before, "lookup", url, "--root", before_root], None)
        samples = h.race(sides, h.runs(20, 2))
        ours = median(samples["offlinepkg"])
        h.figure(f"lookup.{name}", f"lookup of one URL, {n} files", ours * 1000, samples=samples)
        if h.before:
            before = median(samples["before"])
            h.figure(f"lookup.{name}.before", f"lookup, {n} files: offlinepkg / --before", ratio(ours, before),
                     ours=f"{ours * 1000:.1f} ms", theirs=f"{before * 1000:.1f} ms")
        h.wipe(site)
