#!/usr/bin/python3
"""The chaos soak (run it through benchmarks/run_chaos.sh).

Serves the demo repository, an echo model and (when build/bin has
ensemble-lying-host) an echo model on a lying host, loads them with
ensemble-loadgen (one soak per model, all at once) while a killer SIGKILLs
or SIGSTOPs (then SIGCONTs) a random host every few seconds and, once, makes
the lying host lie (SIGUSR1). Then it writes a markdown report and exits 1
when a figure that must be zero is not.

Definitions (also printed in the report):
  fault window   from the signal until the host serves again (ensemble_host_up
                 is 1 for a process that was not the one signalled), plus a
                 margin; windows apply to every model (an ensemble spans hosts).
  p99 outside    p99 of the successful calls that completed in 1-s loadgen
                 windows overlapping no fault window (merged histograms:
                 within 4.4%).
  start, end     router RSS and fds are read at the first quiet moment (no
                 fault, every host up) after the warm-up (a sixth of the run,
                 10 s to 60 s), and again at the end, under the same load, after
                 the last fault's host is back: the growth compares the two.
Only the standard library; no network traffic except to 127.0.0.1.
"""
import argparse
import datetime
import json
import math
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request

REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
NEEDED = ["ensemble-server", "ensemble-model-host", "ensemble-make-demo", "ensemble-loadgen"]
LIAR_BINARY = "ensemble-lying-host"
LOADS = [  # (model, concurrency): the ensemble over every host, and single models
    ("demo_ensemble", 4),
    ("mlp", 2),
    ("echo", 2),
]
LIAR_LOAD = ("liar_echo", 1)


def log(msg):
    print(f"[chaos {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--minutes", type=float, default=30.0)
    p.add_argument("--bin", default=os.path.join(REPO_ROOT, "build", "bin"))
    p.add_argument("--out", default=os.path.join(REPO_ROOT, "build", "benchmarks"))
    p.add_argument("--seed", type=int, default=None, help="the killer's seed (default: from the clock, printed)")
    p.add_argument("--gap-s", default="3:6", help="pause between faults, LO:HI seconds (default 3:6)")
    p.add_argument("--stop-s", default="1:2.5", help="a short SIGSTOP's length, LO:HI seconds, under the "
                   "heartbeat timeout (default 1:2.5); every other stop lasts --long-stop-s instead")
    p.add_argument("--long-stop-s", type=float, default=7.0,
                   help="a long SIGSTOP, past the heartbeat timeout: the router must restart the host (default 7)")
    p.add_argument("--heartbeat-ms", type=int, default=3000, help="the server's heartbeat_timeout_ms (default 3000)")
    p.add_argument("--timeout-ms", type=int, default=60000, help="each call's deadline (default 60000)")
    p.add_argument("--hung-ms", type=int, default=30000, help="a call slower than this is hung (default 30000)")
    p.add_argument("--margin-s", type=float, default=1.0, help="added to each fault window's end (default 1)")
    p.add_argument("--no-liar", action="store_true", help="leave the lying host out even if it is built")
    p.add_argument("--no-faults", action="store_true",
                   help="the same load without any fault: a control run for the resource figures")
    args = p.parse_args()
    if args.minutes <= 0:
        p.error("--minutes must be > 0")
    return args


def span(text):
    lo, hi = (float(x) for x in text.split(":"))
    return lo, hi


# ---- /proc and /metrics ----------------------------------------------------

def children(pid):
    out = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().split(b"\0")
    except OSError:
        return []


def start_time(pid):
    """The process's start time (clock ticks since boot), to tell a pid reused."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def host_pids(server_pid):
    """host name -> pid of the server's model-host children (their --host argument)."""
    hosts = {}
    for pid in children(server_pid):
        argv = cmdline(pid)
        for i, a in enumerate(argv[:-1]):
            if a == b"--host":
                hosts[argv[i + 1].decode()] = pid
    return hosts


def proc_status(pid):
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if v.strip().endswith("kB"):
                fields[k] = int(v.split()[0]) * 1024
    return fields


