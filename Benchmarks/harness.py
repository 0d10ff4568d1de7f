"""The one harness every benchmark row uses: the work folder, nginx (`nginx.py`), timing side by side,
medians, the machine's description, and each figure judged against its line in Benchmarks/targets.

A row (Benchmarks/rows/<name>.py) gets a `Harness` and calls `figure(...)` once per figure it measures.
Nothing here knows what a row measures; docs/performance.md says what each figure is compared with.
"""
import os, platform, re, shutil, socket, statistics, subprocess, sys, tempfile, time

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKOUT = os.path.dirname(HERE)


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def ratio(a, b):
    return a / b if a is not None and b else None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def read_targets(path):
    """`figure-id  op value unit  # note` per line; `figure-id  -  unit` for a figure given for information."""
    targets = {}
    for number, line in enumerate(open(path, encoding="utf-8"), 1):
        words = line.split("#", 1)[0].split()
        if not words:
            continue
        if len(words) == 2 and words[1] != "-" or len(words) not in (2, 3, 4):
            sys.exit(f"{path}:{number}: expected `figure op value unit` or `figure - unit`, got {line.strip()!r}")
        if words[1] == "-":
            targets[words[0]] = {"op": None, "value": None, "unit": words[2] if len(words) > 2 else ""}
        else:
            if words[1] not in ("<=", "<", ">=", "=="):
                sys.exit(f"{path}:{number}: unknown comparison {words[1]!r}")
            targets[words[0]] = {"op": words[1], "value": float(words[2]), "unit": words[3] if len(words) > 3 else ""}
    return targets


def judge(value, target):
    op, bound = target["op"], target["value"]
    return {"<=": value <= bound, "<": value < bound, ">=": value >= bound, "==": value == bound}[op]


def fmt(value, unit=""):
    """A measured value as the tables show it."""
    if value is None:
        return "-"
    if unit == "x":
        return f"{value:.2f}×"
    if unit == "%":
        return f"{value:.2f} %"
    if float(value).is_integer():
        text = f"{int(value):,}"
    elif abs(value) >= 100:
        text = f"{value:,.0f}"
    else:
        text = f"{value:.1f}" if abs(value) >= 1 else f"{value:.3f}"
    return text + (f" {unit}" if unit else "")


def goal(target):
    """A target as the tables show it: `<= 0.8×`, `< 1 per package`."""
    if not target["op"]:
        return ""
    unit = target["unit"]
    return f"{target['op']} {target['value']:g}" + ("×" if unit == "x" else f" {unit}" if unit else "")


class Failure(Exception):
    """A row could not measure (a tool failed, a server did not answer): the row's figures become MISS."""


