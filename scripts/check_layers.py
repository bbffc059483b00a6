#!/usr/bin/env python3
"""Checks that every #include "..." in the project points the allowed way.

The rules are in one place, below: each folder (a CMake library) names the
folders it may include. Inside server/, the rooms are layered; a room may
include its own files, the rooms of lower layers, and the leaves of the
project (common/, config/, ipc/, proto/), never a room of its own layer or of
a higher one. tests/ and benchmarks/ may include anything.

Usage: scripts/check_layers.py [--root DIR] [--self-test]   (exit 1 and a list on violations)
docs/architecture.md draws the same map.
"""
import argparse
import os
import re
import sys

# Top-level folders and what they may include (besides themselves).
TOP_LEVEL = {
    "common": [],
    "proto": [],
    "config": ["common"],
    "ipc": ["common"],
    "torch_utils": ["common"],
    "model_host": ["common", "config", "ipc", "torch_utils"],
    "training": ["common", "config", "torch_utils"],
    "server": ["common", "config", "ipc", "proto"],
    "clients": ["common", "proto"],
}

# server/'s rooms, highest layer first; a room may include the rooms of the
# layers below its own. "" is server/ itself (router, server_main, port_check).
SERVER_LAYERS = [
    [""],
    ["grpc", "http"],
    ["kserve"],
    ["ensemble", "repository", "experiment", "tracing"],
    ["core"],
    ["hosts"],
    ["shm", "metrics", "security"],
]

# Folders whose includes are not checked (they test or measure everything).
UNCHECKED = {"tests", "benchmarks", "docker", "docs", "packaging", "scripts", "cmake"}

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def server_room(path):
    """'server/core/x.h' -> 'core'; 'server/router.h' -> ''."""
    parts = path.split("/")
    return parts[1] if len(parts) > 2 else ""


def server_layer(room):
    for i, rooms in enumerate(SERVER_LAYERS):
        if room in rooms:
            return i
    return None


def violation(source, target):
    """Why `source` may not include `target`, or None when it may."""
    src_top, dst_top = source.split("/")[0], target.split("/")[0]
    if src_top in UNCHECKED or src_top not in TOP_LEVEL:
        return None
    if dst_top not in TOP_LEVEL:
        return None  # not a project folder: a generated or system header
    if src_top != dst_top:
        if dst_top in TOP_LEVEL[src_top]:
            return None
        return f"{src_top}/ may not include {dst_top}/ (allowed: {', '.join(TOP_LEVEL[src_top]) or 'nothing'})"
    if src_top == "server":
        a, b = server_room(source), server_room(target)
        if a == b:
            return None
        la, lb = server_layer(a), server_layer(b)
        if la is None or lb is None:
            return f"server room '{a if la is None else b}' has no layer in scripts/check_layers.py"
        if lb > la:
            return None
        what = "its own layer" if la == lb else "a higher layer"
        return f"server/{a or '.'} may not include server/{b}/ ({what})"
    return None


def self_test():
    """The rules reject known wrong-way includes and allow the right ones."""
    wrong = [
        ("server/http/http_routes.h", "server/grpc/grpc_service.h"),
        ("server/core/inference_core.cc", "server/ensemble/ensemble_call.h"),
        ("server/hosts/host_connection.h", "server/core/infer_types.h"),
        ("server/kserve/infer_calls.h", "server/http/http_server.h"),
        ("server/router.cc", "model_host/launcher.h"),
        ("training/demo/make_demo_main.cc", "model_host/model_runner.h"),
        ("common/status.h", "config/model_config.h"),
        ("torch_utils/model_zoo.cc", "training/dataset.h"),
    ]
    right = [
        ("server/router.cc", "server/grpc/grpc_service.h"),
        ("server/http/http_routes.h", "server/kserve/kserve_answers.h"),
        ("server/ensemble/ensemble_runner.h", "server/core/composite_runner.h"),
        ("server/core/inference_core.h", "server/hosts/host_supervisor.h"),
        ("training/checkpoint.cc", "torch_utils/model_zoo.h"),
        ("tests/server/test_x.cc", "model_host/model_runner.h"),
        ("server/core/model_dispatcher.cc", "server/core/infer_types.h"),
    ]
    bad = [f"allowed: {s} -> {t}" for s, t in wrong if violation(s, t) is None]
    bad += [f"rejected: {s} -> {t}: {violation(s, t)}" for s, t in right if violation(s, t) is not None]
    for b in bad:
        print("self-test:", b)
    print(f"check_layers self-test: {len(wrong) + len(right)} cases, {len(bad)} wrong")
    return 1 if bad else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    parser.add_argument("--self-test", action="store_true", help="check the rules on known cases, then the tree")
    args = parser.parse_args()
    if args.self_test and self_test() != 0:
        return 1
    root = os.path.abspath(args.root)
    problems, files = [], 0
    for top in sorted(TOP_LEVEL):
        for dirpath, _, names in os.walk(os.path.join(root, top)):
            for name in sorted(names):
                if not name.endswith((".h", ".cc", ".cpp")):
                    continue
                path = os.path.relpath(os.path.join(dirpath, name), root)
                files += 1
                with open(os.path.join(root, path), encoding="utf-8") as f:
                    text = f.read()
                for target in INCLUDE.findall(text):
                    why = violation(path, target)
                    if why:
                        problems.append(f"{path}: includes {target}: {why}")
    for p in problems:
        print(p)
    print(f"check_layers: {files} files, {len(problems)} includes the wrong way")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
