"""The sites the rows publish. Each is deterministic: the same arguments give the same bytes, so archives,
tree hashes and byte counts repeat from run to run (the real-file slices repeat on one machine)."""
import os, shutil

WORDS = [b"function", b"return", b"const", b"this", b"value", b"render", b"props", b"state", b"export",
         b"import", b"default", b"length", b"push", b"null", b"undefined", b"async", b"await", b"then"]


def bundle(root, n):
    """N files as a bundler's output names them, in folders of 100 under assets/, plus index.html. Sizes
    spread 100 B - 3 KB (about 1.6 KB on average); the text compresses about as well as minified JS
    (3-4x), so per-file costs and byte costs both show."""
    seed, text = 1, bytearray()
    while len(text) < 1 << 20:
        seed = (seed * 1103515245 + 12345) & 0x7FFFFFFF
        text += WORDS[seed % len(WORDS)] + (b"(", b" ", b".", b";\n", b"=", b"_%d" % (seed % 97))[seed % 6]
    for i in range(n):
        folder = os.path.join(root, "assets", "g%d" % (i // 100))
        if i % 100 == 0:
            os.makedirs(folder, exist_ok=True)
        size = 100 + (i * 2654435761) % 3000
        offset = (i * 7919) % (len(text) - size)
        with open(os.path.join(folder, "f%d.js" % i), "wb") as f:
            f.write(b"/* f%d */\n" % i + text[offset:offset + size])
    with open(os.path.join(root, "index.html"), "w") as f:
        f.write("<title>bench</title>\n")


def small_files(root, n, title="bench 1"):
    """N files of 20-120 bytes in folders of 100 (`assets/g<i/100>/f<i>.js`): a large root whose cost is
    per file, not per byte."""
    for i in range(n):
        folder = os.path.join(root, "assets", "g%d" % (i // 100))
        if i % 100 == 0:
            os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "f%d.js" % i), "w") as f:
            f.write("export const v%d = %d;\n" % (i, i) * (1 + i % 5))
    with open(os.path.join(root, "index.html"), "w") as f:
        f.write(f"<title>{title}</title>\n")


def small_file_path(i):
    return "assets/g%d/f%d.js" % (i // 100, i)


def real_files(root, count, folders=("/usr/share/doc",), largest=None, base="/"):
    """The first `count` regular files under `folders` in byte order of their paths (symbolic links left
    out: a site holds files and folders only), copied to root at their paths below `base`. Returns the
    relative paths, sorted. Real text: documentation, changelogs (some gzipped), C headers."""
    found = []
    for top in folders:
        for folder, _, files in os.walk(top):
            for name in files:
                path = os.path.join(folder, name)
                if os.path.islink(path) or not os.path.isfile(path):
                    continue
                if largest and os.path.getsize(path) >= largest:
                    continue
                found.append(path.encode())
    found.sort()
    picked = [os.path.relpath(p.decode(), base) for p in found[:count]]
    for path in picked:
        target = os.path.join(root, path)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(base, path), target)
    return picked


def packages(source, files, count, into):
    """`files` (relative to `source`, sorted) split into `count` packages of about the same number of
    files, cut where the top-level folder changes; each package's files hard-linked into its own site,
    `into(number)` (numbered from 1). Returns [(number, site, paths)] of the packages that got files."""
    groups, current, last = [[] for _ in range(count)], 0, None
    for i, path in enumerate(files):
        top = path.split("/")[0]
        if top != last:
            current, last = min(count - 1, i * count // len(files)), top
        groups[current].append(path)
    made = []
    for number, paths in enumerate(groups, 1):
        if not paths:
            continue
        site = into(number)
        os.makedirs(site, exist_ok=True)
        for path in paths:
            os.makedirs(os.path.dirname(os.path.join(site, path)), exist_ok=True)
            os.link(os.path.join(source, path), os.path.join(site, path))
        made.append((number, site, paths))
    return made


def python_docs(root, count):
    """Debian's Python 3.11 HTML docs (python3.11-doc: about 1,060 files, 67 MB) when installed and `count`
    reaches them, else a stand-in of `count` HTML pages of 8-118 KB in six folders. Returns what it made."""
    real = "/usr/share/doc/python3.11/html"
    if os.path.isdir(real) and count >= 1000:
        shutil.copytree(real, root, symlinks=False, dirs_exist_ok=True)
        return "Python 3.11 docs (python3.11-doc)"
    words = [b"<p>", b"</p>", b"<a href=\"", b"\">", b"</a>", b"function", b"module", b"return", b"class",
             b"value", b"<code>", b"</code>", b"the", b"of", b"import", b"<span class=\"n\">", b"</span>", b"\n"]
    seed, text = 7, bytearray()
    while len(text) < 4 << 20:
        seed = (seed * 1103515245 + 12345) & 0x7FFFFFFF
        text += words[seed % len(words)] + b" " + (b"x%d" % (seed % 997))
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "index.html"), "w") as f:
        f.write("<!doctype html><title>Python documentation</title>\n")
    for i in range(count):
        folder = os.path.join(root, ["library", "reference", "tutorial", "howto", "c-api", "whatsnew"][i % 6])
        os.makedirs(folder, exist_ok=True)
        size = 8000 + (i * 2654435761) % 110000
        offset = (i * 7919) % (len(text) - size)
        with open(os.path.join(folder, "page%d.html" % i), "wb") as f:
            f.write(b"<!doctype html><title>page %d</title>\n" % i + text[offset:offset + size])
    why = "" if os.path.isdir(real) else ", python3.11-doc is not installed"
    return f"a generated stand-in for the Python docs ({count} pages{why})"
