"""publish against the tool it replaces: `offlinepkg publish` (chunked tar.zst, the default, and
`--layout solid`) against `bsdtar --zstd -cf` of the same folder, and what the chunked layout costs in
size.

The site: the first 10,000 regular files under 2 MiB of /usr/share/doc and /usr/include (documentation
and C headers). A publish does more than bsdtar (hashes every file, writes the file index and the
manifest), so the target allows it half as long again. With `--before`, the build before publishes the
chunked layout in the same race, into a repository of its own.
"""
import glob, os
import sites
from harness import median, ratio


def measures(h, id):
    return not id.endswith(".before") or h.before


def run(h):
    count = h.size(10000, 50)
    site = h.path("site")
    sites.real_files(site, count, ("/usr/share/doc", "/usr/include"), largest=2 << 20)
    with open(os.path.join(site, "index.html"), "w") as f:
        f.write("<title>bench</title>\n")
    chunked, solid, tarball = h.path("repo"), h.path("repo-solid"), h.path("b.tar.zst")
    publish = [h.offlinepkg, "publish", site, "--id", "site", "--version", "1", "--route", "https://m.example.com/", "--quiet"]
    sides = {
        "chunked": (publish + ["--repo", chunked], lambda: h.wipe(chunked)),
        "solid": (publish + ["--repo", solid, "--layout", "solid"], lambda: h.wipe(solid)),
        "bsdtar": (["bsdtar", "--zstd", "-cf", tarball, "-C", site, "."], lambda: h.wipe(tarball)),
    }
    if h.before:
        before = h.path("repo-before")
        sides["before"] = ([h.before] + publish[1:] + ["--repo", before], lambda: h.wipe(before))
    samples = h.race(sides, h.runs(5))
    a, b, c = (median(samples[s]) for s in ("chunked", "solid", "bsdtar"))
    s = lambda t: f"{t:.2f} s"
    h.figure("publish.chunked", f"publish tar.zst (chunked), {count} files / bsdtar --zstd -cf", ratio(a, c),
             ours=s(a), theirs=s(c), samples=samples)
    if h.before:
        d = median(samples["before"])
        h.figure("publish.chunked.before", f"publish tar.zst (chunked), {count} files: offlinepkg / --before", ratio(a, d),
                 ours=s(a), theirs=s(d), samples={k: samples[k] for k in ("chunked", "before")})
    h.figure("publish.solid", f"publish tar.zst --layout solid, {count} files / bsdtar --zstd -cf", ratio(b, c),
             ours=s(b), theirs=s(c))
    chunked_size = os.path.getsize(glob.glob(f"{chunked}/archives/site/1/*.tar.zst")[0])
    solid_size = os.path.getsize(glob.glob(f"{solid}/archives/site/1/*.tar.zst")[0])
    index_size = os.path.getsize(glob.glob(f"{chunked}/files/*.json.zst")[0])
    h.figure("publish.size", "chunked archive / solid archive, bytes", chunked_size / solid_size,
             ours=f"{chunked_size:,} B", theirs=f"{solid_size:,} B", detail=f"file index {index_size:,} B")
