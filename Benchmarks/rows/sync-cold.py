"""Cold sync of a real site in 4 packages from nginx, tar.gz and tar.zst, against the baseline script.

The site: the first 3,600 regular files of /usr/share/doc in byte order, split at top-level folder
boundaries into 4 packages. Each side installs into a fresh folder every round (the last round's output
moved aside and flushed first); the order rotates round by round. The script (Benchmarks/baseline.sh)
fetches, checks and unpacks one archive after another and does less than a sync (no tree hash, no
read-only tree, no flush, no switch): the floor a sync has to beat.
"""
import os
import sites
from harness import median, ratio

FORMATS = ["tar.gz", "tar.zst"]


def measures(h, id):
    return not id.endswith(".before") or h.before


def run(h):
    count = h.size(3600, 60)
    files = sites.real_files(h.path("site"), count, base="/usr/share/doc")
    www = h.path("www")
    os.makedirs(www, exist_ok=True)
    for number, site, paths in sites.packages(h.path("site"), files, 4, lambda number: h.path(f"site-p{number}")):
        for format in FORMATS:
            h.opk("publish", site, "--repo", f"{www}/{format}", "--id", f"p{number}", "--version", "1",
                  "--route", f"https://m.example.com/p{number}/", "--entry", paths[0], "--format", format, "--quiet")
    nginx = h.nginx(www)
    rounds = h.runs(10)
    for format in FORMATS:
        url = nginx.url(f"{format}/manifest.json")
        root, dest = h.path(f"root-{format}"), h.path(f"script-{format}")
        sides = {
            "offlinepkg": ([h.offlinepkg, "sync", url, "--root", root, "--quiet"], lambda: h.wipe(root)),
            "script": ([os.path.join(os.path.dirname(__file__), "..", "baseline.sh"), url, dest], lambda: h.wipe(dest)),
        }
        if h.before:
            sides["before"] = ([h.before, "sync", url, "--root", root, "--quiet"], lambda: h.wipe(root))
        samples = h.race(sides, rounds)
        ours, theirs = median(samples["offlinepkg"]), median(samples["script"])
        label = f"cold sync, {len(files)} files in 4 packages, {format}: offlinepkg / script"
        h.figure(f"sync-cold.{format}", label, ratio(ours, theirs), ours=f"{ours * 1000:.0f} ms",
                 theirs=f"{theirs * 1000:.0f} ms", samples=samples)
        if h.before:
            before = median(samples["before"])
            h.figure(f"sync-cold.{format}.before", f"cold sync, {format}: offlinepkg / --before",
                     ratio(ours, before), ours=f"{ours * 1000:.0f} ms", theirs=f"{before * 1000:.0f} ms")
