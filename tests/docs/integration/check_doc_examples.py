#!/usr/bin/env python3
"""ctest docs_examples: the examples of README.md and docs/*.md run as written.

Every fenced block in sh, python or yaml carries a marker, an HTML comment
(hidden on the rendered page) on the line before its fence:

  <!-- example: run -->                   run it against the server this test
                                          started (sh: bash -e -o pipefail;
                                          python: /usr/bin/python3); it must
                                          exit 0
  <!-- example: run; expect: TEXT -->    ... and print TEXT (stdout or stderr)
  <!-- example: server-config -->         a server config: a server started
                                          with it (free ports instead of its
                                          own) gets ready and stops with exit 0
  <!-- example: model-config NAME -->     the config.yaml of model NAME: a copy
                                          of the demo repository with it is
                                          served, NAME answers ready
  <!-- example: not run: REASON -->       shown only, REASON says why (a
                                          fragment, another machine, ...)

Options after `;` for server-config and model-config:
  files: DEST=SOURCE ...   files the example names, made first: SOURCE is
                           cert:NAME (tests/integration/make_test_certs.sh's
                           NAME, e.g. cert:server.pem) or tokens (a tokens
                           file with an admin and an infer token)
  versions: MODEL/N ...    version N of the demo repository's MODEL, copied
                           from its version 1

A block without a marker fails the test: a new example either runs or says
why not. Commands run in a scratch folder laid out like the source tree
(config/ copied, the other folders linked; build/bin and build/python link the
build's, build/demo_repo is the demo repository this test wrote), with the
documented default ports 8000 (HTTP), 8001 (gRPC) and 8002 (/metrics)
replaced by the ports the test's server picked: a server running beside the
test is never touched.

Usage: check_doc_examples.py SOURCE_DIR BUILD_DIR [--only FILE...] [--list]
Exit 0 when every marked example passes and every block is marked.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

LANGUAGES = {"sh", "python", "yaml"}
FENCE = re.compile(r"^```(\w*)\s*$")
MARKER = re.compile(r"^<!--\s*example:\s*(.*?)\s*-->\s*$")
DEFAULT_PORTS = {"8000": "http", "8001": "grpc", "8002": "metrics"}
PORT_REF = re.compile(r"\b(localhost|127\.0\.0\.1|0\.0\.0\.0):(800[012])\b")
LISTENING = re.compile(r"^(grpc|http|metrics) listening on (\S+):(\d+)")


class Block:
    def __init__(self, path, line, language, body, marker):
        self.path, self.line, self.language, self.body, self.marker = path, line, language, body, marker

    def where(self):
        return f"{self.path}:{self.line}"


def blocks_of(source_dir, rel):
    lines = open(os.path.join(source_dir, rel), encoding="utf-8").read().split("\n")
    out, i = [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        start, language = i, m.group(1)
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        marker = None
        if start > 0:
            mm = MARKER.match(lines[start - 1])
            if mm:
                marker = mm.group(1)
        out.append(Block(rel, start + 1, language, "\n".join(lines[start + 1:j]) + "\n", marker))
        i = j + 1
    return out


def parse_marker(marker):
    """("run" | "server-config" | "model-config" | "not run", argument, {option: value})."""
    parts = [p.strip() for p in marker.split(";")]
    head, options = parts[0], {}
    for p in parts[1:]:
        key, _, value = p.partition(":")
        options[key.strip()] = value.strip()
    if head.startswith("not run:"):
        return "not run", head[len("not run:"):].strip(), options
    kind, _, arg = head.partition(" ")
    return kind, arg.strip(), options


class Server:
    """An ensemble-server started on free ports, in its own process group."""

    def __init__(self, bin_dir, config, log_path, extra=()):
        self.log_path = log_path
        self.log = open(log_path, "w")
        self.proc = subprocess.Popen(
            [os.path.join(bin_dir, "ensemble-server"), "--config", config, "--grpc-port", "0", "--http-port", "0",
             "--metrics-port", "0", *extra],
            stdout=subprocess.PIPE, stderr=self.log, text=True, start_new_session=True)
        self.ports = {}
        self.done = threading.Event()  # every port printed, or stdout closed
        threading.Thread(target=self._read_stdout, daemon=True).start()

    def _read_stdout(self):
        # Read to the end, so that the server never blocks on a full pipe.
        for line in self.proc.stdout:
            m = LISTENING.match(line)
            if m:
                self.ports[m.group(1)] = m.group(3)
                if len(self.ports) == 3:
                    self.done.set()
        self.done.set()

    def wait_listening(self, timeout_s=120):
        """The ports, once the server printed them all; None if it exited or took too long."""
        self.done.wait(timeout_s)
        return dict(self.ports) if len(self.ports) == 3 else None

    def log_tail(self, n=30):
        self.log.flush()
        with open(self.log_path, errors="replace") as f:
            return "".join(f.readlines()[-n:])

    def log_size(self):
        self.log.flush()
        return os.path.getsize(self.log_path)

    def log_since(self, offset, n=40):
        """What the server logged after byte offset (while an example ran): its warnings and errors, then its
        last n lines (a host killed as hung is followed by the lines of its restart)."""
        self.log.flush()
        with open(self.log_path, "rb") as f:
            f.seek(offset)
            lines = f.read().decode("utf-8", "replace").splitlines(keepends=True)
        if not lines:
            return "(nothing)\n"
        alarms = [line for line in lines[:-n] if " warning " in line or " error " in line]
        return "".join(alarms[-n:] + (["...\n"] if len(lines) > n else []) + lines[-n:])

    def stop(self):
        """SIGTERM, then the exit status (SIGKILL after 30 s: status None)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            return None
        finally:
            self.log.close()


