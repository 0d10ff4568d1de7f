"""What a download cut off by kill -9 costs when the next sync resumes it: the bytes fetched twice.

A 20 MB incompressible archive behind nginx (`limit_rate 4000000`); the sync is killed with SIGKILL
after 2 s and run again. The second request asks for the rest (`Range`, `If-Range`); the bytes come from
nginx's access log, whose count for the killed request can exceed what reached the disk by what was
still in the socket buffers. Figure: the bytes fetched twice, as a percentage of the archive.
"""
import json, os, signal, subprocess, time


def run(h):
    megabytes, rate = h.size(20, 2), h.size(4000000, 1000000)
    site, www = h.path("site"), h.path("www", "archives")
    os.makedirs(site)
    os.makedirs(www)
    with open(os.path.join(site, "big.bin"), "wb") as f:
        f.write(os.urandom(megabytes * 1000000))
    with open(os.path.join(site, "index.html"), "w") as f:
        f.write("hi\n")
    h.opk("publish", site, "--repo", h.path("www"), "--id", "a", "--version", "1", "--route", "https://m.example.com/",
          "--format", "tar.gz", "--quiet")
    nginx = h.nginx(h.path("www"), log=True, http=f"limit_rate {rate};")
    url, root = nginx.url("manifest.json"), h.path("root")
    first = h.start([h.offlinepkg, "sync", url, "--root", root, "--quiet"], stderr=subprocess.DEVNULL)
    time.sleep(2 if not h.smoke else 1)
    first.send_signal(signal.SIGKILL)
    first.wait()
    h.opk("sync", url, "--root", root, "--quiet")
    time.sleep(0.2)
    archive = json.load(open(h.path("www", "manifest.json")))["packages"][0]["archive"]
    lines = [line for line in nginx.log_lines() if line[0] == "/" + archive["url"]]
    if len(lines) != 2 or lines[1][1] != "206":
        h.figure("sync-resume", "bytes fetched twice after kill -9 / archive", None,
                 detail=f"expected a 200 then a 206 for the archive, got {[(l[1], l[2]) for l in lines]}")
        return
    fetched = sum(int(line[2]) for line in lines)
    twice = fetched - archive["size"]
    h.figure("sync-resume", f"bytes fetched twice after kill -9, {archive['size']:,} B archive / archive",
             twice * 100 / archive["size"], ours=f"{twice:,} B", theirs=f"{archive['size']:,} B",
             detail=f"killed request {lines[0][2]} B, resumed request {lines[1][2]} B (206)")
