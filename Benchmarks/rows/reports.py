"""Install reports: the events per second `reports serve` stores, and what an event costs a device.

The collector: `reports serve` on a fresh database in the work folder, then wrk POSTs for 10 s over 8
connections, every request a new batch of events (nothing is a duplicate): batches of 200 (a device's
full queue), then single events; counted in the database afterwards. Every commit is flushed (WAL,
synchronous=FULL) before the answer, so single events measure the disk's flush rate as much as ours.

The device: the bytes one activation's event takes in its queue, and an activating sync over http
(nginx) raced three ways from copies of one root — reports off, reports sent to the collector, reports
on with nothing listening — and the flushes each adds (strace). As root the device's folder is a tmpfs
of its own, so a flush waits for no other process's writes: the times are the work's, the flushes are
counted apart.
"""
import os, subprocess
from harness import Failure, median

EVENT = ('{"device":"%s%d-%d","time":"2026-05-01T10:00:00.123Z","event":"activated","sequence":2,'
         '"packages":[{"id":"home","from":"1.4.1","to":"1.4.2","via":"delta","bytes":20480}],'
         '"exitStatus":0,"error":null,"durationMs":812,"shellVersion":"3.2","offlinepkg":"0.1.0"}')


def collector(h, database):
    """`reports serve --db database` on a free port; returns its URL."""
    out = h.path(f"collector-{os.path.basename(database)}.url")
    process = h.start([h.offlinepkg, "reports", "serve", "--db", database], stdout=open(out, "w"),
                      stderr=subprocess.DEVNULL)
    h.wait_for(lambda: open(out).read().strip() or process.poll() is not None, 10, "reports serve printed no URL")
    url = open(out).read().strip()
    if not url:
        raise Failure(f"reports serve exited {process.returncode}")
    return process, url


def flushes(path):
    """fsync + fdatasync calls from an `strace -c` summary."""
    return sum(int(line.split()[3]) for line in open(path) if line.split() and line.split()[-1] in ("fsync", "fdatasync"))


def run(h):
    # wrk: each request a batch of BATCH new events, devices named after the thread and the request.
    script = h.path("post.lua")
    with open(script, "w") as f:
        f.write("""local threads = 0
function setup(thread) thread:set("prefix", "t" .. threads .. "-"); threads = threads + 1 end
local batch = tonumber(os.getenv("BATCH") or "200")
local count = 0
local event = '%s'
function request()
  count = count + 1
  local events = {}
  for i = 1, batch do events[i] = string.format(event, prefix, count, i) end
  return wrk.format("POST", "/reports", { ["Content-Type"] = "application/json" }, "[" .. table.concat(events, ",") .. "]")
end
""" % EVENT)
    seconds = h.size(10, 1)
    for batch, id in ((200, "reports.collector.batch"), (1, "reports.collector.single")):
        database = h.path(f"collector-{batch}.db")
        process, url = collector(h, database)
        os.environ["BATCH"] = str(batch)
        try:
            load = h.wrk(url + "reports", 8, f"{seconds}s", script=script)
        finally:
            del os.environ["BATCH"]
            process.terminate()
            process.wait()
        stored = int(h.run(["sqlite3", database, "SELECT count(*) FROM events"]))
        intact = h.run(["sqlite3", database, "PRAGMA integrity_check"]).strip()
        h.figure(id, f"collector, POSTs of {batch} event(s), 8 connections: events stored per second", stored / seconds,
                 detail=f"{load['rps']:.0f} requests/s, p99 {load['p99_ms']:.0f} ms, {load['errors']} errors, integrity {intact}")

    device = h.path("device")
    os.makedirs(device)
    mounted = os.getuid() == 0 and subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512M", "tmpfs", device]).returncode == 0
    try:
        measure_device(h, device)
    finally:
        if mounted:
            subprocess.run(["chmod", "-R", "u+w", device])
            subprocess.run(["umount", device])


