#!/usr/bin/env python3
"""scripts/lib/analysis_cache.py against a real ninja build (g++ writing the
dependency log): when a source's key stays, when it changes, when there is
none, and that a clone in another folder finds the same entries."""
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from project_files import write  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "lib"))
from analysis_cache import AnalysisCache  # noqa: E402

BUILD_NINJA = """rule cxx
  command = g++ -MD -MF $out.d -c $in -o $out
  depfile = $out.d
  deps = gcc
build main.o: cxx ../main.cc
"""


class AnalysisCacheTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="es-analysis-cache-")
        os.environ["ES_ANALYSIS_CACHE"] = os.path.join(self.tmp, "cache")
        self.root = self.make_project("project")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def make_project(self, name):
        root = os.path.join(self.tmp, name)
        write(os.path.join(root, "main.cc"), '#include "used.h"\nint main() { return kValue; }\n')
        write(os.path.join(root, "used.h"), "constexpr int kValue = 0;\n")
        write(os.path.join(root, "unused.h"), "// included by nothing\n")
        write(os.path.join(root, "build", "build.ninja"), BUILD_NINJA)
        self.build(root)
        return root

    def build(self, root):
        subprocess.run(["ninja", "-C", os.path.join(root, "build")], check=True, capture_output=True)

    def key(self, root, identity="checker 1", obj="main.o"):
        build = os.path.join(root, "build")
        cache = AnalysisCache("test", identity, build, root)
        return cache, cache.key(obj, ["clang++", "-fsyntax-only", os.path.join(root, "main.cc")], build)

    def edit(self, relative, text):
        write(os.path.join(self.root, relative), text)

    def test_a_stored_result_is_found_while_nothing_read_changes(self):
        cache, key = self.key(self.root)
        self.assertIsNotNone(key)
        self.assertIsNone(cache.get(key))
        cache.put(key, "clean")
        again, same = self.key(self.root)
        self.assertEqual(same, key)
        self.assertEqual(again.get(same), "clean")
        self.assertEqual(again.hits, 1)

    def test_a_header_the_source_reads_changes_the_key_one_it_does_not_read_does_not(self):
        _, key = self.key(self.root)
        self.edit("unused.h", "// still included by nothing, but edited\n")
        self.assertEqual(self.key(self.root)[1], key)
        self.edit("used.h", "constexpr int kValue = 1;\n")
        self.build(self.root)
        changed = self.key(self.root)[1]
        self.assertIsNotNone(changed)
        self.assertNotEqual(changed, key)

    def test_no_key_for_a_file_edited_since_the_build_or_an_object_never_built(self):
        self.edit("used.h", '#include "unused.h"\nconstexpr int kValue = 2;\n')  # a new include, not yet built
        self.assertIsNone(self.key(self.root)[1])
        self.assertIsNone(self.key(self.root, obj="other.o")[1])

    def test_another_checker_has_other_keys(self):
        self.assertNotEqual(self.key(self.root)[1], self.key(self.root, identity="checker 2")[1])

    def test_a_clone_in_another_folder_finds_the_same_entries(self):
        cache, key = self.key(self.root)
        cache.put(key, "clean")
        clone = self.make_project("clone")
        other, clone_key = self.key(clone)
        self.assertEqual(clone_key, key)
        self.assertEqual(other.get(clone_key), "clean")


if __name__ == "__main__":
    unittest.main()
