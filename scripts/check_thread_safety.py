#!/usr/bin/env python3
"""Runs clang's thread-safety analysis (and -Wshadow) over every project
source of a build, whatever compiler built it.

The analysis is clang's; the main build may be gcc's, and the scripted clang
builds (sanitizers) leave out the LibTorch targets. This parses each source
of the build's compile_commands.json with clang++ -fsyntax-only and the same
flags (no code is generated, so it costs a fraction of a build), with
-Wthread-safety and -Wshadow as errors. Generated files and third-party code
are skipped.

clang 14 cannot parse LibTorch 1.13's headers in C++20 with libstdc++ 12
(std::vector<c10::IValue> of an incomplete type, instantiated eagerly by
C++20's constexpr containers): a source whose only errors are inside system
headers is parsed again as C++17 (C++20 features clang accepts there as
extensions, such as defaulted comparisons, allowed), and if that fails too
(it uses a C++20 library feature itself) it is listed as not analysable, not
as failed. Sources that include LibTorch try C++17 first. What the checks
find is reported from either parse.

LibTorch's umbrella headers are most of a LibTorch source's parse: sources
that read them and share a command line (three or more) are parsed with a
precompiled header of them, made once per run (PrecompiledHeaders); a parse
with it that fails for any reason but the checks' findings is done again
without it.

Results are cached (scripts/lib/analysis_cache.py): a source that was clean
or not analysable is not parsed again while it, every header it reads (from
the build's dependency log), its flags, clang and this script are unchanged.
--no-cache parses every source.

--covered-by DIR ...: sources that the clang build in DIR compiled with these
checks as errors (cmake/EsWarnings.cmake under clang with ES_WERROR: the
sanitizer builds of scripts/test.sh) and whose objects are up to date there
(ninja, asked with -n, would run nothing for them) are not parsed again: that
compile ran the same checks on the same source, headers and flags. On a
machine without caches it halves the sources this script parses.

Usage: scripts/check_thread_safety.py [BUILD_DIR] [-j N] [--only PREFIX ...] [--no-cache] [--covered-by DIR ...]
Exit 1 and the compiler's messages when a source fails.
"""
import argparse
import concurrent.futures
import hashlib
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "scripts", "lib"))
from analysis_cache import AnalysisCache  # noqa: E402
CHECKS = ["-Wthread-safety", "-Werror=thread-safety", "-Wshadow", "-Werror=shadow"]
# gcc-only flags clang would reject.
DROP = {"-fno-fat-lto-objects"}
# LibTorch's umbrella headers: parsing them is most of a LibTorch source's
# parse (4 to 9 s on the Xeon, against about 1.5 with them precompiled), so
# sources that read one of them (or ATen/ATen.h, most of torch/torch.h) and
# share a command line are parsed with a precompiled header of these (see
# PrecompiledHeaders).
PCH_HEADERS = ["torch/torch.h", "torch/script.h"]
HEAVY_HEADERS = PCH_HEADERS + ["ATen/ATen.h"]
# A precompiled header costs about two parses to make: fewer sources than
# this do not pay for it.
PCH_MIN_SOURCES = 3


def command_args(entry):
    """A compile_commands.json entry's command line, as a list."""
    return shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])


def clang_command(entry):
    args = command_args(entry)
    out = ["clang++"]
    skip = False
    for a in args[1:]:
        if skip:
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        if a in DROP or a == "-c":
            continue
        out.append(a)
    return out[:-1] + ["-fsyntax-only", "-Wno-unknown-warning-option"] + CHECKS + [out[-1]]


def object_of(entry):
    """The object file the build compiles `entry` into (its -o argument)."""
    args = command_args(entry)
    return args[args.index("-o") + 1] if "-o" in args[:-1] else None


def covered_sources(build_dir, root=ROOT):
    """The sources (relative to `root`) that the build in `build_dir` compiled
    with the checks as errors and whose objects are up to date: ninja, asked
    what it would run for them (-n), runs nothing for them (their sources,
    the headers they read and their command lines are as when they were
    compiled)."""
    path = os.path.join(build_dir, "compile_commands.json")
    if not os.path.exists(path):
        sys.exit(f"check_thread_safety: --covered-by {build_dir}: no compile_commands.json there")
    candidates = {}  # object -> source, for the commands that ran the checks as errors
    for e in json.load(open(path)):
        args, obj = command_args(e), object_of(e)
        if "clang" not in os.path.basename(args[0]):
            continue
        errors = "-Werror" in args or ("-Werror=thread-safety" in args and "-Werror=shadow" in args)
        if errors and "-Wthread-safety" in args and "-Wshadow" in args and obj:
            candidates[obj] = os.path.relpath(e["file"], root)
    if not candidates:
        return set()
    dry = subprocess.run(["ninja", "-C", build_dir, "-n", "-v", *sorted(candidates)], capture_output=True, text=True)
    if dry.returncode != 0:
        sys.exit(f"check_thread_safety: --covered-by {build_dir}: ninja -n failed: {dry.stderr.strip()}")
    stale = set()
    for line in dry.stdout.splitlines():
        words = line.split()
        stale |= {words[i + 1] for i, w in enumerate(words[:-1]) if w == "-o"}
    return {source for obj, source in candidates.items() if obj not in stale}