def fd_kinds(pid):
    """fd count by kind (socket, pipe, memfd, anon_inode:..., file)."""
    kinds = {}
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:"):
            kind = "socket"
        elif target.startswith("pipe:"):
            kind = "pipe"
        elif target.startswith("/memfd:"):
            kind = "memfd"
        elif target.startswith("anon_inode:"):
            kind = target
        else:
            kind = "file"
        kinds[kind] = kinds.get(kind, 0) + 1
    return kinds


def num_threads(pid):
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[17])


def memfd_mappings(pid):
    with open(f"/proc/{pid}/maps") as f:
        return sum(1 for line in f if "/memfd:" in line)


def snapshot(pid):
    """Router RSS and fds: the fd figure is the least of five reads 0.3 s
    apart (a /metrics scrape's socket may be open for a moment), the RSS
    figures are those of the read with the median VmRSS (RSS moves by
    hundreds of KiB from one moment to the next under load)."""
    best, reads = None, []
    for _ in range(5):
        kinds = fd_kinds(pid)
        if best is None or sum(kinds.values()) < sum(best.values()):
            best = kinds
        reads.append(proc_status(pid))
        time.sleep(0.3)
    st = sorted(reads, key=lambda r: r.get("VmRSS", 0))[len(reads) // 2]
    return {"rss": st.get("VmRSS", 0), "rss_anon": st.get("RssAnon", 0), "rss_file": st.get("RssFile", 0),
            "rss_shmem": st.get("RssShmem", 0), "fds": sum(best.values()), "fd_kinds": best,
            "memfd_maps": memfd_mappings(pid), "threads": num_threads(pid)}


def metrics(url):
    """{(name, host): value} of the ensemble_host_* families (three tries)."""
    for attempt in range(3):
        try:
            with urllib.request.urlopen(url, timeout=5) as r:
                text = r.read().decode()
            break
        except OSError:
            if attempt == 2:
                raise
            time.sleep(0.5)
    out = {}
    for line in text.splitlines():
        m = re.match(r'^(ensemble_host_\w+)\{([^}]*)\}\s+(\S+)', line)
        if not m:
            continue
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))
        out[(m.group(1), labels.get("host", ""))] = float(m.group(3))
    return out


def shm_entries():
    try:
        return set(os.listdir("/dev/shm"))
    except OSError:
        return set()


def held_paths():
    """Every /dev/shm path some live process holds open or mapped."""
    held = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    t = os.readlink(f"/proc/{pid}/fd/{fd}")
                    if t.startswith("/dev/shm/"):
                        held.add(os.path.basename(t))
                except OSError:
                    pass
            with open(f"/proc/{pid}/maps") as f:
                for line in f:
                    if "/dev/shm/" in line:
                        held.add(os.path.basename(line.split()[-1]))
        except OSError:
            pass
    return held


# ---- the run --------------------------------------------------------------

