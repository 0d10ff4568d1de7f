"""The runtime cache through `offlinepkg serve`: a cached hit against nginx serving the same body as a
static file, misses (a new URL each) against nginx as a caching reverse proxy (`proxy_cache`), and the
memory each stored entry costs; and what serve's own work per cached hit costs in CPU time, over
keep-alive connections and with a new connection per request (`Connection: close`, so each request pays
what serve does once per connection: the peer's uid lookup of docs/protocol.md#neighbours-on-the-device
among it). CPU time per request (user + system from /proc/PID/stat over the run) holds within a few
percent from run to run on a machine others load, where requests per second swing by a fifth. With
`--before`, the build before races the same two hits on a root of its own, alternating.

One nginx is the upstream API (every /v1/ path answers the same 2 KB JSON file with its ETag) and, on a
second port, the caching proxy in front of it. serve runs a package whose manifest has one
`cache-first` rule for the API, reached through `--resolve`. A miss here is made durable (fsync) before
it is stored; nginx's proxy cache never flushes: the miss figure is given for information.
"""
import json, os, subprocess, time
from harness import Failure, free_port, median, ratio

MISS_SCRIPT = """local threads = 0
function setup(thread) threads = threads + 1; thread:set("id", threads) end
function init(args) n = 0 end
function request() n = n + 1; return wrk.format("GET", "/v1/miss-" .. id .. "-" .. n) end
"""


def measures(h, id):
    return not id.endswith(".before") or h.before


