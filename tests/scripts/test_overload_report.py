#!/usr/bin/env python3
"""benchmarks/overload/report.py's verdicts against the overload targets, on
steps written as ensemble-loadgen writes them: a step that meets every
target passes; one that misses a single one (the accuracy by one answer,
the answered share, the p99) is a MISS; the reference rungs are read from
the ladder's config (the full ensemble, the cascade at its own threshold,
the last rung), and the expected accuracy weighs each rung's by its share;
the header names the depth the capacity was measured at, or says it was
the highest rate within the target (--capacity-at-target), and puts the
steps against the full ensemble's throughput at 128 in flight when the run
measured it; a probe of that search meets the target only with every
request answered and the p99 within it.
With a reference rung's pass over every test image, a step is judged on the
images it answered: one shed request does not make a miss of a step whose
answers are the rung's own, and an answer fewer right than the rung's on
those images does."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

REPORT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "benchmarks", "overload", "report.py")

LADDER = """platform: ensemble
ensemble:
  combine: mean
  members:
    - {model: m1}
    - {model: m2}
overload:
  latency_target_ms: 100
  dwell_ms: 1000
  ladder:
    - {model: ens_ladder, accuracy: 0.9357}
    - {model: fmnist_ensemble_cascade, exit_threshold: 0.99, accuracy: 0.9361}
    - {model: fmnist_ensemble_cascade, accuracy: 0.9355}
    - {model: convnet_8, accuracy: 0.9267}
