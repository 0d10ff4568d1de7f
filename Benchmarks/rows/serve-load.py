"""`offlinepkg serve` against nginx over the same installed tree, under `wrk` at 64 and 512 keep-alive
connections: a 13 KB page's p99 latency and timeouts, and a 3 MiB file's requests per second.

nginx is configured as a typical static server (worker_processes auto, sendfile, keep-alive) and serves
the very files serve answers from. The servers alternate run by run; each figure is the median of the
runs. A webview's page load is many small requests at once (the p99 is what a user waits on); a media
file is throughput.
"""
import os, subprocess
from harness import median, ratio

CONNECTIONS = [64, 512]
BODIES = {"page": "index.html", "file": "big.bin"}


def measures(h, id):
    return not id.endswith(".before") or h.before


def run(h):
    site, repo, root = h.path("site"), h.path("repo"), h.path("root")
    os.makedirs(site)
    with open(os.path.join(site, "index.html"), "w") as f:
        f.write(("<!doctype html><title>bench</title><p>" + "x" * 13312)[:13312])
    with open(os.path.join(site, "big.bin"), "wb") as f:
        f.write(os.urandom(3 << 20))
    h.opk("publish", site, "--repo", repo, "--id", "bench", "--version", "1", "--route", "https://bench.offlinepkg.test/", "--quiet")
    h.opk("sync", f"file://{repo}/manifest.json", "--root", root, "--quiet")
    tree = os.path.dirname(h.opk("lookup", "https://bench.offlinepkg.test/index.html", "--root", root).strip())
    subprocess.run(["chmod", "-R", "a+rX", root], check=True)
    servers = {"nginx": h.nginx(tree, workers="auto").url()}
    servers["serve"] = h.serve(root)[1]
    if h.before:
        servers["before"] = h.serve(root, binary=h.before)[1]
    for name, base in servers.items():
        for body in BODIES.values():
            h.get(base + body, host="bench.offlinepkg.test", check=True)
    duration = h.size("10s", "1s")
    runs = {}
    for _ in range(h.runs(3)):
        for connections in CONNECTIONS:
            for body, path in BODIES.items():
                for name, base in servers.items():
                    runs.setdefault((name, body, connections), []).append(h.wrk(base + path, connections, duration))

    def m(name, body, connections, key):
        return median([r[key] for r in runs[(name, body, connections)]])

    def every(body, connections, key):
        return {name: [r[key] for r in runs[(name, body, connections)]] for name in servers}

    for connections in CONNECTIONS:
        ours, theirs = m("serve", "page", connections, "p99_ms"), m("nginx", "page", connections, "p99_ms")
        h.figure(f"serve-load.page-p99-{connections}", f"13 KB page p99 at {connections} connections: serve / nginx",
                 ratio(ours, theirs), ours=f"{ours:.2f} ms", theirs=f"{theirs:.2f} ms", samples=every("page", connections, "p99_ms"),
                 detail=f"requests/s serve {m('serve', 'page', connections, 'rps'):.0f}, nginx {m('nginx', 'page', connections, 'rps'):.0f}")
        if h.before:
            before = m("before", "page", connections, "p99_ms")
            h.figure(f"serve-load.page-p99-{connections}.before", f"13 KB page p99 at {connections} connections: serve / --before",
                     ratio(ours, before), ours=f"{ours:.2f} ms", theirs=f"{before:.2f} ms")
    ours, theirs = m("serve", "page", 512, "timeouts"), m("nginx", "page", 512, "timeouts")
    h.figure("serve-load.page-timeouts-512", "13 KB page timeouts at 512 connections: serve's less nginx's", ours - theirs,
             samples=every("page", 512, "timeouts"), detail=f"serve {ours:.0f}, nginx {theirs:.0f}")
    ours, theirs = m("serve", "file", 64, "rps"), m("nginx", "file", 64, "rps")
    h.figure("serve-load.file-rps-64", "3 MiB file requests/s at 64 connections: serve / nginx", ratio(ours, theirs),
             ours=f"{ours:.0f}", theirs=f"{theirs:.0f}", samples=every("file", 64, "rps"))
    ours, theirs = m("serve", "file", 512, "rps"), m("nginx", "file", 512, "rps")
    h.figure("serve-load.file-rps-512", "3 MiB file requests/s at 512 connections: serve / nginx", ratio(ours, theirs),
             ours=f"{ours:.0f}", theirs=f"{theirs:.0f}")
