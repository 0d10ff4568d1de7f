"""`offlinepkg serve` on a root of 100k files: its first answer after start, and its anonymous memory per
installed file after start and after 4 updates synced while it runs.

A shell starts serve at launch: the first answer bounds how long a webview waits. Anonymous memory per
file shows whether the lookup index is mapped from disk (shared, reclaimable) or copied into the heap,
and "flat" that an update's new index replaces the old rather than adding to it. Each update changes 1 %
of the files; 200 URLs spread over the tree are answered before each reading.
"""
import os
import sites


def run(h):
    n, updates = h.size(100000, 200), h.size(4, 1)
    site, repo, root = h.path("site"), h.path("repo"), h.path("root")
    sites.small_files(site, n)

    def publish(version):
        h.opk("publish", site, "--repo", repo, "--id", "app", "--version", version, "--deltas", "0",
              "--route", "https://bench.offlinepkg.test/", "--quiet")
        h.opk("sync", f"file://{repo}/manifest.json", "--root", root, "--quiet")

    publish("1")
    first, firsts, server, port = h.first_answer(root, 5)
    base = f"http://127.0.0.1:{port}/"
    urls = [sites.small_file_path(i) for i in range(0, n, max(1, n // 200))]
    h.fetch_all(base, urls)
    readings = [h.memory(server.pid)]
    for version in range(2, updates + 2):
        for i in range(version, n, 100):
            with open(os.path.join(site, sites.small_file_path(i)), "a") as f:
                f.write(f"// {version}\n")
        with open(os.path.join(site, "index.html"), "w") as f:
            f.write(f"<title>bench {version}</title>\n")
        publish(str(version))
        h.wait_for(lambda: f"bench {version}<" in h.get(base, host="bench.offlinepkg.test"), 30,
                   f"serve did not pick up release {version}")
        h.fetch_all(base, urls)
        readings.append(h.memory(server.pid))
    per_file = [anon * 1024 / n for _, anon in readings]
    h.figure("serve-start.first-answer", f"serve's first answer after start, {n} files", first, samples=firsts)
    h.figure("serve-start.anon-per-file", f"serve's anonymous memory per file, {n} files", per_file[0],
             detail=f"VmRSS {readings[0][0]} KiB, RssAnon {readings[0][1]} KiB")
    h.figure("serve-start.anon-growth", f"anonymous memory per file, growth across {updates} updates",
             per_file[-1] - per_file[0], detail=" → ".join(f"{p:.0f}" for p in per_file) + " B per file")