def measure_device(h, work):
    key = os.path.join(work, "key")
    h.opk("keygen", key)
    for version in ("1", "2"):
        for package in range(10):
            site = os.path.join(work, "sites", version, f"p{package}")
            os.makedirs(site)
            with open(os.path.join(site, "index.html"), "w") as f:
                f.write(f"<title>p{package} {version}</title>\n")
            with open(os.path.join(site, "app.js"), "wb") as f:
                f.write(os.urandom(20000))

    def publish(repo, version, count, *extra):
        for package in range(count):
            h.opk("publish", os.path.join(work, "sites", version, f"p{package}"), "--repo", repo, "--id", f"p{package}",
                  "--version", version, "--route", f"https://p{package}.example.com/", "--sign-key", key + ".key",
                  "--quiet", *extra)

    # The bytes of one activation's event, 1 and 10 packages (nothing listens: the event stays queued).
    sizes = {}
    for count in (1, 10):
        repo, root = os.path.join(work, f"queue-{count}"), os.path.join(work, f"queue-root-{count}")
        publish(repo, "1", count, "--reports", "http://127.0.0.1:1/reports")
        h.opk("sync", f"file://{repo}/manifest.json", "--root", root, "--trust-key", key + ".pub", "--quiet")
        sizes[count] = os.path.getsize(os.path.join(root, "reports", "queue.jsonl"))
    h.figure("reports.event.bytes", "one activation's event in a device's queue, 1 package", sizes[1],
             detail=f"10 packages: {sizes[10]} B")

    process, collector_url = collector(h, h.path("device.db"))
    nginx = h.nginx(work)
    kinds = {"off": [], "sent": ["--reports", collector_url + "reports"], "down": ["--reports", "http://127.0.0.1:1/reports"]}
    for kind, extra in kinds.items():
        publish(os.path.join(work, f"repo-{kind}"), "1", 1, *extra)
        h.opk("sync", nginx.url(f"repo-{kind}/manifest.json"), "--root", os.path.join(work, f"base-{kind}"),
              "--trust-key", key + ".pub", "--quiet")
        publish(os.path.join(work, f"repo-{kind}"), "2", 1)
        # nginx's ETag is the mtime in seconds and the size: release 2's manifest, as long as release 1's
        # and written within the same second, would be answered 304.
        for name in ("manifest.json", "manifest.json.minisig"):
            path = os.path.join(work, f"repo-{kind}", name)
            later = os.path.getmtime(path) + 5
            os.utime(path, (later, later))

    def sync(kind):
        return [h.offlinepkg, "sync", nginx.url(f"repo-{kind}/manifest.json"), "--root", os.path.join(work, f"root-{kind}"),
                "--trust-key", key + ".pub", "--quiet"]

    def fresh(kind):
        return lambda: subprocess.run(f"rm -rf {work}/root-{kind} && cp -a {work}/base-{kind} {work}/root-{kind}",
                                      shell=True, check=True)

    samples = h.race({kind: (sync(kind), fresh(kind)) for kind in kinds}, h.runs(20, 1))
    counts = {}
    for kind in kinds:
        fresh(kind)()
        trace = os.path.join(work, f"strace-{kind}.txt")
        h.run(["strace", "-f", "-c", "-e", "trace=fsync,fdatasync", "-o", trace] + sync(kind))
        counts[kind] = flushes(trace)
    process.terminate()
    off = median(samples["off"])
    for kind, label in (("sent", "reports sent to the collector"), ("down", "reports on, the collector down")):
        h.figure(f"reports.sync.{kind}", f"activating sync over http, {label} / reports off", median(samples[kind]) / off,
                 ours=f"{median(samples[kind]) * 1000:.0f} ms", theirs=f"{off * 1000:.0f} ms")
    h.figure("reports.sync.fsync", "fsync calls an event adds to an activating sync", max(counts["sent"], counts["down"]) - counts["off"],
             detail=f"off {counts['off']}, sent {counts['sent']}, collector down {counts['down']}")
