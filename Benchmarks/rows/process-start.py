"""What starting the CLI costs a device: the installed binary, what `--version` maps, its start against
curl's, and what each Debian library costs a process that links it.

The installed binary is the release one stripped, as `make install` installs it. `--version` and
`curl --version` race side by side (process start, nothing else). Each library's cost is measured on a
FoundationEssentials "hello" linked with that library alone, to its exit, in instructions (callgrind:
counts that the machine's load does not move): the figures docs/design.md ("Start-up and memory")
decided the lazy loading from.
"""
import os, re, subprocess
from harness import Failure, median, ratio

LIBRARIES = ["crypto", "zstd", "archive", "curl", "microhttpd", "sqlite3"]


def measures(h, id):
    if id.endswith(".before"):
        return bool(h.before)
    # The smoke (a debug build, on the toolchain's shared libraries) counts no instructions of
    # offlinepkg, and probes one library; a full run measures each.
    if h.smoke and id == "process-start.version.instructions":
        return False
    return not h.smoke or not id.startswith("process-start.library.") or id.endswith(".zstd")


def instructions(h, argv):
    """Instructions of one run of argv to its exit."""
    if os.path.dirname(argv[0]):
        argv = [h.without_debug_info(argv[0]), *argv[1:]]
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *argv],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    found = re.search(r"I\s+refs:\s+([\d,]+)", done.stderr)
    if not found:
        raise Failure(f"callgrind counted nothing for {' '.join(argv)}: {done.stderr[-300:]}")
    return int(found.group(1).replace(",", ""))


def shared_objects(h, binary):
    """The shared objects `binary --version` maps, as ldd counts them (with the vDSO and ld.so)."""
    loaded = subprocess.run([binary, "--version"], capture_output=True, text=True, env=dict(os.environ, LD_DEBUG="files")).stderr
    return len({os.path.basename(n) for n in re.findall(r"file=(\S+) \[0\]", loaded)}) + 2


def cxx_exports(binary):
    """The C++ library's symbols the binary exports: none, when the libstdc++ linked into the release
    binary stays its own (docs/design.md, "libstdc++ is linked in"); an exported one would take the
    bindings of the libstdc++.so that ICU brings into a sync."""
    listing = subprocess.run(["nm", "-D", "--defined-only", binary], capture_output=True, text=True, check=True).stdout
    return sum(1 for line in listing.splitlines() if re.search(r" (_Z|__cxa|__gxx)", line))


def peak_kib(h, argv):
    out = h.path("time.txt")
    h.run(["/usr/bin/time", "-f", "%M", "-o", out, *argv])
    return int(open(out).read().split()[-1])


def run(h):
    builds = {"offlinepkg": h.offlinepkg} | ({"before": h.before} if h.before else {})
    sizes = {}
    for name, binary in builds.items():
        stripped = h.path(f"stripped-{name}")
        h.run(["strip", "-o", stripped, binary])
        sizes[name] = os.path.getsize(stripped) / 1e6
    h.figure("process-start.binary", "installed binary, stripped", sizes["offlinepkg"])
    h.figure("process-start.objects", "shared objects --version maps", shared_objects(h, h.offlinepkg))
    h.figure("process-start.cxx-exports", "C++ library symbols the binary exports", cxx_exports(h.offlinepkg))
    if h.before:
        h.figure("process-start.binary.before", "installed binary: offlinepkg / --before", ratio(sizes["offlinepkg"], sizes["before"]),
                 ours=f"{sizes['offlinepkg']:.1f} MB", theirs=f"{sizes['before']:.1f} MB")
        h.figure("process-start.objects.before", "shared objects --version maps, --before", shared_objects(h, h.before))

    sides = {name: ([binary, "--version"], None) for name, binary in builds.items()}
    sides["curl"] = (["curl", "--version"], None)
    samples = h.race(sides, h.runs(100, 3))
    ours, curl = median(samples["offlinepkg"]), median(samples["curl"])
    h.figure("process-start.version", "--version / curl --version", ratio(ours, curl),
             ours=f"{ours * 1000:.2f} ms", theirs=f"{curl * 1000:.2f} ms", samples=samples)
    h.figure("process-start.version.rss", "peak RSS of --version", median([peak_kib(h, [h.offlinepkg, "--version"]) for _ in range(5)]) / 1024,
             detail=f"curl --version {median([peak_kib(h, ['curl', '--version']) for _ in range(5)]) / 1024:.1f} MiB")
    if not h.smoke:
        h.figure("process-start.version.instructions", "--version, instructions", instructions(h, [h.offlinepkg, "--version"]),
                 detail=f"curl --version {instructions(h, ['curl', '--version']):,}")
    if h.before:
        before = median(samples["before"])
        h.figure("process-start.version.before", "--version: offlinepkg / --before", ratio(ours, before),
                 ours=f"{ours * 1000:.2f} ms", theirs=f"{before * 1000:.2f} ms")

    hello = h.path("probe", "hello.swift")
    with open(hello, "w") as f:
        f.write('import FoundationEssentials\nprint("hello")\n')
    counts = {}
    for library in [None] + ([l for l in LIBRARIES if l == "zstd"] if h.smoke else LIBRARIES):
        binary = h.path("probe", f"hello-{library or 'alone'}")
        h.run(["swiftc", "-O", "-static-stdlib", hello, "-o", binary, "-Xlinker", "--no-as-needed",
               *([f"-l{library}"] if library else [])])
        counts[library] = instructions(h, [binary])
        if library:
            objects = len(h.run(["ldd", binary]).strip().splitlines())
            h.figure(f"process-start.library.{library}", f"lib{library} linked: instructions beyond a hello's",
                     counts[library] - counts[None], detail=f"{objects} shared objects mapped; hello alone {counts[None]:,}")