def ready(bin_dir, grpc_port, model=None, timeout_s=60):
    deadline = time.monotonic() + timeout_s
    args = [os.path.join(bin_dir, "ensemble-cli"), "--server", f"127.0.0.1:{grpc_port}", "--timeout-ms", "2000",
            "ready"] + ([model] if model else [])
    while time.monotonic() < deadline:
        if subprocess.run(args, capture_output=True).returncode == 0:
            return True
        time.sleep(0.5)
    return False


class Runner:
    def __init__(self, source_dir, build_dir, scratch):
        self.source, self.build, self.scratch = source_dir, build_dir, scratch
        self.bin = os.path.join(build_dir, "bin")
        self.certs = None

    def lay_out(self):
        """The scratch tree: like the source tree, with the test's own demo repository."""
        for name in sorted(os.listdir(self.source)):
            if name.startswith(".") or name == "build" or name.startswith("build-"):
                continue
            src = os.path.join(self.source, name)
            if name == "config":
                shutil.copytree(src, os.path.join(self.scratch, name))
            else:
                os.symlink(src, os.path.join(self.scratch, name))
        os.makedirs(os.path.join(self.scratch, "build"))
        for name in ("bin", "python"):
            os.symlink(os.path.join(self.build, name), os.path.join(self.scratch, "build", name))
        subprocess.run([os.path.join(self.bin, "ensemble-make-demo"), "--out",
                        os.path.join(self.scratch, "build", "demo_repo"), "--train-steps", "0"],
                       check=True, capture_output=True)

    def make_file(self, folder, dest, source):
        path = os.path.join(folder, dest)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        if source == "tokens":
            with open(path, "w") as f:
                f.write("admin 3c9f1e6b0a7d4f2e8b5c1d9a7e3f0b62\ninfer b1e8d4a7c2f5093e6a1d8c4b7f2e5a90\n")
            return
        if not source.startswith("cert:"):
            raise ValueError(f"files: unknown source '{source}' (cert:NAME or tokens)")
        if self.certs is None:
            self.certs = os.path.join(self.scratch, "test-certs")
            subprocess.run(["bash", os.path.join(self.source, "tests/integration/make_test_certs.sh"), self.certs],
                           check=True, capture_output=True)
        shutil.copy(os.path.join(self.certs, source[len("cert:"):]), path)

    def prepare(self, folder, options):
        for item in options.get("files", "").split():
            dest, _, source = item.partition("=")
            self.make_file(folder, dest, source)

    def copy_demo_repo(self, dest, options):
        shutil.copytree(os.path.join(self.scratch, "build", "demo_repo"), dest)
        for item in options.get("versions", "").split():
            model, _, version = item.partition("/")
            shutil.copytree(os.path.join(dest, model, "1"), os.path.join(dest, model, version))

    def run_block(self, block, ports, expect):
        body = PORT_REF.sub(lambda m: f"{m.group(1)}:{ports[DEFAULT_PORTS[m.group(2)]]}", block.body)
        if block.language == "python":
            cmd = ["/usr/bin/python3", "-"]
        else:
            cmd = ["bash", "-e", "-o", "pipefail", "-s"]
        # The installed package's commands (ensemble-cli, ...) are the build's.
        env = dict(os.environ, PYTHONPATH=os.path.join(self.scratch, "build", "python"),
                   PATH=self.bin + os.pathsep + os.environ.get("PATH", ""))
        r = subprocess.run(cmd, input=body, cwd=self.scratch, capture_output=True, text=True, timeout=300, env=env)
        output = r.stdout + r.stderr
        if r.returncode != 0:
            return f"exit status {r.returncode}:\n{body}\n--- output ---\n{output[-3000:]}"
        if expect and expect not in output:
            return f"the output lacks '{expect}':\n{body}\n--- output ---\n{output[-3000:]}"
        return None

    def check_server_config(self, block, options):
        folder = tempfile.mkdtemp(prefix="server-config.", dir=self.scratch)
        # The example's relative paths start at its file's folder, one below
        # the scratch root as config/ is.
        folder = os.path.join(folder, "config")
        os.makedirs(folder)
        os.symlink(os.path.join(self.scratch, "build"), os.path.join(os.path.dirname(folder), "build"))
        self.prepare(folder, options)
        config = os.path.join(folder, "server.yaml")
        with open(config, "w") as f:
            f.write(block.body)
        server = Server(self.bin, config, os.path.join(folder, "server.log"))
        ports = server.wait_listening()
        status = server.stop()
        if ports is None:
            return f"the server did not start with it:\n{server.log_tail()}"
        if status != 0:
            return f"the server stopped with status {status}:\n{server.log_tail()}"
        return None

    def check_model_config(self, block, name, options):
        if not name:
            return "model-config needs the model's name (<!-- example: model-config NAME -->)"
        folder = tempfile.mkdtemp(prefix="model-config.", dir=self.scratch)
        repo = os.path.join(folder, "repo")
        self.copy_demo_repo(repo, options)
        os.makedirs(os.path.join(repo, name), exist_ok=True)
        with open(os.path.join(repo, name, "config.yaml"), "w") as f:
            f.write(block.body)
        config = os.path.join(folder, "server.yaml")
        demo = open(os.path.join(self.scratch, "config", "demo.yaml")).read()
        with open(config, "w") as f:
            f.write(re.sub(r"(?m)^repository:.*$", f"repository: {repo}", demo))
        server = Server(self.bin, config, os.path.join(folder, "server.log"))
        try:
            ports = server.wait_listening()
            if ports is None:
                return f"the repository with it was not served:\n{server.log_tail()}"
            if not ready(self.bin, ports["grpc"], name):
                return f"model '{name}' never answered ready:\n{server.log_tail()}"
        finally:
            server.stop()
        return None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source_dir")
    parser.add_argument("build_dir")
    parser.add_argument("--only", nargs="*", default=[], help="only these files (relative to SOURCE_DIR)")
    parser.add_argument("--list", action="store_true", help="list the blocks and their markers, run nothing")
    args = parser.parse_args()
    source, build = os.path.abspath(args.source_dir), os.path.abspath(args.build_dir)

    files = ["README.md"] + sorted("docs/" + f for f in os.listdir(os.path.join(source, "docs")) if f.endswith(".md"))
    if args.only:
        files = [f for f in files if f in args.only]
    blocks = [b for f in files for b in blocks_of(source, f) if b.language in LANGUAGES]
    problems, counts = [], {}
    for b in blocks:
        if b.marker is None:
            problems.append(f"{b.where()}: a {b.language} block without a marker (<!-- example: ... --> on the "
                            "line before its fence: run, server-config, model-config NAME, or not run: REASON)")
            continue
        kind, _, _ = parse_marker(b.marker)
        if kind not in ("run", "server-config", "model-config", "not run"):
            problems.append(f"{b.where()}: unknown marker '{b.marker}'")
        if kind == "not run" and not parse_marker(b.marker)[1]:
            problems.append(f"{b.where()}: 'not run' without a reason")
        counts[kind] = counts.get(kind, 0) + 1
    if args.list:
        for b in blocks:
            print(f"{b.where()} [{b.language}] {b.marker}")
        return 0
    if problems:
        print("\n".join(problems))
        print(f"check_doc_examples: {len(problems)} block(s) not marked right")
        return 1

    scratch = tempfile.mkdtemp(prefix="es_doc_examples.")
    server = None
    failed = 0
    try:
        runner = Runner(source, build, scratch)
        runner.lay_out()
        server = Server(runner.bin, os.path.join(scratch, "config", "demo.yaml"), os.path.join(scratch, "server.log"))
        ports = server.wait_listening()
        if ports is None or not ready(runner.bin, ports["grpc"]):
            print(f"check_doc_examples: the demo server did not get ready:\n{server.log_tail()}")
            return 1
        for b in blocks:
            kind, arg, options = parse_marker(b.marker)
            if kind == "not run":
                continue
            started = time.monotonic()
            log_offset = server.log_size()
            if kind == "run":
                error = runner.run_block(b, ports, options.get("expect"))
            elif kind == "server-config":
                error = runner.check_server_config(b, options)
            else:
                error = runner.check_model_config(b, arg, options)
            seconds = time.monotonic() - started
            if error:
                failed += 1
                print(f"FAILED {b.where()} ({kind}, {seconds:.1f} s): {error}")
                if kind == "run":
                    # A run block's failure is often the demo server's doing
                    # (a host restarted under it): say what the server logged.
                    print(f"--- the demo server's log meanwhile ---\n{server.log_since(log_offset)}")
            else:
                print(f"ok     {b.where()} ({kind}, {seconds:.1f} s)")
            if server.proc.poll() is not None:
                print(f"check_doc_examples: the demo server exited:\n{server.log_tail()}")
                return 1
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    ran = sum(n for k, n in counts.items() if k != "not run")
    print(f"check_doc_examples: {len(blocks)} blocks in {len(files)} files: {ran} run, "
          f"{counts.get('not run', 0)} not run (each says why), {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