class Harness:
    def __init__(self, offlinepkg, *, smoke=False, before=None, resolve=None, before_resolve=None, runs=None,
                 targets=os.path.join(HERE, "targets")):
        self.offlinepkg, self.before = offlinepkg, before
        self.resolve, self.before_resolve = resolve, before_resolve
        self.smoke, self.runs_override = smoke, runs
        self.targets = read_targets(targets)
        self.results, self.processes, self.row = [], [], None
        self.work = tempfile.mkdtemp(prefix="offlinepkg-bench-", dir=os.environ.get("TMPDIR", "/tmp"))
        # nginx's workers (nobody, unless we are root) walk into the work folder.
        os.chmod(self.work, 0o755)
        self.trash = self.path("trash")

    # --- sizes and files ---------------------------------------------------------------------------

    def size(self, full, smoke):
        """The full run's size, or the smoke's (which checks that the row runs, not what it measures)."""
        return smoke if self.smoke else full

    def runs(self, full, smoke=1):
        return self.runs_override or self.size(full, smoke)

    def begin(self, row):
        """Each row works in a folder of its own. Between rows, untimed, the last row's folder and what
        its races moved aside are removed, so a full run holds one row's files at a time."""
        if self.row:
            self.wipe(os.path.join(self.work, self.row))
            subprocess.run(["chmod", "-R", "u+w", self.trash], stderr=subprocess.DEVNULL)
            shutil.rmtree(self.trash, ignore_errors=True)
            os.sync()
        self.row = row
        os.makedirs(os.path.join(self.work, row))

    def path(self, *parts):
        """A path in the row's folder (its parent folder made)."""
        path = os.path.join(self.work, self.row or "", *parts)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return path

    def wipe(self, path):
        """Moves `path` aside and flushes: deleting now would slow the next creates on the same file system
        (ext4 scans past recently freed inodes), and an unflushed write would be paid by whichever side
        flushes next (a sync ends in syncfs). The trash goes between rows (`begin`)."""
        if os.path.lexists(path):
            os.makedirs(self.trash, exist_ok=True)
            os.rename(path, os.path.join(self.trash, str(time.monotonic_ns())))
        os.sync()

    def cleanup(self):
        for process in self.processes:
            if process.poll() is None:
                process.kill()
                process.wait()
        subprocess.run(["chmod", "-R", "u+w", self.work], stderr=subprocess.DEVNULL)
        shutil.rmtree(self.work, ignore_errors=True)
        os.sync()

    # --- running things ----------------------------------------------------------------------------

    def run(self, argv, *, check=True, env=None, capture=True, timeout=3600):
        """Runs argv (a list, no shell); returns stdout. A failure raises `Failure` naming the command."""
        full_env = dict(os.environ, **(env or {}))
        done = subprocess.run(argv, stdout=subprocess.PIPE if capture else subprocess.DEVNULL,
                              stderr=subprocess.PIPE, env=full_env, timeout=timeout)
        if check and done.returncode != 0:
            raise Failure(f"{' '.join(map(str, argv))[:200]} exited {done.returncode}: "
                          f"{done.stderr.decode(errors='replace').strip()[-400:]}")
        return done.stdout.decode(errors="replace") if capture else ""

    def opk(self, *args, binary=None, **kwargs):
        return self.run([binary or self.offlinepkg, *map(str, args)], **kwargs)

    def start(self, argv, **kwargs):
        """A background process, killed when the run ends."""
        process = subprocess.Popen(argv, **kwargs)
        self.processes.append(process)
        return process

    def without_debug_info(self, binary):
        """A copy of `binary` without its debug information, for valgrind: Debian 12's valgrind (3.19)
        reads no DWARF 5 string forms, which clang writes for C targets, and gives up on the whole
        binary. The code, and so every count, is the same."""
        copy = os.path.join(self.work, "no-debug", f"{abs(hash(binary))}-{os.path.basename(binary)}")
        if not os.path.exists(copy):
            os.makedirs(os.path.dirname(copy), exist_ok=True)
            self.run(["strip", "--strip-debug", "-o", copy, binary])
        return copy

    def time_once(self, argv, env=None):
        start = time.perf_counter_ns()
        done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        elapsed = (time.perf_counter_ns() - start) / 1e9
        if done.returncode != 0:
            raise Failure(f"{' '.join(argv)[:200]} exited {done.returncode}: {done.stderr.decode(errors='replace')[-400:]}")
        return elapsed

    def race(self, sides, rounds, warmup=True):
        """Times each side once per round, the order rotating round by round, so that a burst of load from
        elsewhere on the machine lands on every side alike. `sides`: {name: (argv, prepare)} where
        prepare (or None) runs untimed before each run of that side. Returns {name: [seconds...]}."""
        names = list(sides)
        samples = {name: [] for name in names}
        for round in range(0 if warmup else 1, rounds + 1):
            for k in range(len(names)):
                name = names[(round + k) % len(names)]
                argv, prepare = sides[name]
                if prepare:
                    prepare()
                elapsed = self.time_once(argv)
                if round > 0:
                    samples[name].append(elapsed)
        return samples

    # --- nginx ---------------------------------------------------------------------------------------

    def nginx(self, root=None, **kwargs):
        """nginx started the one way every row uses (`Benchmarks/nginx.py`)."""
        from nginx import Nginx
        server = Nginx(self, root, **kwargs)
        server.start()
        return server

    # --- servers of our own ----------------------------------------------------------------------------

    def serve(self, root, *args, binary=None):
        """`offlinepkg serve` on a free port; returns (process, base URL)."""
        out = self.path(f"serve-{time.monotonic_ns()}.out")
        process = self.start([binary or self.offlinepkg, "serve", "--root", root, "--port", "0", *args],
                             stdout=open(out, "w"), stderr=subprocess.DEVNULL)
        for _ in range(200):
            text = open(out).read()
            if text.strip():
                return process, text.splitlines()[0].strip()
            if process.poll() is not None:
                raise Failure(f"serve --root {root} exited {process.returncode} before it listened")
            time.sleep(0.05)
        raise Failure(f"serve --root {root} printed no address within 10 s")

    def first_answer(self, root, runs, binary=None, host="bench.offlinepkg.test"):
        """serve's first answer: from just before its process is made to the first byte of a 200 for `/`,
        polled every millisecond by this process (a shell loop would add its own start to the figure).
        Returns (median ms, [ms...], the last server still running, its port)."""
        times, server, port = [], None, None
        request = f"GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n".encode()
        for run in range(runs):
            if server is not None:
                server.terminate()
                server.wait()
            port = free_port()
            start = time.monotonic()
            server = self.start([binary or self.offlinepkg, "serve", "--root", root, "--port", str(port)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            while True:
                try:
                    with socket.create_connection(("127.0.0.1", port), timeout=5) as c:
                        c.sendall(request)
                        if c.recv(12).startswith(b"HTTP/1.1 200"):
                            times.append((time.monotonic() - start) * 1000)
                            break
                except OSError:
                    pass
                if server.poll() is not None:
                    raise Failure(f"serve --root {root} exited {server.returncode} before answering")
                if time.monotonic() - start > 60:
                    raise Failure(f"serve --root {root} did not answer / within 60 s")
                time.sleep(0.001)
        return median(times), times, server, port

    @staticmethod
    def memory(pid):
        """VmRSS and RssAnon of a process, in KiB."""
        fields = {}
        for line in open(f"/proc/{pid}/status"):
            key, _, value = line.partition(":")
            fields[key] = value.split()[0] if value.split() else "0"
        return int(fields.get("VmRSS", 0)), int(fields.get("RssAnon", 0))

    def get(self, url, host=None, check=False):
        """The body of one GET (curl), or "" when it fails and `check` is off."""
        argv = ["curl", "-sf", url] + (["-H", f"Host: {host}"] if host else [])
        return self.run(argv, check=check, timeout=60)

    def wait_for(self, condition, seconds, why):
        deadline = time.monotonic() + seconds
        while not condition():
            if time.monotonic() > deadline:
                raise Failure(why)
            time.sleep(0.05)

    def fetch_all(self, base, paths, host="bench.offlinepkg.test"):
        """GETs every path over one keep-alive curl (warms a server the way a page load does)."""
        config = self.path("urls.curl")
        with open(config, "w") as f:
            for p in paths:
                f.write(f'url = "{base.rstrip("/")}/{p.lstrip("/")}"\nheader = "Host: {host}"\noutput = /dev/null\n')
        self.run(["curl", "-s", "-K", config], check=False)

    def wrk(self, url, connections, duration, host="bench.offlinepkg.test", script=None):
        """One wrk run over keep-alive connections: {p99_ms, rps, timeouts, errors}."""
        argv = ["wrk", "-t2", f"-c{connections}", f"-d{duration}", "--timeout", "2s", "--latency", "-H", f"Host: {host}"]
        if script:
            argv += ["-s", script]
        out = self.run(argv + [url])
        result = {"p99_ms": None, "rps": None, "timeouts": 0, "errors": 0}
        for line in out.splitlines():
            words = line.split()
            if words[:1] == ["99%"]:
                result["p99_ms"] = wrk_ms(words[1])
            elif line.strip().startswith("Requests/sec"):
                result["rps"] = float(words[1])
            elif line.strip().startswith("Socket errors"):
                numbers = [int(n) for n in re.findall(r"\d+", line)]
                result["errors"] += numbers[0] + numbers[1] + numbers[2]
                result["timeouts"] = numbers[3]
            elif line.strip().startswith("Non-2xx"):
                result["errors"] += int(words[-1])
        if result["rps"] is None:
            raise Failure(f"wrk printed no rate for {url}: {out[-300:]}")
        return result

    # --- figures ---------------------------------------------------------------------------------------

    def figure(self, id, label, value, *, ours=None, theirs=None, unit=None, samples=None, detail=None):
        """Records one figure: `value` judged against its line in Benchmarks/targets (PASS/MISS), or given
        for information (`-`). `ours`/`theirs`: the two sides a ratio comes from, for the table."""
        target = self.targets.get(id)
        if target is None:
            raise Failure(f"figure {id} has no line in Benchmarks/targets")
        unit = unit or target["unit"]
        if value is None:
            verdict = "MISS" if target["op"] else "-"
        elif target["op"]:
            verdict = "PASS" if judge(value, target) else "MISS"
        else:
            verdict = "-"
        shown = fmt(value, target["unit"])
        if ours is not None or theirs is not None:
            shown = f"{ours} / {theirs} = {shown}"
        result = {"row": self.row, "figure": id, "label": label, "value": value, "unit": target["unit"],
                  "shown": shown, "target": goal(target), "verdict": verdict}
        if samples:
            result["samples"] = samples
        if detail:
            result["detail"] = detail
        self.results.append(result)
        print(f"| {label} | {shown} | {goal(target)} | {verdict} |", flush=True)

    def not_measured(self, ids, why):
        for id in ids:
            if not any(r["figure"] == id for r in self.results):
                target = self.targets.get(id, {"op": None, "value": None, "unit": ""})
                self.results.append({"row": self.row, "figure": id, "label": id, "value": None, "unit": target["unit"],
                                     "shown": f"not measured: {why}", "target": goal(target), "verdict": "MISS"})
                print(f"| {id} | not measured: {why} | {goal(target)} | MISS |", flush=True)


def wrk_ms(text):
    for suffix, factor in (("us", 0.001), ("ms", 1.0), ("m", 60000.0), ("s", 1000.0)):
        if text.endswith(suffix):
            return float(text[: -len(suffix)]) * factor
    return float(text)


def machine(offlinepkg):
    """The machine and the build, as the results say them."""
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    memory = next((int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemTotal")), 0)
    try:
        dynamic = subprocess.run(["readelf", "-d", offlinepkg], capture_output=True, text=True, check=True).stdout
        runtime = "shared Swift runtime" if "libswiftCore" in dynamic else "static Swift runtime"
    except (OSError, subprocess.CalledProcessError):
        runtime = "Swift runtime unknown"
    def version(argv):
        try:
            done = subprocess.run(argv, capture_output=True, text=True)
            return (done.stdout + done.stderr).strip().splitlines()[0]
        except (OSError, IndexError):
            return "?"
    commit = subprocess.run(["git", "-C", CHECKOUT, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    return {
        "cpu": f"{os.cpu_count()} cores, {model}",
        "memory": f"{memory / 1048576:.0f} GiB",
        "kernel": f"{platform.system()} {platform.release()}",
        "filesystem": subprocess.run(["findmnt", "-no", "FSTYPE", "-T", tempfile.gettempdir()], capture_output=True, text=True).stdout.strip(),
        "nginx": version(["nginx", "-v"]).replace("nginx version: ", ""),
        "wrk": " ".join(version(["wrk", "--version"]).split()[:2]),
        "binary": f"{offlinepkg} ({runtime}, {version([offlinepkg, '--version'])})",
        "harness": f"Benchmarks/ at {commit or '?'}",
        "date": time.strftime("%Y-%m-%dT%H:%MZ", time.gmtime()),
        "load": " ".join(open("/proc/loadavg").read().split()[:3]),
    }
