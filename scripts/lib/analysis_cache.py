"""A cache of per-source check results, like ccache for analyses that
generate no code (scripts/check_thread_safety.py).

A source's result is reused when nothing its parse read has changed. What it
read is taken from the build's own dependency log (`ninja -t deps`: every
header the compiler opened for that object), so no extra preprocessing is
needed to know it. The key hashes:
  - the checker's identity (its version string: the checking script's own
    text and the clang version), and the command line, with the checkout and
    build folders written as placeholders, so a fresh clone elsewhere hits
    the same entries;
  - the source and every project header it read (their contents: a fresh
    clone has fresh mtimes), and every system header by path, size and
    mtime (a package upgrade changes them).
Only a source whose dependencies are on record gets a key: one the build has
not compiled yet, or whose object is older than one of the files it read
(edited since the last build, so the record may miss a new include), is
always checked. Only outcomes that are a property of the
inputs are stored (the caller decides which); a failure is checked again.

The dependency list is the main build's compiler's (gcc's, in this project):
a header that only clang would include (under #ifdef __clang__) is not in it.
The project has no such include; a system one changes only with a package
upgrade, which changes the headers both compilers read.

Entries live under $ES_ANALYSIS_CACHE, else $XDG_CACHE_HOME/ensemble-serve,
else ~/.cache/ensemble-serve, as one small file per key (safe to delete).
"""
import hashlib
import os
import subprocess


def cache_dir(name):
    base = os.environ.get("ES_ANALYSIS_CACHE")
    if not base:
        xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        base = os.path.join(xdg, "ensemble-serve")
    return os.path.join(base, name)


def ninja_deps(build_dir):
    """{object path relative to build_dir: [dependency paths as ninja wrote
    them]} for every object whose record is valid; {} without ninja or log."""
    try:
        out = subprocess.run(["ninja", "-C", build_dir, "-t", "deps"], capture_output=True, text=True,
                             check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return {}
    deps, current = {}, None
    for line in out.splitlines():
        if not line.strip():
            current = None
        elif not line.startswith(" "):
            obj, _, state = line.partition(": #deps")
            current = [] if "(VALID)" in state else None
            if current is not None:
                deps[obj] = current
        elif current is not None:
            current.append(line.strip())
    return deps


class AnalysisCache:
    def __init__(self, name, identity, build_dir, root):
        self.dir = cache_dir(name)
        self.identity = identity
        self.build_dir = os.path.abspath(build_dir)
        self.root = os.path.abspath(root)
        self.deps = ninja_deps(self.build_dir)
        self._file_hashes = {}
        self.hits = 0

    def _normalised(self, text):
        return text.replace(self.build_dir, "<build>").replace(self.root, "<root>")

    def _file_part(self, path):
        """(text for the key, mtime in ns), or None for a file that is gone."""
        if path in self._file_hashes:
            return self._file_hashes[path]
        try:
            st = os.stat(path)
            if path.startswith(self.root + os.sep):
                with open(path, "rb") as f:
                    text = "c " + self._normalised(path) + " " + hashlib.sha256(f.read()).hexdigest()
            else:
                text = f"s {path} {st.st_size} {st.st_mtime_ns}"
            part = (text, st.st_mtime_ns)
        except OSError:
            part = None
        self._file_hashes[path] = part
        return part

    def key(self, obj, command, directory):
        """The key of `obj` (relative to the build folder) parsed by `command`
        in `directory`, or None when its dependencies are not on record."""
        deps = self.deps.get(obj) if obj else None
        if not deps:
            return None
        try:
            built = os.stat(os.path.join(self.build_dir, obj)).st_mtime_ns
        except OSError:
            return None
        h = hashlib.sha256()
        for text in [self.identity, self._normalised(directory)] + [self._normalised(a) for a in command]:
            h.update(text.encode() + b"\0")
        for dep in deps:
            part = self._file_part(os.path.normpath(os.path.join(self.build_dir, dep)))
            if part is None or part[1] > built:  # gone, or edited since the build: the record may be stale
                return None
            h.update(part[0].encode() + b"\0")
        return h.hexdigest()

    def get(self, key):
        if key is None:
            return None
        try:
            with open(os.path.join(self.dir, key[:2], key), encoding="utf-8") as f:
                value = f.read()
        except OSError:
            return None
        self.hits += 1
        return value

    def put(self, key, value):
        if key is None:
            return
        folder = os.path.join(self.dir, key[:2])
        try:
            os.makedirs(folder, exist_ok=True)
            tmp = os.path.join(folder, f".{key}.{os.getpid()}")
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(value)
            os.replace(tmp, os.path.join(folder, key))  # whole or absent, whoever else writes it
        except OSError:
            pass  # a cache that cannot be written only costs time