def pch_key(entry):
    """What the sources that can share a precompiled header have in common:
    the folder they are parsed in and their C++17 command line without the
    source."""
    cxx17 = language_modes(entry)[1]
    return (entry["directory"],) + tuple(cxx17[:-2] + cxx17[-1:])


class PrecompiledHeaders:
    """Precompiled headers of LibTorch's umbrella headers, one per folder and
    command line (the flags a precompiled header is made with must be the
    ones it is used with: clang refuses one made with other macros or
    optimisation). Made before the parses that use them (make_all), in a
    scratch folder removed by close(); a header that fails to build is not
    used (its sources are parsed as before).

    Made with -fpch-instantiate-templates: the templates the headers
    instantiate are instantiated once, in the header, not again in each
    source (a source that reads torch/torch.h then parses in about 1.3 s
    instead of 6). Only the checks' own findings are taken from a parse with
    it: any other error sends the source to the plain parse, so the header
    can never make a source fail that would not fail without it."""

    def __init__(self, groups, headers=PCH_HEADERS):
        # groups: {pch_key: number of sources}; only those with enough
        # sources get a header. headers: what it includes.
        # wanted: {pch_key: its header's number, for the file's name}.
        self.wanted = {k: i for i, k in enumerate(k for k, n in groups.items() if n >= PCH_MIN_SOURCES)}
        self.headers = headers
        self.dir = tempfile.mkdtemp(prefix="es-tsa-pch.") if self.wanted else None
        self.made = {}  # shared command line -> path of the header, or None when it failed
        self.locks = {k: threading.Lock() for k in self.wanted}

    def make_all(self, pool):
        """Queues the making of every header on `pool`, ahead of the parses
        queued after it (each worker makes a different one meanwhile)."""
        for shared in self.wanted:
            pool.submit(self.get, shared)

    def get(self, shared):
        """The header for sources parsed by `shared` (their command line
        without the source), or None: none wanted, or it failed to build."""
        if shared not in self.wanted:
            return None
        with self.locks[shared]:  # made once; a source that needs it meanwhile waits for it
            if shared not in self.made:
                self.made[shared] = self._make(shared)
            return self.made[shared]

    def _make(self, shared):
        directory = shared[0]
        header = os.path.join(self.dir, f"umbrella{self.wanted[shared]}.h")
        with open(header, "w") as f:
            f.writelines(f"#include <{h}>\n" for h in self.headers)
        pch = header + ".pch"
        flags = [a for a in shared[1:] if a != "-fsyntax-only"]
        r = subprocess.run(flags + ["-fpch-instantiate-templates", "-x", "c++-header", header, "-o", pch],
                           cwd=directory, capture_output=True, text=True)
        return pch if r.returncode == 0 else None

    def count(self):
        return sum(1 for path in self.made.values() if path)

    def close(self):
        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)


def reads_heavy_header(deps):
    return any(d.endswith("/" + h) for d in deps for h in HEAVY_HEADERS)


def errors_only_in_system_headers(stderr):
    errors = [l for l in stderr.splitlines() if ": error:" in l]
    return errors and all(l.startswith("/usr/") for l in errors)


def found_by_checks(stderr):
    return any("-Wthread-safety" in l or "-Wshadow" in l for l in stderr.splitlines() if ": error:" in l)


def language_modes(entry):
    """The C++20 parse of a compile_commands.json entry and the C++17 one
    (C++20 features clang accepts as C++17 extensions, such as defaulted
    comparisons, allowed there). The source is the last argument but one of
    the C++17 parse."""
    cxx20 = clang_command(entry)
    cxx17 = [("-std=c++17" if a.startswith("-std=") else a) for a in cxx20] + ["-Wno-c++20-extensions"]
    return cxx20, cxx17


def uses_torch(command):
    return any("/usr/include/torch" in a for a in command)


def parse_source(entry, pch=None):
    """Parses `entry`'s source with the checks: (0, "") when clean, (exit
    status, messages) when it fails, (None, "") when this clang cannot parse
    it (see the module's comment). `pch`: a precompiled header made with the
    entry's C++17 command line (PrecompiledHeaders), tried first; only a
    clean parse or the checks' own findings are taken from that parse, and
    anything else is decided by the plain parses."""
    cxx20, cxx17 = language_modes(entry)
    if pch:
        r = subprocess.run(cxx17[:-2] + ["-include-pch", pch] + cxx17[-2:], cwd=entry["directory"],
                           capture_output=True, text=True)
        if r.returncode == 0:
            return 0, ""
        if found_by_checks(r.stderr):
            return r.returncode, r.stderr
    # LibTorch's sources are parsed as C++17 first: as C++20 they fail in
    # LibTorch's headers, and that failed parse costs as long as a whole one.
    attempts = [("c++17", cxx17), ("c++20", cxx20)] if uses_torch(cxx20) else [("c++20", cxx20), ("c++17", cxx17)]
    for std, cmd in attempts:
        r = subprocess.run(cmd, cwd=entry["directory"], capture_output=True, text=True)
        if r.returncode == 0:
            return 0, ""
        # What the checks find is a failure in either language mode; so is
        # any C++20 error outside the system headers (the code itself does
        # not compile).
        if found_by_checks(r.stderr) or (std == "c++20" and not errors_only_in_system_headers(r.stderr)):
            return r.returncode, r.stderr
    return None, ""  # not analysable by this clang (see above)


