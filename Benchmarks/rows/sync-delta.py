"""What a two-file change costs a device on the network: the bytes nginx serves for the update, against
the size of the delta the publisher wrote, per archive format.

The site: the first 3,000 regular files of /usr/share/doc; v2 appends a line to two of its `copyright`
files. The bytes are nginx's access log (`$body_bytes_sent` of /archives/), not what the device reports;
the manifest, fetched by every check, is given beside it. The root's growth on disk for the second
version (du counts a hard-linked file once) is in the detail.
"""
import json, os, shutil
import sites


def du_kib(path):
    import subprocess
    return int(subprocess.run(["du", "-sk", path], capture_output=True, text=True).stdout.split()[0])


def run(h):
    count = h.size(3000, 60)
    v1, v2 = h.path("v1"), h.path("v2")
    sites.real_files(v1, count, base="/usr/share/doc")
    shutil.copytree(v1, v2)
    copyrights = sorted((os.path.relpath(os.path.join(d, f), v2) for d, _, fs in os.walk(v2) for f in fs if f == "copyright"),
                        key=lambda p: p.encode())
    picked = [copyrights[min(9, len(copyrights) - 1)], copyrights[min(199, len(copyrights) - 1)]]
    for path in set(picked):
        with open(os.path.join(v2, path), "a") as f:
            f.write("\nChanged for the delta benchmark.\n")
    www = h.path("www")
    os.makedirs(www)
    nginx = h.nginx(www, log=True)
    for format in ["tar.zst", "tar.gz", "zip"]:
        repo, root = os.path.join(www, format), h.path(f"root-{format}")
        common = ["--repo", repo, "--id", "docs", "--route", "https://m.example.com/docs/", "--entry", picked[0],
                  "--format", format, "--quiet"]
        h.opk("publish", v1, "--version", "1", *common)
        url = nginx.url(f"{format}/manifest.json")
        h.opk("sync", url, "--root", root, "--quiet")
        one = du_kib(root)
        h.opk("publish", v2, "--version", "2", *common)
        mark = nginx.mark()
        report = json.loads(h.opk("sync", url, "--root", root, "--json", "--quiet"))
        served, _ = nginx.served_since(mark, lambda uri: uri.startswith(f"/{format}/archives/"))
        manifest, _ = nginx.served_since(mark, lambda uri: uri.endswith("manifest.json"))
        delta = os.path.getsize(f"{repo}/archives/docs/2/docs-1-to-2.delta.{format}")
        via = report["changes"][0].get("via")
        h.figure(f"sync-delta.{format}", f"two changed files of {count}, {format}: bytes served / the delta",
                 served / delta, ours=f"{served:,} B", theirs=f"{delta:,} B",
                 detail=f"via {via}; manifest {manifest} B; full archive "
                        f"{os.path.getsize(f'{repo}/archives/docs/2/docs-2.{format}'):,} B; root {one} KiB with one version, "
                        f"{du_kib(root)} KiB with two")
