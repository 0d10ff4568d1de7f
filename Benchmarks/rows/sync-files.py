"""File-level updates: the bytes a device on release 1 fetches for gaps of 1, 5 and 20 releases, against
the ideal (the frames of the files it lacks, from the file index, plus the index).

The site: the first 3,000 regular files under 2 MiB of /usr/share/doc and /usr/include in byte order,
published as 21 chunked tar.zst releases (`--deltas 1`), each appending a line to five files. Devices
sync by the manifest as published (the device picks the cheapest way); for gap 1, where a delta exists,
a second device syncs by a copy of the manifest without deltas, so that files are measured against the
full archive. Bytes and requests are nginx's access log, the manifest left out.
"""
import json, os, subprocess, time
import sites

GAPS = [1, 5, 20]


def index_entries(path):
    return json.loads(subprocess.run(["zstd", "-dc", path], capture_output=True, check=True).stdout)


def run(h):
    count = h.size(3000, 60)
    www = h.path("www")
    site, repo = h.path("site"), os.path.join(www, "repo")
    paths = sorted(sites.real_files(site, count, ("/usr/share/doc", "/usr/include"), largest=2 << 20),
                   key=lambda p: p.encode())
    with open(os.path.join(site, "index.html"), "w") as f:
        f.write("<title>bench</title>\n")

    def publish(version):
        h.opk("publish", site, "--repo", repo, "--id", "site", "--version", version, "--route", "https://m.example.com/",
              "--deltas", "1", "--quiet")
        manifest = json.load(open(os.path.join(repo, "manifest.json")))
        for package in manifest["packages"]:
            package.pop("deltas", None)
        with open(os.path.join(repo, "manifest-files.json"), "w") as f:
            json.dump(manifest, f)
        # nginx's ETag is the mtime in seconds and the size, and two releases' manifests can have one size:
        # written within one second, the next sync would be answered 304. Each release its own mtime.
        stamp = time.time() + int(version)
        for name in ("manifest.json", "manifest-files.json"):
            os.utime(os.path.join(repo, name), (stamp, stamp))

    def change(version):  # five files of its own, spread over the site
        for step in range(5):
            with open(os.path.join(site, paths[(version * 7919 + step * 104729) % len(paths)]), "a") as f:
                f.write(f"\nchanged in release {version}\n")

    publish("1")
    nginx = h.nginx(www, log=True)
    devices = {(gap, "published"): h.path(f"device-{gap}") for gap in GAPS}
    devices[(1, "without deltas")] = h.path("device-1-files")
    for (gap, kind), root in devices.items():
        h.opk("sync", nginx.url("repo/manifest.json" if kind == "published" else "repo/manifest-files.json"), "--root", root, "--quiet")
    held = {e["sha256"] for e in index_entries(os.path.join(repo, json.load(open(os.path.join(repo, "manifest.json")))
                                                             ["packages"][0]["archive"]["files"]["url"]))}
    version = 1
    for gap in GAPS:
        while version < 1 + gap:
            version += 1
            change(version)
            publish(str(version))
        entry = json.load(open(os.path.join(repo, "manifest.json")))["packages"][0]
        files = entry["archive"]["files"]
        lacking = {e["sha256"]: e["length"] for e in index_entries(os.path.join(repo, files["url"])) if e["sha256"] not in held}
        ideal = sum(lacking.values()) + files["size"]
        for kind in ("published", "without deltas"):
            if (gap, kind) not in devices:
                continue
            mark = nginx.mark()
            name = "manifest.json" if kind == "published" else "manifest-files.json"
            report = json.loads(h.opk("sync", nginx.url(f"repo/{name}"), "--root", devices[(gap, kind)], "--json", "--quiet"))
            via = report["changes"][0].get("via")
            sent, requests = nginx.served_since(mark, lambda uri: "manifest" not in uri)
            detail = f"via {via}, {requests} requests; full archive {entry['archive']['size']:,} B"
            if (gap, kind) == (1, "published"):
                # One release behind, the delta is smaller than the index: the device takes it.
                delta = next(d["size"] for d in entry["deltas"] if d["from"] == "1")
                h.figure("sync-files.gap1.published", f"1 release behind, as published: bytes / the delta",
                         sent / delta, ours=f"{sent:,} B", theirs=f"{delta:,} B", detail=detail)
            else:
                behind = "1 release" if gap == 1 else f"{gap} releases"
                h.figure(f"sync-files.gap{gap}", f"{behind} behind, {kind}: bytes / changed files' frames + index",
                         sent / ideal, ours=f"{sent:,} B", theirs=f"{ideal:,} B", detail=detail)
