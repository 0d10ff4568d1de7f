"""File-level updates on the origins publishers really have: bytes against the ideal per origin and gap,
range requests on single-range origins, and wall time over a slow link.

Sites: `docs`, the Python 3.11 HTML docs (python3.11-doc, about 1,060 files, 67 MB; a generated stand-in
of the same shape when it is not installed, said in the figure's detail), and `100k`, 100,000 bundler
files (`sites.bundle`). Each is published as 21 chunked tar.zst releases (`--deltas 0`: updates go by
files), three files changed per release. Origins, all nginx on loopback serving the one repository:

    multi  nginx as it is: several ranges a request (206 multipart/byteranges)
    s3     `max_ranges 1`: several ranges get the whole file, as S3, GCS and R2 answer
    oss    `if ($http_range ~ ",") { return 416; }`: several ranges get 416, as Alibaba OSS answers
    edge   a caching nginx (proxy_cache) in front of `multi`; bytes counted at the edge

Devices start on release 1 (one cold sync, copied per device, so no device knows an origin) and sync to
releases 2, 6 and 21 (1, 5 and 20 behind). Bytes: nginx's body bytes for every request but the
manifest; the archive's GETs (a range probe is a HEAD). The ideal: the frames of the files release 1 lacks plus, on `docs`, the index delta; plus an
allowance for headers and, on `100k`, the index (ALLOWANCE). On s3 and oss the archive's GETs are compared with
those a one-range plan needs (the same greedy merge of gaps within the waste budget).

Then wall time on `docs`, 5 behind, HTTP/2 over TLS (a CA made here by openssl) through
`Benchmarks/slowlink.py` at 150 ms RTT and 8 Mbit/s, against 3 round trips + bytes / bandwidth. The same
sync straight to the origin is taken first and taken off: the target is about the link, not about
hashing held content on a loaded machine; the median of three such rounds, each on fresh copies of the
device. The device on the link remembers the origin speaks HTTP/2 (its `origins.json` says so, as any
earlier check of that URL leaves it): a sync asks for the newest index delta beside a slow manifest only
then (docs/protocol.md#file-index-deltas). With --before, the older build syncs the same repository the same way (`origins.link.before`). The origin speaks TLS 1.3 (one round trip to a shared key), as
CDNs and object stores do; nginx before 1.23.4 offers TLS 1.2 at most unless told, a round trip more.

ORIGINS_SITES=docs (a comma list of `docs`, `100k`) runs those sites only.
"""
import json, os, shutil, subprocess, sys, time
import harness, sites

GAPS = [1, 5, 20]
ORIGINS = ["multi", "s3", "oss", "edge"]
SINGLE_RANGE = ("s3", "oss")
# Bytes a sync may spend beyond the ideal whatever its size: answer headers, and on 100k the index
# (whose delta is not in that site's ideal).
ALLOWANCE = {"docs": 8192, "100k": 65536}
RTT_MS, RATE_MBIT = 150, 8


def index_entries(path):
    return json.loads(subprocess.run(["zstd", "-dc", path], capture_output=True, check=True).stdout)


def needed_gets(wanted):
    """The range GETs a one-range plan needs for `wanted` [(offset, length)]: neighbours merge, smallest
    gap first, while the bytes wasted stay within a sixteenth of the wanted bytes plus 4 KiB."""
    wanted = sorted(wanted)
    budget, spent, merged = sum(l for _, l in wanted) // 16 + 4096, 0, 0
    for gap in sorted(wanted[i + 1][0] - wanted[i][0] - wanted[i][1] for i in range(len(wanted) - 1)):
        if spent + gap > budget:
            break
        spent += gap
        merged += 1
    return len(wanted) - merged


def sync(h, url, root, *extra, binary=None):
    """(via, seconds) of one sync; via None when it failed (its figures are then not measured)."""
    start = time.monotonic()
    done = subprocess.run([binary or h.offlinepkg, "sync", url, "--root", root, "--json", "--quiet", *extra],
                          capture_output=True, text=True, timeout=3600)
    seconds = time.monotonic() - start
    if done.returncode != 0:
        print(f"origins: sync {url} exited {done.returncode}: {done.stderr.strip()[-300:]}", file=sys.stderr)
        return None, seconds
    return json.loads(done.stdout)["changes"][0].get("via"), seconds


