#!/usr/bin/env python3
"""Checks that every ctest test's kind label matches its folder.

The suite's rule (tests/CMakeLists.txt): a test is `unit` (in process,
seconds) or `integration` (starts real processes), and its folder says the
same: tests in a folder named integration/ (tests/integration/, or a
component's own integration/ subfolder) are integration tests, all others
unit tests. Each test must carry exactly one of the two labels, the one its
folder implies. The folder of a test is the build folder ctest runs it in
(its WORKING_DIRECTORY), which mirrors the source folder that registered it.

Usage: scripts/check_test_kinds.py BUILD_DIR [--self-test]
(exit 1 and a list of the tests that break the rule; reads the test list with
`ctest --show-only=json-v1`, which lists GoogleTest cases found at test time
too).
"""
import argparse
import json
import os
import subprocess
import sys

KINDS = ("unit", "integration")


def folder_kind(folder):
    """'tests/training/integration' -> 'integration'; 'tests/training' -> 'unit'."""
    return "integration" if "integration" in folder.split("/") else "unit"


def problem(name, folder, labels):
    """Why test `name` in `folder` (relative to the build folder) with these
    labels breaks the rule, or None."""
    kinds = [k for k in KINDS if k in labels]
    expected = folder_kind(folder)
    if kinds == [expected]:
        return None
    said = " and ".join(kinds) if kinds else "neither unit nor integration"
    return f"{name} ({folder}): labelled {said}, but its folder makes it {expected}"


def self_test():
    assert folder_kind("tests/integration") == "integration"
    assert folder_kind("tests/integration/metrics") == "integration"
    assert folder_kind("tests/server/hosts/integration") == "integration"
    assert folder_kind("tests/server/hosts") == "unit"
    assert folder_kind("tests/integrations") == "unit"
    assert problem("a", "tests/training", ["training", "unit"]) is None
    assert problem("a", "tests/training", ["training", "integration"]) is not None
    assert problem("a", "tests/training/integration", ["unit"]) is not None
    assert problem("a", "tests/x", ["unit", "integration"]) is not None
    assert problem("a", "tests/x", ["x"]) is not None


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("build_dir")
    parser.add_argument("--self-test", action="store_true", help="check the rule on known cases first")
    args = parser.parse_args()
    if args.self_test:
        self_test()
    build = os.path.abspath(args.build_dir)
    listed = subprocess.run(["ctest", "--show-only=json-v1"], cwd=build, capture_output=True, text=True)
    if listed.returncode != 0:
        print(f"ctest --show-only failed in {build}:\n{listed.stderr}", file=sys.stderr)
        return 2
    tests = json.loads(listed.stdout)["tests"]
    if not tests:
        print(f"no tests registered in {build}: is it a configured build folder?", file=sys.stderr)
        return 2
    problems = []
    for test in tests:
        props = {p["name"]: p["value"] for p in test.get("properties", [])}
        folder = os.path.relpath(props.get("WORKING_DIRECTORY", build), build)
        why = problem(test["name"], folder, props.get("LABELS", []))
        if why:
            problems.append(why)
    for why in problems:
        print(why)
    print(f"{len(tests)} tests checked, {len(problems)} in a folder of the other kind")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