class Chaos:
    def __init__(self, args):
        self.args = args
        self.bin = os.path.abspath(args.bin)
        self.problems = []  # must-be-zero failures, as sentences
        self.faults = []    # {kind, host, pid, start, end, note}
        self.seed = args.seed if args.seed is not None else int(time.time())
        self.rng = random.Random(self.seed)
        self.stamp = datetime.datetime.utcnow().strftime("%Y%m%d-%H%M%S")
        self.out = os.path.abspath(args.out)
        self.work = os.path.join(self.out, f"chaos-{self.stamp}")
        self.server = None
        self.loadgens = []
        self.liar = not args.no_liar and os.access(os.path.join(self.bin, LIAR_BINARY), os.X_OK)
        self.rss_series = []  # (seconds since the load began, VmRSS, RssAnon), every 5 s
        self.sampling = threading.Event()

    def sample_rss(self):
        """Router RSS every 5 s, whatever the faults: shows a plateau or a leak."""
        while not self.sampling.wait(5.0):
            try:
                st = proc_status(self.server.pid)
            except OSError:
                return
            self.rss_series.append((time.time() - self.t0, st.get("VmRSS", 0), st.get("RssAnon", 0)))

    def check_binaries(self):
        missing = [b for b in NEEDED if not os.access(os.path.join(self.bin, b), os.X_OK)]
        if missing:
            sys.stderr.write(f"run_chaos.sh: missing in {self.bin}: {', '.join(missing)} "
                             "(build them: scripts/build.sh)\n")
            sys.exit(2)

    def make_repository(self):
        repo = os.path.join(self.work, "repo")
        subprocess.run([os.path.join(self.bin, "ensemble-make-demo"), "--out", repo, "--hosts", "cpu0,cpu1"],
                       check=True, stdout=subprocess.DEVNULL)
        echo = ["/usr/bin/python3", os.path.join(REPO_ROOT, "clients", "make_echo_model.py"), "--out", repo]
        subprocess.run(echo + ["--hosts", "cpu0,cpu1"], check=True, stdout=subprocess.DEVNULL)
        if self.liar:
            subprocess.run(echo + ["--name", "liar_echo", "--hosts", "liar"], check=True, stdout=subprocess.DEVNULL)
            # One of the lying host's lies is a request it drops without a
            # word. The router finds it lost once every request before it,
            # and itself, could have used up their execution limits (plus
            # 1 s). With the 60 s default that is past the calls' own 60 s
            # deadline, and liar_echo's one client waits on it: a 2 s limit
            # (an echo takes microseconds) finds it within seconds.
            with open(os.path.join(repo, "liar_echo", "config.yaml"), "a") as f:
                f.write("max_compute_ms: 2000\n")
        hosts = ["  - {name: cpu0, device: cpu, threads: 1, executors: 1}",
                 "  - {name: cpu1, device: cpu, threads: 1, executors: 1}"]
        if self.liar:
            hosts.append(f"  - {{name: liar, device: cpu, threads: 1, executors: 1, "
                         f"binary: {os.path.join(self.bin, LIAR_BINARY)}}}")
        config = os.path.join(self.work, "server.yaml")
        with open(config, "w") as f:
            f.write("# benchmarks/chaos/chaos.py: the chaos soak's server\n"
                    f"repository: {repo}\nlisten_address: 127.0.0.1\nlog_level: warn\nhosts:\n" + "\n".join(hosts) +
                    f"\nlimits:\n  heartbeat_timeout_ms: {self.args.heartbeat_ms}\n  drain_timeout_ms: 10000\n")
        return config

    def start_server(self, config):
        env = dict(os.environ, ES_LIE_MODE="on-signal", ES_LIE_COUNT="50")
        self.server_log = os.path.join(self.work, "server.log")
        self.server = subprocess.Popen(
            [os.path.join(self.bin, "ensemble-server"), "--config", config, "--grpc-port", "0", "--metrics-port", "0",
             "--http-port", "0"], stdout=open(self.server_log, "w"), stderr=subprocess.STDOUT, env=env)
        deadline = time.time() + 180
        grpc = metrics_addr = None
        while time.time() < deadline and (grpc is None or metrics_addr is None):
            if self.server.poll() is not None:
                raise RuntimeError(f"ensemble-server exited ({self.server.returncode}) while starting:\n" +
                                   open(self.server_log).read()[-3000:])
            text = open(self.server_log).read()
            m = re.search(r"^grpc listening on (\S+)", text, re.M)
            grpc = m.group(1) if m else None
            m = re.search(r"^metrics listening on (\S+)", text, re.M)
            metrics_addr = m.group(1) if m else None
            time.sleep(0.1)
        if grpc is None or metrics_addr is None:
            raise RuntimeError("ensemble-server did not print its addresses within 180 s")
        self.addr = grpc
        self.metrics_url = f"http://{metrics_addr}/metrics"
        self.hosts = ["cpu0", "cpu1"] + (["liar"] if self.liar else [])
        self.wait_all_up(120)
        log(f"server {self.server.pid} on {grpc}, metrics {self.metrics_url}, hosts {host_pids(self.server.pid)}")

    def host_up(self, host, not_pid=None):
        pid = host_pids(self.server.pid).get(host)
        if pid is None or pid == not_pid:
            return False
        try:
            return metrics(self.metrics_url).get(("ensemble_host_up", host)) == 1.0
        except OSError:
            return False

    def wait_up(self, host, not_pid=None, limit_s=90):
        deadline = time.time() + limit_s
        while time.time() < deadline:
            self.check_server_alive()
            if self.host_up(host, not_pid):
                return True
            time.sleep(0.1)
        return False

    def wait_all_up(self, limit_s):
        deadline = time.time() + limit_s
        while time.time() < deadline:
            self.check_server_alive()
            if all(self.host_up(h) for h in self.hosts):
                return True
            time.sleep(0.2)
        raise RuntimeError(f"hosts not all up within {limit_s} s: {host_pids(self.server.pid)}")

    def check_server_alive(self):
        if self.server.poll() is not None:
            raise RuntimeError(f"THE ROUTER DIED (exit {self.server.returncode}) during the soak; its log: "
                               f"{self.server_log}\n" + open(self.server_log).read()[-3000:])

    def start_loadgens(self, seconds):
        loads = LOADS + ([LIAR_LOAD] if self.liar else [])
        for model, conc in loads:
            out = os.path.join(self.work, f"loadgen-{model}.json")
            cmd = [os.path.join(self.bin, "ensemble-loadgen"), "--server", self.addr, "--model", model,
                   "--concurrency", str(conc), "--threads", "1", "--soak-s", f"{seconds:.1f}", "--duration-s", "1",
                   "--warmup-s", "0", "--timeout-ms", str(self.args.timeout_ms), "--hung-ms", str(self.args.hung_ms),
                   "--ceiling-model", "none", "--quiet", "--json", out]
            logf = open(os.path.join(self.work, f"loadgen-{model}.log"), "w")
            self.loadgens.append({"model": model, "concurrency": conc, "json": out, "cmd": cmd,
                                  "proc": subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT)})

    # -- faults --

    def sleep_until(self, t):
        while time.time() < t:
            self.check_server_alive()
            time.sleep(min(0.2, max(0.0, t - time.time())))

    def fault(self, kind, host):
        pid = host_pids(self.server.pid).get(host)
        if pid is None:
            return
        born = start_time(pid)
        restarts_before = metrics(self.metrics_url).get(("ensemble_host_restarts_total", host), 0)
        f = {"kind": kind, "host": host, "pid": pid, "start": time.time(), "note": ""}
        if kind == "SIGKILL":
            os.kill(pid, signal.SIGKILL)
            ok = self.wait_up(host, not_pid=pid)
        elif kind in ("SIGSTOP", "SIGSTOP-long"):
            long = kind == "SIGSTOP-long"
            f["kind"] = kind = "SIGSTOP"
            length = self.args.long_stop_s if long else self.rng.uniform(*span(self.args.stop_s))
            os.kill(pid, signal.SIGSTOP)
            self.sleep_until(f["start"] + length)
            # SIGCONT only the process we stopped: the router may have
            # killed it (hung) and its pid may be someone else's by now.
            if start_time(pid) == born:
                os.kill(pid, signal.SIGCONT)
            f["note"] = f"stopped {length:.1f} s"
            ok = self.wait_up(host)
            if start_time(pid) != born:
                f["note"] += ", restarted by the router (hung)"
        else:  # SIGUSR1: the lying host lies for its next ES_LIE_COUNT completions
            os.kill(pid, signal.SIGUSR1)
            deadline = time.time() + 20
            while time.time() < deadline and \
                    metrics(self.metrics_url).get(("ensemble_host_restarts_total", host), 0) == restarts_before:
                self.check_server_alive()
                time.sleep(0.1)
            ok = self.wait_up(host, not_pid=pid)
            f["note"] = "lies, then restarted by the router" if ok else "lies: no restart within 20 s"
        f["end"] = time.time()
        if not ok:
            self.problems.append(f"{kind} of host {host}: the host did not serve again within 90 s")
        log(f"{kind} {host} (pid {pid}) {f['note']}: {f['end'] - f['start']:.1f} s until it served again")
        self.faults.append(f)

    def run(self):
        a = self.args
        self.check_binaries()
        os.makedirs(self.work, exist_ok=True)
        log(f"work folder {self.work}; killer seed {self.seed}; lying host: {'yes' if self.liar else 'left out'}")
        config = self.make_repository()
        self.shm_before = shm_entries()
        self.start_server(config)
        total_s = a.minutes * 60
        self.warmup_s = min(60.0, max(10.0, total_s / 6))
        tail_s = 10.0  # no fault in the last seconds: the end snapshot sees every host up under load
        self.start_loadgens(total_s)
        t0 = time.time()
        self.t0 = t0
        self.start_snap = self.end_snap = None
        sampler = threading.Thread(target=self.sample_rss, daemon=True)
        sampler.start()
        time.sleep(3)  # the loadgens' check calls first
        for lg in self.loadgens:
            if lg["proc"].poll() is not None:
                raise RuntimeError(f"ensemble-loadgen for {lg['model']} exited {lg['proc'].returncode} at start: " +
                                   open(lg["json"].replace(".json", ".log")).read()[-2000:])
        # The lying host's burst: once, a quarter to 60% into the time in
        # which faults start (so that a one-minute run has it too).
        fault_span = max(1.0, total_s - tail_s - 18)
        liar_at = t0 + self.rng.uniform(0.25, 0.6) * fault_span if self.liar else None
        # The kinds in turn (hosts at random), so that a short run has each.
        kinds = ["SIGKILL", "SIGSTOP", "SIGKILL", "SIGSTOP-long"]
        turn = 0
        while True:
            gap = self.rng.uniform(*span(a.gap_s))
            now = time.time()
            if self.start_snap is None and now >= t0 + self.warmup_s:
                self.start_snap = snapshot(self.server.pid)
                self.start_snap["t"] = now - t0
                log(f"start snapshot at {now - t0:.0f} s: RSS {self.start_snap['rss'] / 2**20:.1f} MiB, "
                    f"{self.start_snap['fds']} fds")
            if now + gap + 12 > t0 + total_s - tail_s:
                break
            self.sleep_until(now + gap)
            if a.no_faults:
                continue
            if liar_at is not None and time.time() >= liar_at:
                liar_at = None
                self.fault("SIGUSR1", "liar")
            else:
                self.fault(kinds[turn % len(kinds)], self.rng.choice(self.hosts))
                turn += 1
        if self.start_snap is None:  # a run too short for its warm-up
            self.start_snap = snapshot(self.server.pid)
            self.start_snap["t"] = time.time() - t0
        self.wait_all_up(60)
        self.sleep_until(max(time.time() + 1, t0 + total_s - 3))
        self.end_snap = snapshot(self.server.pid)
        self.end_snap["t"] = time.time() - t0
        self.sampling.set()
        log(f"end snapshot at {self.end_snap['t']:.0f} s: RSS {self.end_snap['rss'] / 2**20:.1f} MiB, "
            f"{self.end_snap['fds']} fds")
        for lg in self.loadgens:
            try:
                lg["rc"] = lg["proc"].wait(timeout=a.hung_ms / 1000 + 60)
            except subprocess.TimeoutExpired:
                lg["proc"].kill()
                lg["rc"] = "killed (did not end)"
        self.final_metrics = metrics(self.metrics_url)
        self.hosts_at_end = host_pids(self.server.pid)
        # Shut down: SIGTERM, within the drain timeout plus a few seconds.
        t = time.time()
        self.server.send_signal(signal.SIGTERM)
        try:
            self.server_rc = self.server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.server.kill()
            self.server_rc = "killed: not down 20 s after SIGTERM"
        self.shutdown_s = time.time() - t
        time.sleep(0.5)
        self.left_hosts = [p for p in self.hosts_at_end.values() if start_time(p) is not None]
        self.shm_after = shm_entries()

    # -- the report --

    def report(self):
        a = self.args
        fault_spans = [(f["start"], f["end"] + a.margin_s) for f in self.faults]
        totals = {"sent": 0, "ok": 0, "failed": 0, "hung": 0, "unanswered": 0}
        codes = {}
        rows = []
        all_out, all_in = {}, {}
        covered_s = clean_s = 0.0
        for lg in self.loadgens:
            try:
                j = json.load(open(lg["json"]))
            except (OSError, ValueError) as e:
                self.problems.append(f"loadgen {lg['model']}: no JSON ({e}); exit {lg.get('rc')}")
                continue
            if lg.get("rc") != 0:
                self.problems.append(f"loadgen {lg['model']} exited {lg.get('rc')}: "
                                     + open(lg["json"].replace(".json", ".log")).read()[-500:].strip())
            t = j["totals"]
            sent = t["client_sent"]
            timeline = [w for s in j["steps"] for w in s["timeline"]]
            if not timeline or any(w["ok"] == 0 for w in timeline[-3:]):
                self.problems.append(f"loadgen {lg['model']}: no successful call in one of the run's last 3 s "
                                     "(the model does not serve again after the faults)")
            hung, unanswered = t["client_hung"], t["client_unanswered"]
            out_h, in_h = {}, {}
            for s in j["steps"]:
                for w in s["timeline"]:
                    lo, hi = w["start_unix_s"], w["start_unix_s"] + w["seconds"]
                    inside = any(lo < fe and hi > fs for fs, fe in fault_spans)
                    target = in_h if inside else out_h
                    for b, n in w["histogram"].items():
                        target[int(b)] = target.get(int(b), 0) + n
                    if lg is self.loadgens[0]:
                        covered_s += w["seconds"]
                        clean_s += 0 if inside else w["seconds"]
            for h, acc in ((out_h, all_out), (in_h, all_in)):
                for b, n in h.items():
                    acc[b] = acc.get(b, 0) + n
            rows.append((lg["model"], lg["concurrency"], sent, t["client_ok"], t["client_errors"], hung, unanswered,
                         percentile(out_h, 99), percentile(in_h, 99), sum(out_h.values())))
            totals["sent"] += sent
            totals["ok"] += t["client_ok"]
            totals["failed"] += t["client_failed"]
            totals["hung"] += hung
            totals["unanswered"] += unanswered
            for c, n in t["client_errors"].items():
                codes[c] = codes.get(c, 0) + n

        s0, s1 = self.start_snap, self.end_snap
        growth = (s1["rss"] - s0["rss"]) / s0["rss"] * 100 if s0["rss"] else 0.0
        fd_growth = s1["fds"] - s0["fds"]
        new_shm = sorted(self.shm_after - self.shm_before)
        leaked_shm = [e for e in new_shm if e in self.shm_after and e not in held_paths()]
        restarts = {h: int(self.final_metrics.get(("ensemble_host_restarts_total", h), 0)) for h in self.hosts}
        per_host = {h: {"SIGKILL": 0, "SIGSTOP": 0, "SIGUSR1": 0, "hung": 0} for h in self.hosts}
        for f in self.faults:
            per_host[f["host"]][f["kind"]] += 1
            per_host[f["host"]]["hung"] += "hung" in f["note"]

        checks = [
            ("calls hung (over %d ms)" % a.hung_ms, totals["hung"]),
            ("calls unanswered", totals["unanswered"]),
            ("router fds at end minus start", max(0, fd_growth)),
            ("memfd mappings at end minus start", max(0, s1["memfd_maps"] - s0["memfd_maps"])),
            ("/dev/shm entries left behind", len(leaked_shm)),
            ("host processes alive after the server exited", len(self.left_hosts)),
        ]
        for name, value in checks:
            if value:
                self.problems.append(f"{name}: {value} (must be 0)")
        if growth >= 5.0:
            self.problems.append(f"router RSS grew {growth:.1f}% (must be under 5%)")
        for h in self.hosts:
            expected = per_host[h]["SIGKILL"] + per_host[h]["hung"] + per_host[h]["SIGUSR1"]
            if restarts[h] < expected:
                self.problems.append(f"host {h}: {restarts[h]} restarts in /metrics, but {expected} faults ended "
                                     "its process")
        if self.liar and not a.no_faults and not any(f["kind"] == "SIGUSR1" for f in self.faults):
            self.problems.append("the lying host was never told to lie (SIGUSR1): the run is too short")
        if not self.faults and not a.no_faults:
            self.problems.append("no fault was injected: the run is too short (a minute at least)")
        if self.server_rc != 0:
            self.problems.append(f"the server's exit after SIGTERM: {self.server_rc} (want 0)")

        mib = lambda b: f"{b / 2**20:.1f} MiB"
        us = lambda v: "-" if v is None else f"{v / 1000:.1f} ms" if v >= 1000 else f"{v:.0f} us"
        L = []
        L.append(f"# Chaos soak, {datetime.datetime.utcnow().strftime('%Y-%m-%d %H:%M')} UTC\n")
        L.append(f"`benchmarks/run_chaos.sh {a.minutes:g}`: {a.minutes:g} min of load on {os.cpu_count()} CPUs; "
                 f"killer seed {self.seed}; lying host "
                 f"{'included' if self.liar else 'LEFT OUT (--no-liar, or ensemble-lying-host not built)'}. "
                 f"Faults every {a.gap_s} s (after the previous host served again): SIGKILL, or SIGSTOP for "
                 f"{a.stop_s} s or, every other stop, {a.long_stop_s:g} s (past the heartbeat timeout of "
                 f"{a.heartbeat_ms} ms: the router must restart the host), each on a random host"
                 f"{' (NOT IN THIS RUN: --no-faults, a control run)' if a.no_faults else ''}; "
                 f"calls with a {a.timeout_ms} ms deadline. Work folder: `{os.path.relpath(self.work, REPO_ROOT)}`.\n")
        L.append(f"**Result: {'PASS' if not self.problems else 'FAIL'}**\n")
        for p in self.problems:
            L.append(f"- FAIL: {p}")
        if self.problems:
            L.append("")
        L.append("## Calls\n")
        L.append("| model | conc | sent | OK | failed by code | hung | unanswered | p99 outside faults "
                 "| p99 in faults |")
        L.append("| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: |")
        for m, c, sent, ok, errs, hung, un, p_out, p_in, _ in rows:
            e = ", ".join(f"{k} {v}" for k, v in sorted(errs.items())) or "-"
            L.append(f"| {m} | {c} | {sent} | {ok} | {e} | {hung} | {un} | {us(p_out)} | {us(p_in)} |")
        e = ", ".join(f"{k} {v}" for k, v in sorted(codes.items())) or "-"
        L.append(f"| **all** | | {totals['sent']} | {totals['ok']} | {e} | {totals['hung']} | {totals['unanswered']} | "
                 f"{us(percentile(all_out, 99))} | {us(percentile(all_in, 99))} |\n")
        L.append(f"Outside fault windows: {clean_s:.0f} of {covered_s:.0f} s ({sum(all_out.values())} successful "
                 f"calls). A fault window runs from the signal until the host serves again, plus {a.margin_s:g} s; "
                 "it counts for every model. p99 from merged 1-s histograms (within 4.4%).\n")
        L.append("## Faults\n")
        kills = sum(1 for f in self.faults if f["kind"] == "SIGKILL")
        stops = sum(1 for f in self.faults if f["kind"] == "SIGSTOP")
        recov = sorted(f["end"] - f["start"] for f in self.faults if f["kind"] == "SIGKILL")
        L.append(f"{len(self.faults)} faults: {kills} SIGKILL, {stops} SIGSTOP, "
                 f"{sum(1 for f in self.faults if f['kind'] == 'SIGUSR1')} lying-host burst. "
                 + (f"SIGKILL to serving again: median {recov[len(recov) // 2]:.1f} s, max {recov[-1]:.1f} s.\n"
                    if recov else "\n"))
        L.append("| host | SIGKILL | SIGSTOP (router restarted it: hung) | lies | restarts (/metrics) |")
        L.append("| --- | ---: | ---: | ---: | ---: |")
        for h in self.hosts:
            p = per_host[h]
            L.append(f"| {h} | {p['SIGKILL']} | {p['SIGSTOP']} ({p['hung']}) | {p['SIGUSR1']} | {restarts[h]} |")
        L.append("\n<details><summary>every fault (seconds from the start of the load)</summary>\n")
        L.append("| start | end | signal | host | pid | note |")
        L.append("| ---: | ---: | --- | --- | ---: | --- |")
        for f in self.faults:
            L.append(f"| {f['start'] - self.t0:.1f} | {f['end'] - self.t0:.1f} | {f['kind']} | {f['host']} | "
                     f"{f['pid']} | {f['note']} |")
        L.append("\n</details>\n")
        L.append("## Router resources\n")
        L.append(f"Start: the first moment with no fault and every host up after a {self.warmup_s:.0f} s warm-up "
                 f"(at {s0['t']:.0f} s); end: at {s1['t']:.0f} s, under the same load, every host up, after the last "
                 "fault.\n")
        L.append("| | start | end | change |")
        L.append("| --- | ---: | ---: | ---: |")
        L.append(f"| RSS | {mib(s0['rss'])} | {mib(s1['rss'])} | {growth:+.1f}% |")
        for k, name in (("rss_anon", "anonymous"), ("rss_file", "file"), ("rss_shmem", "shared memory")):
            L.append(f"| RSS {name} | {mib(s0[k])} | {mib(s1[k])} | {mib(s1[k] - s0[k])} |")
        kinds = sorted(set(s0["fd_kinds"]) | set(s1["fd_kinds"]))
        L.append(f"| fds | {s0['fds']} | {s1['fds']} | {fd_growth:+d} |")
        for k in kinds:
            L.append(f"| fds: {k} | {s0['fd_kinds'].get(k, 0)} | {s1['fd_kinds'].get(k, 0)} | "
                     f"{s1['fd_kinds'].get(k, 0) - s0['fd_kinds'].get(k, 0):+d} |")
        maps0, maps1 = s0["memfd_maps"], s1["memfd_maps"]
        L.append(f"| memfd mappings | {maps0} | {maps1} | {maps1 - maps0:+d} |")
        L.append(f"| threads | {s0['threads']} | {s1['threads']} | {s1['threads'] - s0['threads']:+d} |\n")
        if self.rss_series:
            last = len(self.rss_series) - 1
            picks = sorted({min(last, round(i * last / 10)) for i in range(11)})
            L.append("Router RSS over the run (sampled every 5 s, faults or not): " + ", ".join(
                f"{self.rss_series[i][0]:.0f} s {mib(self.rss_series[i][1])} (anon {mib(self.rss_series[i][2])})"
                for i in picks) + ".\n")
        L.append(f"/dev/shm: {len(self.shm_before)} entries before, {len(self.shm_after)} after the server exited; "
                 f"new: {', '.join(new_shm) or 'none'}; left behind (held by no process): "
                 f"{', '.join(leaked_shm) or 'none'}.  ")
        L.append(f"Shutdown: SIGTERM to exit in {self.shutdown_s:.1f} s, exit code {self.server_rc}; host processes "
                 f"alive afterwards: {len(self.left_hosts)}.\n")
        return "\n".join(L) + "\n"


def percentile(hist, p):
    """The p-th percentile (nearest rank) of a histogram: its bucket's upper bound, us."""
    n = sum(hist.values())
    if n == 0:
        return None
    rank = max(1, math.ceil(p / 100 * n - 1e-9))
    seen = 0
    for b in sorted(hist):
        seen += hist[b]
        if seen >= rank:
            return 2 ** ((b + 1) / 16)
    return None


def main():
    args = parse_args()
    chaos = Chaos(args)
    try:
        chaos.run()
    except (RuntimeError, subprocess.CalledProcessError, OSError) as e:
        log(f"FAIL: {e}")
        for lg in chaos.loadgens:
            if lg["proc"].poll() is None:
                lg["proc"].terminate()
        if chaos.server is not None and chaos.server.poll() is None:
            chaos.server.send_signal(signal.SIGTERM)
            try:
                chaos.server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                chaos.server.kill()
        return 1
    text = chaos.report()
    path = os.path.join(chaos.out, f"chaos-{chaos.stamp}.md")
    with open(path, "w") as f:
        f.write(text)
    print(text)
    log(f"report written to {path}")
    return 1 if chaos.problems else 0


if __name__ == "__main__":
    sys.exit(main())
