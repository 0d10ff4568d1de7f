"""nginx on loopback, started one way for every row: a repository server, a server raced under load, a
caching proxy. Used through `Harness.nginx(...)`."""
import os, signal, subprocess, time

from harness import Failure, free_port


class Nginx:
    """nginx on loopback with one configuration for every row: sendfile, ETags, a free port, its own
    prefix. `log=True` writes an access log of `uri status body-bytes "range" method` for byte counts;
    `workers`: 1 for a repository, "auto" for a server raced under load; `http` adds directives;
    `servers` replaces the one static server (each a `server { ... }` block, ports chosen by the row)."""

    def __init__(self, h, root, *, workers=1, log=False, http="", servers=None, server=""):
        self.h, self.root, self.workers, self.log, self.http = h, root, workers, log, http
        self.servers, self.server = servers, server
        self.prefix = h.path(f"nginx-{time.monotonic_ns()}")
        self.port = None

    def config(self, port):
        user = "user root root;" if os.getuid() == 0 else ""
        prefix = self.prefix
        log = (f"log_format bench '$request_uri $status $body_bytes_sent \"$http_range\" $request_method';\n"
               f"    access_log {prefix}/access.log bench;") if self.log else "access_log off;"
        servers = self.servers or [f"server {{ listen 127.0.0.1:{port}; root {self.root}; {self.server} }}"]
        return f"""{user}
daemon on;
worker_processes {self.workers};
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    include /etc/nginx/mime.types;
    default_type application/octet-stream;
    {log}
    sendfile on;
    tcp_nopush on;
    etag on;
    keepalive_requests 1000000;
    keepalive_timeout 60s;
    client_body_temp_path {prefix}/body;
    proxy_temp_path {prefix}/proxy;
    fastcgi_temp_path {prefix}/fastcgi;
    uwsgi_temp_path {prefix}/uwsgi;
    scgi_temp_path {prefix}/scgi;
    {self.http}
    {chr(10).join(servers)}
}}
"""

    def start(self):
        os.makedirs(self.prefix, exist_ok=True)
        for _ in range(20):
            port = free_port()
            with open(f"{self.prefix}/nginx.conf", "w") as f:
                f.write(self.config(port))
            # nginx binds before it daemonises: a port taken meanwhile fails here, and we try another.
            if subprocess.run(["nginx", "-p", self.prefix, "-c", f"{self.prefix}/nginx.conf"],
                              stderr=subprocess.DEVNULL).returncode == 0:
                self.port = port
                self.h.nginx_prefixes = getattr(self.h, "nginx_prefixes", []) + [self.prefix]
                return
        raise Failure(f"nginx did not start: {open(self.prefix + '/error.log').read()[-400:]}")

    def url(self, path=""):
        return f"http://127.0.0.1:{self.port}/{path.lstrip('/')}"

    def mark(self):
        """The access log's length now: `served_since(mark)` counts what came after."""
        path = f"{self.prefix}/access.log"
        return sum(1 for _ in open(path)) if os.path.exists(path) else 0

    def served_since(self, mark, uri=lambda u: True):
        """(body bytes, requests) nginx logged after `mark` for request URIs `uri` accepts. nginx writes a
        line when a request ends: give the last answer a moment first."""
        time.sleep(0.2)
        sent = requests = 0
        for line in list(open(f"{self.prefix}/access.log"))[mark:]:
            words = line.split()
            if uri(words[0]):
                sent += int(words[2])
                requests += 1
        return sent, requests

    def log_lines(self):
        return [line.split() for line in open(f"{self.prefix}/access.log")]

    def stop(self):
        try:
            pid = int(open(f"{self.prefix}/nginx.pid").read())
        except (OSError, ValueError):
            return
        os.kill(pid, signal.SIGTERM)
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except OSError:
                return
            time.sleep(0.05)
        os.kill(pid, signal.SIGKILL)


def stop_nginxes(h):
    for prefix in getattr(h, "nginx_prefixes", []):
        try:
            os.kill(int(open(f"{prefix}/nginx.pid").read()), signal.SIGTERM)
        except (OSError, ValueError):
            pass