def checker_identity():
    """What the cached results depend on besides the sources: this script,
    the cache's code and the clang that parses."""
    h = hashlib.sha256()
    for path in (__file__, os.path.join(ROOT, "scripts", "lib", "analysis_cache.py")):
        with open(path, "rb") as f:
            h.update(f.read())
    version = subprocess.run(["clang++", "--version"], capture_output=True, text=True).stdout
    return h.hexdigest() + " " + version


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("build_dir", nargs="?", default=os.path.join(ROOT, "build"))
    parser.add_argument("-j", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--only", nargs="*", default=[], help="check only sources under these folders")
    parser.add_argument("--no-cache", action="store_true", help="parse every source, reusing no earlier result")
    parser.add_argument("--covered-by", nargs="*", default=[], metavar="DIR",
                        help="skip sources a clang build in DIR compiled with these checks as errors")
    args = parser.parse_args()
    path = os.path.join(args.build_dir, "compile_commands.json")
    if not os.path.exists(path):
        sys.exit(f"check_thread_safety: {path} not found: configure the build first (scripts/build.sh)")
    covered = set()
    for build_dir in args.covered_by:
        covered |= covered_sources(build_dir)
    entries, seen, skipped_covered = [], set(), 0
    for e in json.load(open(path)):
        rel = os.path.relpath(e["file"], ROOT)
        if rel.startswith("..") or rel.startswith("build") or ".pb." in rel:
            continue
        if args.only and not any(rel.startswith(p) for p in args.only):
            continue
        # A source two targets compile (a test helper) is checked once.
        if rel in seen:
            continue
        seen.add(rel)
        if rel in covered:
            skipped_covered += 1
            continue
        entries.append((rel, e))
    failed, skipped = [], []
    start = time.monotonic()
    cache = AnalysisCache("thread-safety", checker_identity(), args.build_dir, ROOT)

    # The cache first: only the sources parsed now share precompiled headers.
    keys, groups, results_cached, pch_group = {}, {}, {}, {}
    for rel, e in entries:
        keys[rel] = None if args.no_cache else cache.key(object_of(e), clang_command(e), e["directory"])
        cached = cache.get(keys[rel])
        if cached is not None:
            results_cached[rel] = 0 if cached == "clean" else None
            continue
        if uses_torch(clang_command(e)) and reads_heavy_header(cache.deps.get(object_of(e)) or []):
            pch_group[rel] = pch_key(e)
            groups[pch_group[rel]] = groups.get(pch_group[rel], 0) + 1
    pch = PrecompiledHeaders(groups)

    def check(item):
        rel, e = item
        if rel in results_cached:
            return rel, results_cached[rel], ""
        rc, err = parse_source(e, pch.get(pch_group[rel]) if rel in pch_group else None)
        if rc == 0 or rc is None:  # a property of the inputs; a failure is parsed again next time
            cache.put(keys[rel], "clean" if rc == 0 else "not analysable")
        return rel, rc, err

    done = 0
    try:
        with concurrent.futures.ThreadPoolExecutor(max_workers=args.j) as pool:
            pch.make_all(pool)
            # The sources that need no precompiled header first, while the
            # headers are made.
            for rel, rc, err in pool.map(check, sorted(entries, key=lambda item: (item[0] in pch_group, item[0]))):
                done += 1
                if rc is None:
                    skipped.append(rel)
                elif rc != 0:
                    failed.append(rel)
                    sys.stdout.write(err)
                if done % 10 == 0 or done == len(entries):
                    print(f"check_thread_safety: {done}/{len(entries)} sources, {len(failed)} failed, "
                          f"{time.monotonic() - start:.0f} s", flush=True)
    finally:
        pch.close()
    for f in skipped:
        print("not analysable (LibTorch's headers in C++20 and C++17 with this clang):", f)
    for f in failed:
        print("FAILED:", f)
    print(f"check_thread_safety: {len(entries)} sources, {len(entries) - len(failed) - len(skipped)} analysed clean, "
          f"{len(skipped)} not analysable, {len(failed)} failed ({cache.hits} unchanged since an earlier run, "
          f"not parsed again; {pch.count()} precompiled headers of LibTorch's made for "
          f"{len(pch_group)} sources)" + (f"; {skipped_covered} more compiled with these checks in "
                                   f"{', '.join(args.covered_by)}" if args.covered_by else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