def certificates(folder):
    """A CA and a certificate for 127.0.0.1 it signs: (ca.crt, tls.crt, tls.key)."""
    os.makedirs(folder, exist_ok=True)
    p = lambda name: os.path.join(folder, name)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    quietly = lambda argv: subprocess.run(argv, check=True, capture_output=True)
    quietly(["openssl", "req", "-x509", *ec, "-days", "2", "-subj", "/CN=bench CA", "-addext",
           "basicConstraints=critical,CA:TRUE", "-keyout", p("ca.key"), "-out", p("ca.crt")])
    quietly(["openssl", "req", "-new", *ec, "-subj", "/CN=127.0.0.1", "-keyout", p("tls.key"), "-out", p("tls.csr")])
    with open(p("ext"), "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\n")
    quietly(["openssl", "x509", "-req", "-in", p("tls.csr"), "-CA", p("ca.crt"), "-CAkey", p("ca.key"),
           "-CAcreateserial", "-days", "2", "-extfile", p("ext"), "-out", p("tls.crt")])
    return p("ca.crt"), p("tls.crt"), p("tls.key")


def slow_link(h, upstream):
    """Benchmarks/slowlink.py in front of `upstream`; returns its port."""
    out = h.path(f"slowlink-{upstream}.port")
    h.start([sys.executable, os.path.join(harness.HERE, "slowlink.py"), "--upstream", str(upstream),
             "--rtt-ms", str(RTT_MS), "--rate-mbit", str(RATE_MBIT)], stdout=open(out, "w"))
    h.wait_for(lambda: open(out).read().strip(), 10, "the slow link printed no port within 10 s")
    return int(open(out).read())


def remember_http2(root, origin):
    """Writes into `root`'s origins.json what a sync of `origin` before leaves there: it speaks HTTP/2."""
    path = os.path.join(root, "origins.json")
    records = json.load(open(path)) if os.path.exists(path) else {}
    records.setdefault(origin, {"checked": time.time()})["http"] = "h2"
    with open(path, "w") as out:
        json.dump(records, out)
    os.chmod(path, 0o600)


