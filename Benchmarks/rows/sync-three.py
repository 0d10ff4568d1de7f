"""A cold sync of three packages, what a device pays for it: peak RSS and CPU time (user + system)
against the baseline script's, and its wall time.

The site: the first 3,600 regular files of /usr/share/doc in byte order, split at top-level folder
boundaries into 3 packages, published in the default format (tar.zst). Peak RSS and CPU come from GNU
time (the script's: its largest process, and all its processes' CPU). A phone pays CPU in battery: the
sync's wall-clock win comes from running things side by side, its CPU must not pay for it.
"""
import os
import sites
from harness import median, ratio


def measures(h, id):
    return not id.endswith(".before") or h.before


def measure(h, argv):
    """(wall s, user + system s, peak RSS KiB) of one run, its children included."""
    out = h.path("time.txt")
    wall = h.time_once(["/usr/bin/time", "-f", "%U %S %M", "-o", out, *argv])
    user, system, kib = open(out).read().split()[-3:]
    return wall, float(user) + float(system), int(kib)


def run(h):
    count = h.size(3600, 60)
    files = sites.real_files(h.path("site"), count, base="/usr/share/doc")
    www = h.path("www")
    for number, site, paths in sites.packages(h.path("site"), files, 3, lambda number: h.path(f"site-p{number}")):
        h.opk("publish", site, "--repo", www, "--id", f"p{number}", "--version", "1",
              "--route", f"https://m.example.com/p{number}/", "--entry", paths[0], "--quiet")
    nginx = h.nginx(www)
    url = nginx.url("manifest.json")
    sides = {"offlinepkg": [h.offlinepkg, "sync", url, "--root", h.path("root"), "--quiet"],
             "script": [os.path.join(os.path.dirname(__file__), "..", "baseline.sh"), url, h.path("script")]}
    if h.before:
        sides["before"] = [h.before, "sync", url, "--root", h.path("root"), "--quiet"]
    got = {name: [] for name in sides}
    names = list(sides)
    for round in range(h.runs(8, 1) + 1):  # round 0 warms the page cache
        for k in range(len(names)):
            name = names[(round + k) % len(names)]
            h.wipe(h.path("root"))
            h.wipe(h.path("script"))
            result = measure(h, sides[name])
            if round:
                got[name].append(result)
    def figures(name):
        return (median([r[0] for r in got[name]]), median([r[1] for r in got[name]]), [r[2] / 1024 for r in got[name]])
    wall, cpu, rss = figures("offlinepkg")
    script_wall, script_cpu, script_rss = figures("script")
    h.figure("sync-three.rss", f"peak RSS, cold sync of {len(files)} files in 3 packages", median(rss),
             samples=rss, detail=f"the script's largest process {median(script_rss):.1f} MiB")
    h.figure("sync-three.cpu", "CPU (user + system) of that sync / the script's", ratio(cpu, script_cpu),
             ours=f"{cpu:.3f} s", theirs=f"{script_cpu:.3f} s")
    h.figure("sync-three.wall", "wall time of that sync / the script's", ratio(wall, script_wall),
             ours=f"{wall * 1000:.0f} ms", theirs=f"{script_wall * 1000:.0f} ms")
    if h.before:
        before_wall, before_cpu, before_rss = figures("before")
        h.figure("sync-three.rss.before", "peak RSS, cold sync of 3 packages: offlinepkg / --before", ratio(median(rss), median(before_rss)),
                 ours=f"{median(rss):.1f} MiB", theirs=f"{median(before_rss):.1f} MiB")
        h.figure("sync-three.cpu.before", "CPU of that sync: offlinepkg / --before", ratio(cpu, before_cpu),
                 ours=f"{cpu:.3f} s", theirs=f"{before_cpu:.3f} s")
