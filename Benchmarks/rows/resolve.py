"""`PackageStore.resolve` in process on a root of about 4,000 files: nanoseconds per call, and the work
per call counted by valgrind's cachegrind (instructions), which no load on the machine moves.

Benchmarks/Resolve is the program; the root and the URLs are made here, so a second build
(`--before-resolve`) measures the same URLs in the same order and the two differ only in the library.
Three hits to one miss, in the shapes a webview asks for: assets, folder URLs, mixed-case hosts with
ports and queries, a nested route, misses and navigation fallbacks. Each process settles on its own
figure, so the builds alternate over several processes, each started with its stack at another place
within a page (an environment variable's length), which moves glibc's memcmp onto faster or slower paths.
"""
import json, os, random, re, subprocess
import sites
from harness import Failure, median, ratio

HOST = "https://bench.offlinepkg.test/"


def measures(h, id):
    return not id.endswith(".before") or h.before_resolve


def instructions(h, binary, root, urls, padding):
    """Instructions per resolve: two cachegrind runs at two operation counts, their difference over the
    difference in operations, so the set-up's work drops out."""
    low, high = h.size(20000, 1000), h.size(220000, 11000)
    counts = []
    for operations in (low, high):
        done = subprocess.run(["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null",
                               h.without_debug_info(binary), root, urls, "1", str(operations)], capture_output=True, text=True,
                              env=dict(os.environ, BENCH_STACK_PADDING=" " * padding, SWIFT_DETERMINISTIC_HASHING="1"))
        found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
        if done.returncode != 0 or not found:
            raise Failure(f"{binary} under valgrind: {done.stderr[-300:]}")
        counts.append(int(found.group(1).replace(",", "")))
    return (counts[1] - counts[0]) / (high - low)


def run(h):
    if not h.resolve:
        raise Failure("no ResolveBenchmark binary (Benchmarks/bench builds it; or --resolve PATH)")
    app, docs, repo, root = h.path("site-app"), h.path("site-docs"), h.path("repo"), h.path("root")
    files = h.size(3950, 400)
    sites.bundle(app, files)
    sites.bundle(docs, 50)
    h.opk("publish", app, "--repo", repo, "--id", "app", "--version", "1", "--route", HOST, "--fallback", "index.html", "--quiet")
    h.opk("publish", docs, "--repo", repo, "--id", "docs", "--version", "1", "--route", HOST + "docs/", "--quiet")
    h.opk("sync", f"file://{repo}/manifest.json", "--root", root, "--quiet")
    urls = []
    for i in range(0, files, 7):
        path = f"assets/g{i // 100}/f{i}.js"
        urls += [HOST + path, f"HTTPS://Bench.OfflinePkg.test:443/{path}?v={i}", HOST + path.replace(".js", "-missing.js")]
        if i % 100 == 0:
            urls.append(f"{HOST}assets/g{i // 100}/")
    urls += [f"{HOST}docs/assets/g0/f{i}.js" for i in range(50)] + [f"{HOST}app/route-{i}" for i in range(100)]
    random.Random(0x6F66666C696E6570).shuffle(urls)
    url_file = h.path("urls.txt")
    with open(url_file, "w") as f:
        f.write("\n".join(urls) + "\n")

    builds = {"this build": h.resolve}
    if h.before_resolve:
        builds["before"] = h.before_resolve
    rounds, runs, operations = h.size(9, 1), h.size(9, 1), h.size(400000, 2000)
    times = {name: [] for name in builds}
    for round in range(rounds):
        for name, binary in builds.items():
            out = h.run([binary, root, url_file, str(runs), str(operations)],
                        env={"BENCH_STACK_PADDING": " " * (round * 4096 // rounds)})
            times[name].append(json.loads(out)["medianNs"])
    work = {name: min(instructions(h, binary, root, url_file, k * 4096 // 3) for k in range(h.size(3, 1)))
            for name, binary in builds.items()}
    ours = median(times["this build"])
    h.figure("resolve.time", f"resolve, {len(urls)} URLs over {files + 50} files (median of {rounds} processes)", ours,
             samples=times)
    h.figure("resolve.instructions", "instructions per resolve (cachegrind; the least over 3 stack places)", work["this build"])
    if h.before_resolve:
        before = median(times["before"])
        h.figure("resolve.time.before", "resolve time: this build / --before-resolve", ratio(ours, before),
                 ours=f"{ours:.1f} ns", theirs=f"{before:.1f} ns")
        h.figure("resolve.instructions.before", "instructions per resolve: this build / --before-resolve",
                 ratio(work["this build"], work["before"]), ours=f"{work['this build']:.1f}", theirs=f"{work['before']:.1f}")