def wall_time(h, www, repo_url, cold):
    """The `origins.link*` figures: the sync 5 behind over HTTP/2 and TLS, straight and through the link,
    the median of `h.runs(3)` rounds (fresh roots each); with --before, the older build's too."""
    ca, crt, key = certificates(h.path("ca"))
    port = harness.free_port()
    origin = h.nginx(None, log=True, servers=[
        f"server {{ listen 127.0.0.1:{port} ssl http2; root {www}; "
        f"ssl_certificate {crt}; ssl_certificate_key {key}; ssl_protocols TLSv1.2 TLSv1.3; }}"])
    slow = slow_link(h, port)
    sides = [("", h.offlinepkg)] + ([(".before", h.before)] if h.before else [])
    rounds = {side: [] for side, _ in sides}
    for number in range(h.runs(3)):
        for side, binary in sides:
            roots = {way: h.path(f"wall{side}-{number}-{way}") for way in ("direct", "slow")}
            for root in roots.values():
                shutil.copytree(cold, root, symlinks=True)
            remember_http2(roots["slow"], f"https://127.0.0.1:{slow}")
            _, on_device = sync(h, f"https://127.0.0.1:{port}/{repo_url}", roots["direct"], "--cacert", ca, binary=binary)
            mark = origin.mark()
            via, seconds = sync(h, f"https://127.0.0.1:{slow}/{repo_url}", roots["slow"], "--cacert", ca, binary=binary)
            sent, requests = origin.served_since(mark)
            rounds[side].append((seconds - on_device, via, sent, requests, seconds, on_device))
            for root in roots.values():
                h.wipe(root)
    for side, _ in sides:
        link, via, sent, requests, seconds, on_device = sorted(rounds[side], key=lambda r: r[0])[len(rounds[side]) // 2]
        via = via if all(r[1] for r in rounds[side]) else None
        transfer = sent * 8 / (RATE_MBIT * 1e6)
        ideal = 3 * RTT_MS / 1000 + transfer
        build = " (--before)" if side else ""
        detail = (f"via {via}, {requests} requests, {sent:,} B; median of {len(rounds[side])}: wall {seconds:.3f} s, "
                  f"{on_device:.3f} s on the device; link times {', '.join(f'{r[0]:.3f}' for r in rounds[side])} s")
        h.figure(f"origins.link{side}",
                 f"docs, 5 behind, {RTT_MS} ms / {RATE_MBIT} Mbit/s link{build}: link time / (3 RTT + bytes / bandwidth)",
                 link / ideal if via else None, ours=f"{link:.3f} s", theirs=f"{ideal:.3f} s", detail=detail)
        h.figure(f"origins.link{side}.round-trips",
                 f"docs, 5 behind{build}: round trips on the link ((link time - bytes / bandwidth) / RTT)",
                 (link - transfer) / (RTT_MS / 1000) if via else None, detail=detail)


def sites_run():
    return os.environ.get("ORIGINS_SITES", "docs,100k").split(",")


def measures(h, id):
    if ".before" in id and not h.before:
        return False
    site = id.split(".")[1]
    return (site in sites_run()) if site in ("docs", "100k") else "docs" in sites_run()


def run(h):
    for site_name in sites_run():
        site_row(h, site_name)


def site_row(h, site_name):
    www = h.path(f"www-{site_name}")
    site, repo = h.path(f"site-{site_name}"), os.path.join(www, "repo")
    if site_name == "docs":
        made = sites.python_docs(site, h.size(1065, 40))
    else:
        count = h.size(100000, 300)
        sites.bundle(site, count)
        made = f"{count:,} bundler files"
    paths = sorted((os.path.relpath(os.path.join(d, n), site) for d, _, ns in os.walk(site) for n in ns),
                   key=lambda p: p.encode())

    def publish(version):
        h.opk("publish", site, "--repo", repo, "--id", "site", "--version", version, "--route",
              "https://m.example.com/", "--deltas", "0", "--quiet")
        # nginx's ETag is the mtime in seconds and the size: each release's manifest an mtime of its own.
        stamp = time.time() + int(version)
        os.utime(os.path.join(repo, "manifest.json"), (stamp, stamp))

    def change(version):  # release N appends a line to three files of its own
        for step in range(3):
            with open(os.path.join(site, paths[(version * 7919 + step * 104729) % len(paths)]), "a") as f:
                f.write(f"\n<!-- changed in release {version} -->\n")

    publish("1")
    servers = {"multi": h.nginx(www, log=True), "s3": h.nginx(www, log=True, server="max_ranges 1;"),
               "oss": h.nginx(www, log=True, server='if ($http_range ~ ",") { return 416; }')}
    cache = h.path(f"edge-cache-{site_name}")
    upstream = servers["multi"].url().rstrip("/")
    servers["edge"] = h.nginx(www, log=True, http=f"proxy_cache_path {cache} keys_zone=edge:10m max_size=2g;",
                              server=f"location = /repo/manifest.json {{ proxy_pass {upstream}; }} "
                                     f"location / {{ proxy_pass {upstream}; proxy_cache edge; proxy_cache_valid 200 1h; }}")
    cold = h.path(f"cold-{site_name}")
    if sync(h, servers["multi"].url("repo/manifest.json"), cold)[0] is None:
        raise harness.Failure(f"the cold sync of {site_name} failed")
    manifest = lambda: json.load(open(os.path.join(repo, "manifest.json")))["packages"][0]
    first = manifest()
    held = {e["sha256"] for e in index_entries(os.path.join(repo, first["archive"]["files"]["url"]))}
    devices = {}
    for gap in GAPS:
        for origin in ORIGINS:
            devices[(gap, origin)] = h.path(f"device-{site_name}-{gap}-{origin}")
            shutil.copytree(cold, devices[(gap, origin)], symlinks=True)

    version = 1
    for gap in GAPS:
        while version < 1 + gap:
            version += 1
            change(version)
            publish(str(version))
        entry = manifest()
        files = entry["archive"]["files"]
        seen, wanted = set(), []
        for e in index_entries(os.path.join(repo, files["url"])):
            if e["sha256"] not in held and e["sha256"] not in seen:
                seen.add(e["sha256"])
                wanted.append((e["offset"], e["length"]))
        frames = sum(length for _, length in wanted)
        delta = os.path.join(repo, "files", "deltas", f"{first['tree']}-{files['sha256']}.json.zst")
        ideal = frames + (os.path.getsize(delta) if site_name == "docs" and os.path.exists(delta) else 0)
        needed = needed_gets(wanted)
        archive = "/repo/" + entry["archive"]["url"]
        for origin in ORIGINS:
            server = servers[origin]
            mark = server.mark()
            via, _ = sync(h, server.url("repo/manifest.json"), devices[(gap, origin)])
            sent, _ = server.served_since(mark, lambda uri: "manifest" not in uri)
            gets = sum(1 for words in server.log_lines()[mark:] if words[0] == archive and words[-1] == "GET")
            id = f"origins.{site_name}.{origin}.gap{gap}"
            detail = f"via {via}, {sent:,} B, {gets} archive GETs ({needed} needed); site: {made}"
            budget = ideal + ALLOWANCE[site_name]
            h.figure(id, f"{site_name}, {origin}, {gap} behind: bytes / (ideal + {ALLOWANCE[site_name] // 1024} KiB)",
                     sent / budget if via else None, ours=f"{sent:,} B", theirs=f"{budget:,} B", detail=detail)
            if origin in SINGLE_RANGE:
                h.figure(id + ".gets", f"{site_name}, {origin}, {gap} behind: archive GETs / GETs a one-range plan needs",
                         gets / needed if via and needed else None, ours=gets, theirs=needed, detail=detail)
        if site_name == "docs" and gap == 5:
            wall_time(h, www, "repo/manifest.json", cold)
