"""First painted frame: Examples/WebKitShell launched on a packaged page, against the same page from
file:// in the same shell (`--page-file`: no store opened, no offlinepkg at all) — the floor of the
in-process path.

Under Xvfb, one server for the whole row; the root is synced before, so a launch is the shell's start,
the store's open and the page's requests through the `app://` scheme handler. The shell prints the
milliseconds from its process's start to the completion of a snapshot of the visible area, whose pixel
must be the page's background. OFFLINEPKG_SHELL (and OFFLINEPKG_SHELL_BEFORE, built against the --before
library) name shells built elsewhere; else the row builds Examples/WebKitShell.
"""
import os, re, signal, subprocess, time
from harness import CHECKOUT, Failure, median, ratio

PAGE = ('<!doctype html><html><head><title>loading</title><link rel="stylesheet" href="site.css"></head>\n'
        '<body><h1>Release 1</h1><img src="img/dot.svg">\n<script>fetch("data.json").then((r) => r.json())'
        '.then((d) => { document.title = "release " + d.release; });</script></body></html>\n')
BACKGROUND = "#0b6e4f"


def measures(h, id):
    return not id.endswith(".before") or bool(os.environ.get("OFFLINEPKG_SHELL_BEFORE"))


def shell(h):
    if os.environ.get("OFFLINEPKG_SHELL"):
        return os.environ["OFFLINEPKG_SHELL"]
    flags = [] if h.smoke else ["-c", "release"]
    package = os.path.join(CHECKOUT, "Examples", "WebKitShell")
    h.run(["swift", "build", *flags, "--package-path", package], timeout=3600)
    return os.path.join(h.run(["swift", "build", *flags, "--package-path", package, "--show-bin-path"]).strip(), "WebKitShell")


def xvfb(h):
    for number in range(90, 190):
        if os.path.exists(f"/tmp/.X{number}-lock"):
            continue
        server = h.start(["Xvfb", f":{number}", "-screen", "0", "1024x768x24", "-nolisten", "tcp"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        for _ in range(100):
            if os.path.exists(f"/tmp/.X11-unix/X{number}"):
                return f":{number}"
            if server.poll() is not None:
                break
            time.sleep(0.05)
    raise Failure("Xvfb did not start")


def first_paint(h, argv, env):
    err = h.path("shell.err")
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=open(err, "w"), env=env, start_new_session=True)
    # A new session is a new autogroup, which the scheduler weighs against the others whatever the nice
    # of its processes: the shell takes the bench's niceness (make test's smoke runs at nice 19).
    try:
        with open(f"/proc/{process.pid}/autogroup", "w") as f:
            f.write(str(os.nice(0)))
    except OSError:
        pass
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = re.search(r"first paint (\d+) ms after launch \(\S+, background (#\w+)\)", open(err).read())
            if found:
                if found.group(2) != BACKGROUND:
                    raise Failure(f"the first paint is not the page: {found.group(0)}")
                return int(found.group(1))
            if process.poll() is not None:
                break
            time.sleep(0.02)
        raise Failure(f"no first paint from {' '.join(argv)[:160]}: {open(err).read()[-400:]}")
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def run(h):
    site, repo = h.path("site"), h.path("repo")
    os.makedirs(os.path.join(site, "img"))
    for name, text in [("index.html", PAGE), ("data.json", '{"release": 1}\n'),
                       ("site.css", f"body {{ background: {BACKGROUND}; color: white; }}\n"),
                       ("img/dot.svg", '<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8"><circle cx="4" cy="4" r="4"/></svg>\n')]:
        with open(os.path.join(site, name), "w") as f:
            f.write(text)
    h.opk("publish", site, "--repo", repo, "--id", "app", "--version", "1", "--route", "https://m.example.com/app/", "--quiet")
    manifest, page = f"file://{repo}/manifest.json", "https://m.example.com/app/"
    shells = {"offlinepkg": (shell(h), h.offlinepkg)}
    if os.environ.get("OFFLINEPKG_SHELL_BEFORE"):
        shells["before"] = (os.environ["OFFLINEPKG_SHELL_BEFORE"], h.before or h.offlinepkg)
    sides = {}
    for name, (binary, cli) in shells.items():
        root = h.path(f"root-{name}")
        h.opk("sync", manifest, "--root", root, "--quiet", binary=cli)
        sides[f"{name} packaged"] = [binary, manifest, page, "--root", root]
        sides[f"{name} file"] = [binary, manifest, page, "--root", root, "--page-file", os.path.join(site, "index.html")]
    env = dict(os.environ, DISPLAY=xvfb(h), WEBKIT_DISABLE_SANDBOX_THIS_IS_DANGEROUS="1", WEBKIT_DISABLE_COMPOSITING_MODE="1")
    got = {name: [] for name in sides}
    names = list(sides)
    for round in range(h.runs(12, 1) + 1):  # round 0 reads WebKit's files into the page cache
        for k in range(len(names)):
            name = names[(round + k) % len(names)]
            milliseconds = first_paint(h, sides[name], env)
            if round:
                got[name].append(milliseconds)
    for name in shells:
        packaged, floor = median(got[f"{name} packaged"]), median(got[f"{name} file"])
        id = "frame" if name == "offlinepkg" else "frame.before"
        label = "first painted frame, packaged page / file://" + ("" if name == "offlinepkg" else ", --before's library")
        h.figure(id, label, ratio(packaged, floor), ours=f"{packaged:.0f} ms", theirs=f"{floor:.0f} ms",
                 samples={"packaged": got[f"{name} packaged"], "file": got[f"{name} file"]})
