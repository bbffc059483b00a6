"""What the Python checks of tests/integration share: their failure type,
`expect`, and starting and stopping a real ensemble-server they own.

start_server runs the server in a session of its own (so a hung one is
killed with everything it started) on free ports, and waits for its
"<kind> listening on ADDRESS" lines; stop_server sends SIGTERM and returns
the exit status.
"""
import os
import re
import select
import signal
import subprocess
import sys
import time

STARTUP_S = 120  # until the listening lines


class CheckFailed(Exception):
    pass


def expect(what, got, want):
    if got != want:
        raise CheckFailed(f"{what}: got {got!r}, want {want!r}")


def add_server_args(parser):
    """The flags every check takes: the binaries it runs and the grpcio stubs."""
    parser.add_argument("--server-bin", required=True)
    parser.add_argument("--make-demo", required=True)
    parser.add_argument("--stubs", required=True, help="folder holding the generated `proto` package")


def start_server(server_bin, config, log_path, extra_args=(), kinds=("grpc",)):
    """Starts ensemble-server; returns (process, [address of each of `kinds`])."""
    log = open(log_path, "wb")
    proc = subprocess.Popen([server_bin, "--config", str(config), "--grpc-port", "0", "--http-port", "0",
                             "--metrics-port", "0", *extra_args],
                            stdout=subprocess.PIPE, stderr=log, start_new_session=True)
    # Raw reads of the pipe: a buffered readline() could take both lines at
    # once and leave select() waiting for a second that already came.
    fd, text, deadline = proc.stdout.fileno(), b"", time.monotonic() + STARTUP_S
    while text.count(b"\n") < len(kinds) and time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        chunk = os.read(fd, 4096) if ready else b""
        if not chunk:
            break
        text += chunk
    lines = text.decode(errors="replace").split("\n")
    addresses = []
    for index, kind in enumerate(kinds):  # the first lines of stdout, in this order
        line = lines[index] if index < len(lines) else ""
        match = re.fullmatch(kind + r" listening on (127\.0\.0\.1:\d+)", line.strip())
        if not match:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            raise CheckFailed(f"no '{kind} listening on' line within {STARTUP_S} s (stdout {text!r})")
        addresses.append(match.group(1))
    return proc, addresses


def stop_server(proc):
    """SIGTERM, then the exit status (SIGKILL of the group if it hangs)."""
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise CheckFailed("ensemble-server still running 15 s after SIGTERM")


def kill_server(proc):
    """The group, at once: for a check that failed with its server running."""
    if proc is not None and proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def make_demo(make_demo_bin, repo, *args):
    """Writes the demo repository into `repo` (ensemble-make-demo)."""
    made = subprocess.run([make_demo_bin, "--out", str(repo), *args], capture_output=True, text=True)
    if made.returncode != 0:
        raise CheckFailed(f"ensemble-make-demo exited {made.returncode}: {made.stderr}")


def report_failure(failure, log_path, lines=40):
    """Prints the failure and the tail of the server's log; the exit status 1."""
    print(f"FAIL: {failure}", file=sys.stderr)
    print("---- server log (tail) ----", file=sys.stderr)
    print("\n".join(log_path.read_text(errors="replace").splitlines()[-lines:]), file=sys.stderr)
    return 1


def run_with_server(server_bin, work, setup, checks, extra_args=(), kinds=("grpc",), after_stop=None,
                    on_start=None):
    """The body of a check's main: `setup()` writes work/server.yaml and what
    it names; the server starts on it (`on_start(process)` is told);
    `checks(*addresses)` runs; SIGTERM must end it with status 0; then
    `after_stop()`. Returns the exit status (1 with the server's log tail on
    a failure)."""
    log_path = work / "server.log"
    log_path.touch()
    proc = None
    try:
        setup()
        proc, addresses = start_server(server_bin, work / "server.yaml", log_path, extra_args, kinds)
        print(f"server at {' / '.join(addresses)} (pid {proc.pid})")
        if on_start is not None:
            on_start(proc)
        checks(*addresses)
        rc = stop_server(proc)
        proc = None
        expect("ensemble-server exit status after SIGTERM", rc, 0)
        if after_stop is not None:
            after_stop()
    except (CheckFailed, AssertionError) as failure:
        return report_failure(failure, log_path)
    finally:
        kill_server(proc)
    return 0