def run(h):
    upstream, proxy = free_port(), free_port()
    api = f"api.bench.test:{upstream}"
    body_dir = h.path("upstream")
    os.makedirs(body_dir)
    with open(os.path.join(body_dir, "data.json"), "w") as f:
        f.write(json.dumps({"items": [{"id": i, "name": f"item {i}"} for i in range(80)]})[:2048])
    cache = h.path("proxy-cache")
    os.makedirs(cache)
    nginx = h.nginx(None, workers="auto", http=f"""
    proxy_cache_path {cache} levels=1:2 keys_zone=runtime:10m max_size=20m inactive=1h;
    upstream api {{ server 127.0.0.1:{upstream}; keepalive 32; }}""", servers=[
        f"server {{ listen 127.0.0.1:{upstream}; root {body_dir}; location /v1/ {{ try_files /data.json =404; }} }}",
        f"""server {{ listen 127.0.0.1:{proxy}; location / {{ proxy_cache runtime; proxy_cache_valid 200 1h;
            proxy_http_version 1.1; proxy_set_header Connection ""; proxy_pass http://api; }} }}"""])
    site = h.path("site")
    os.makedirs(site)
    with open(os.path.join(site, "index.html"), "w") as f:
        f.write("<!doctype html><title>app</title>\n")
    with open(h.path("rules.json"), "w") as f:
        json.dump({"rules": [{"prefix": f"http://{api}/v1/", "strategy": "cache-first", "maxAge": 3600}]}, f)
    repo, root, empty = h.path("repo"), h.path("root"), h.path("empty-root")
    h.opk("publish", site, "--repo", repo, "--id", "app", "--version", "1", "--route", "http://app.bench.test/",
          "--runtime", h.path("rules.json"), "--quiet")
    for r in (root, empty):
        h.opk("sync", f"file://{repo}/manifest.json", "--root", r, "--quiet")
    h.wait_for(lambda: h.get(f"http://127.0.0.1:{upstream}/v1/data.json"), 10, "the upstream nginx did not answer")

    server, base = h.serve(root, "--resolve", f"{api}:127.0.0.1")
    h.get(base + "v1/data.json", host=api, check=True)
    before = None
    if h.before:
        before_root = h.path("before-root")
        h.opk("sync", f"file://{repo}/manifest.json", "--root", before_root, "--quiet", binary=h.before)
        before = h.serve(before_root, "--resolve", f"{api}:127.0.0.1", binary=h.before)
        h.get(before[1] + "v1/data.json", host=api, check=True)
    status = h.run(["curl", "-s", "-D", "-", "-o", "/dev/null", "-H", f"Host: {api}", base + "v1/data.json"])
    if "offlinepkg; hit" not in status:
        raise Failure(f"expected a hit from serve's runtime cache, got: {status.strip()}")
    script = h.path("miss.lua")
    with open(script, "w") as f:
        f.write(MISS_SCRIPT)
    duration = h.size("10s", "1s")
    hit = h.wrk(base + "v1/data.json", 32, duration, host=api)
    static = h.wrk(f"http://127.0.0.1:{upstream}/v1/data.json", 32, duration, host=api)
    # serve's CPU time per cached hit, kept-alive and a new connection each, alternating with --before.
    cpu = {side: {"keep-alive": [], "close": []} for side in (["ours", "before"] if before else ["ours"])}
    for _ in range(h.runs(3)):
        for side, (process, url) in [("ours", (server, base))] + ([("before", before)] if before else []):
            for mode, header in (("keep-alive", None), ("close", "Connection: close")):
                cpu[side][mode].append(cpu_per_request(h, process.pid, url + "v1/data.json", api, header, duration))
    if before:
        before[0].terminate()
        before[0].wait()
    miss = h.wrk(base, 32, duration, host=api, script=script)
    cached = h.wrk(f"http://127.0.0.1:{proxy}/", 32, duration, host=api, script=script)
    time.sleep(1)
    entries = json.loads(h.opk("status", "--root", root, "--json"))["runtime"]["entries"]
    server.terminate()
    server.wait()

    # Bookkeeping: serve with the full store loaded against serve on an empty store, each after one hit.
    rss = {}
    for name, r in (("empty", empty), ("full", root)):
        process, url = h.serve(r, "--resolve", f"{api}:127.0.0.1")
        for _ in range(2):
            h.get(url + "v1/data.json", host=api)
        time.sleep(0.5)
        rss[name] = h.memory(process.pid)[0]
        process.terminate()
        process.wait()

    rate = lambda r: f"{r['rps']:,.0f} req/s (p99 {r['p99_ms']:.1f} ms)"
    h.figure("runtime.hit", "cached hit through serve / the same body from nginx as a static file", ratio(hit["rps"], static["rps"]),
             ours=rate(hit), theirs=rate(static))
    h.figure("runtime.miss", "miss (a new URL each) through serve / nginx proxy_cache", ratio(miss["rps"], cached["rps"]),
             ours=rate(miss), theirs=rate(cached))
    for mode, what in (("keep-alive", "over keep-alive connections"), ("close", "a new connection each")):
        ours = median(cpu["ours"][mode])
        h.figure(f"runtime.hit-cpu.{mode}", f"serve's CPU time per cached hit, {what}", ours,
                 detail=" ".join(f"{v:.1f}" for v in cpu["ours"][mode]))
        if before:
            theirs = median(cpu["before"][mode])
            h.figure(f"runtime.hit-cpu.{mode}.before", f"serve's CPU per cached hit, {what}: offlinepkg / --before",
                     ratio(ours, theirs), ours=f"{ours:.1f} µs", theirs=f"{theirs:.1f} µs")
    h.figure("runtime.memory-per-entry", f"serve's memory per stored entry ({entries} entries)",
             (rss["full"] - rss["empty"]) * 1024 / entries if entries else None,
             detail=f"VmRSS {rss['full']} KiB loaded, {rss['empty']} KiB empty")


def cpu_per_request(h, pid, url, host, header, duration):
    """serve's user + system time per request over one wrk run, in µs."""
    def ticks():
        fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return int(fields[11]) + int(fields[12])
    argv = ["wrk", "-t2", "-c32", f"-d{duration}", "-H", f"Host: {host}"] + (["-H", header] if header else []) + [url]
    start = ticks()
    out = h.run(argv)
    spent = ticks() - start
    requests = next((int(line.split()[0]) for line in out.splitlines() if "requests in" in line), 0)
    if not requests:
        raise Failure(f"wrk counted no requests for {url}: {out[-300:]}")
    return spent * 1e6 / os.sysconf("SC_CLK_TCK") / requests