"""


def step(by, p99_ms=10.0, refused=0, by_request=None):
    """A ladder step: `by` maps served_by to (answers, correct); `by_request`:
    (answers, correct) lists, one entry per test image."""
    answers = sum(n for n, _ in by.values())
    correct = sum(c for _, c in by.values())
    labels = {} if by_request is None else {"by_request": {"answers": by_request[0], "correct": by_request[1]}}
    return {"steps": [{
        "ok": answers, "failed": refused, "unanswered": 0, "errors": {"RESOURCE_EXHAUSTED": refused} if refused else {},
        "latency_us": {"p50": 1000.0, "p99": p99_ms * 1000},
        "labels": {"accuracy": correct / answers, "answers": answers, "correct": correct, "rows": answers,
                   "by_served_by": {r: {"answers": n, "correct": c, "rows": n, "accuracy": c / n}
                                    for r, (n, c) in by.items()}, **labels}}]}


class OverloadReportTest(unittest.TestCase):
    def setUp(self):
        self.out = tempfile.mkdtemp(prefix="es-overload-report-")
        os.makedirs(os.path.join(self.out, "repo", "ens_ladder"))
        with open(os.path.join(self.out, "repo", "ens_ladder", "config.yaml"), "w") as f:
            f.write(LADDER)
        self.write("idle", step({"ens_ladder": (10, 9)}))

    def tearDown(self):
        shutil.rmtree(self.out)

    def write(self, name, content):
        with open(os.path.join(self.out, name + ".json"), "w") as f:
            json.dump(content, f)

    def report(self):
        return subprocess.run([sys.executable, REPORT, self.out, "100", "1000", "trained"], check=True,
                              capture_output=True, text=True).stdout

    def verdicts(self):
        out = self.report()
        return {line.split(":")[0][2:]: line for line in out.splitlines() if line.startswith("- ") and "x: p99" in line}

    def test_steps_meeting_every_target_pass(self):
        self.write("ladder_0.5", step({"ens_ladder": (10000, 9357)}))
        self.write("ladder_2", step({"fmnist_ensemble_cascade@0.99": (10000, 9361)}, p99_ms=99.0))
        self.write("ladder_8", step({"convnet_8": (30000, 27801)}, p99_ms=119.0))
        lines = self.verdicts()
        self.assertEqual(sorted(lines), ["0.5x", "2x", "8x"])
        for load, line in lines.items():
            self.assertTrue(line.endswith("**PASS**"), line)
        self.assertIn("the cascade's, fmnist_ensemble_cascade: 93.55% on the test set; +6 answers of 10000", lines["2x"])
        self.assertIn("the best member's, convnet_8: 92.67%", lines["8x"])

    def test_each_target_missed_alone_is_a_miss(self):
        # 2x: two rungs that each score at least the cascade, one answer below it.
        self.write("ladder_2", step({"fmnist_ensemble_cascade": (6000, 5612), "fmnist_ensemble_cascade@0.99": (4000, 3742)}))
        self.write("ladder_8", step({"convnet_8": (30000, 27801)}, p99_ms=121.0))  # p99 over 1.2x the target
        self.write("ladder_0.5", step({"ens_ladder": (9990, 9347)}, refused=10))  # not every request answered
        lines = self.verdicts()
        for load in ("0.5x", "2x", "8x"):
            self.assertTrue(lines[load].endswith("**MISS**"), lines[load])
        self.assertIn("-1 answers of 10000", lines["2x"])
        # 0.6 x 93.55% + 0.4 x 93.61%: what those rungs score, weighted by their shares.
        self.assertIn("the rungs served score 93.57%", lines["2x"])

    def test_answered_at_2x_needs_99_9_percent(self):
        self.write("ladder_2", step({"fmnist_ensemble_cascade@0.99": (9980, 9342)}, refused=20))
        self.assertTrue(self.verdicts()["2x"].endswith("**MISS**"))
        self.write("ladder_2", step({"fmnist_ensemble_cascade@0.99": (9990, 9352)}, refused=10))
        self.assertTrue(self.verdicts()["2x"].endswith("**PASS**"))

    def test_a_step_is_judged_on_the_images_it_answered(self):
        # The best member alone over the 10,000 test images: the first 9,267 right (its 92.67%).
        images, right = 10000, 9267
        self.write("reference_convnet_8", step({"": (images, right)}, by_request=(
            [1] * images, [1] * right + [0] * (images - right))))
        # 8x: three passes, one request for image 0 (one the member answers right) shed.
        answers = [2] + [3] * (images - 1)
        correct = [2] + [3] * (right - 1) + [0] * (images - right)
        shed_one = step({"convnet_8": (3 * images - 1, 3 * right - 1)}, refused=1, by_request=(answers, correct))
        self.write("ladder_8", shed_one)
        line = self.verdicts()["8x"]
        self.assertTrue(line.endswith("**PASS**"), line)
        self.assertIn("+0 answers of 29999", line)
        self.assertIn("on the images answered; 92.67% on the test set", line)
        # The same step, one of its answers wrong where the member is right: a miss by one answer.
        worse = step({"convnet_8": (3 * images - 1, 3 * right - 2)}, refused=1,
                     by_request=(answers, [1] + correct[1:]))
        self.write("ladder_8", worse)
        line = self.verdicts()["8x"]
        self.assertTrue(line.endswith("**MISS**"), line)
        self.assertIn("-1 answers of 29999", line)
        # Without the reference pass the shed step is held to the test-set figure, which it misses.
        os.remove(os.path.join(self.out, "reference_convnet_8.json"))
        self.write("ladder_8", shed_one)
        line = self.verdicts()["8x"]
        self.assertTrue(line.endswith("**MISS**"), line)
        self.assertIn("92.67% on the test set;", line)

    def test_the_header_puts_the_steps_against_the_full_ensembles_deeper_throughput(self):
        self.assertNotIn("128 in flight", self.report())
        self.write("capacity_deep", {"steps": [{"throughput_rps": 2200.0}]})  # capacity: 1000
        self.assertIn("At 128 in flight, where its members batch more of what waits, it served 2200 requests/s "
                      "(2.2x): the steps are multiples of the capacity above, so 2x offers 0.91x and 4x 1.82x of "
                      "that deeper figure.", self.report())
        self.assertIn("(closed loop, 8 in flight)", self.report())
        self.write("capacity", {"steps": [{"throughput_rps": 1000.0, "concurrency": 32}]})
        self.assertIn("capacity 1000 requests/s (closed loop, 32 in flight)", self.report())

    def test_the_header_says_when_the_capacity_was_measured_at_the_target(self):
        self.write("capacity", {"steps": [{"throughput_rps": 800.0, "concurrency": 8}]})
        self.assertIn("(closed loop, 8 in flight)", self.report())
        with open(os.path.join(self.out, "at_target.txt"), "w") as f:
            f.write("800 requests/s offered: ...: within 100 ms\n1200 requests/s offered: ...: misses 100 ms\n")
        with open(os.path.join(self.out, "at_target_capacity.txt"), "w") as f:
            f.write("1000\n")
        self.assertIn("capacity 1000 requests/s (the highest Poisson rate at which it answered every request with a "
                      "p99 within the target, of 2 probes of 6 s; closed loop with 8 in flight it served 800)",
                      self.report())

    def test_the_header_says_when_the_capacity_was_given(self):
        self.write("capacity", {"steps": [{"throughput_rps": 800.0, "concurrency": 8}]})
        with open(os.path.join(self.out, "given_capacity.txt"), "w") as f:
            f.write("1000\n")
        self.assertIn("capacity 1000 requests/s (given with --capacity; closed loop with 8 in flight it served 800)",
                      self.report())

    def test_a_probe_at_the_target_needs_every_answer_and_the_p99_within(self):
        probe = os.path.join(os.path.dirname(REPORT), "at_target.py")

        def run(p99_ms, failed=0, unanswered=0, skipped=0, ok=4500):
            self.write("probe", {"steps": [{"rate": 1500.0, "ok": ok, "failed": failed, "unanswered": unanswered,
                                            "skipped": skipped, "latency_us": {"p99": p99_ms * 1000}}]})
            return subprocess.run([sys.executable, probe, "probe", os.path.join(self.out, "probe.json"), "100"],
                                  capture_output=True, text=True)

        within = run(99.0)
        self.assertEqual(within.returncode, 0, within.stdout + within.stderr)
        self.assertIn("1500 requests/s offered: 4500 answered, 0 not, p99 99.0 ms: within 100 ms", within.stdout)
        self.assertEqual(run(101.0).returncode, 1)
        self.assertEqual(run(50.0, failed=1).returncode, 1)
        self.assertEqual(run(50.0, unanswered=2).returncode, 1)
        self.assertEqual(run(50.0, skipped=3).returncode, 1)  # arrivals the client could not send
        self.assertEqual(run(50.0, ok=0).returncode, 1)

    def test_reference_models_are_the_rungs_of_the_table(self):
        out = subprocess.run([sys.executable, REPORT, "--reference-models", self.out], check=True,
                             capture_output=True, text=True).stdout
        self.assertEqual(out.split(), ["convnet_8", "ens_plain", "fmnist_ensemble_cascade"])


if __name__ == "__main__":
    unittest.main()
