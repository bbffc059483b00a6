#!/usr/bin/env python3
"""scripts/check_thread_safety.py's precompiled headers, with clang++: a
source parsed with one still fails on what the checks find and passes when
clean; a header that clang refuses for the source (made with other flags)
or that fails to build only costs time: the plain parse decides; a group too
small for a header gets none."""
import os
import shutil
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from project_files import write  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from check_thread_safety import PCH_MIN_SOURCES, PrecompiledHeaders, parse_source, pch_key  # noqa: E402

# The stand-in for LibTorch's umbrella header: it declares what the sources
# use. `only_in_header.cc` uses it without including it, so that it parses
# only with the precompiled header: the proof that the header was used.
HEAVY = """#pragma once
#include <map>
#include <string>
struct __attribute__((capability("mutex"))) Mu {
  void Lock() __attribute__((acquire_capability()));
  void Unlock() __attribute__((release_capability()));
};
inline std::map<std::string, int> Table() { return {{"a", 1}}; }
"""
SOURCES = {
    "clean.cc": '#include "heavy.h"\nint Clean() { return Table().at("a"); }\n',
    "racy.cc": '#include "heavy.h"\n'
               'struct Probe {\n  Mu mu;\n  int x __attribute__((guarded_by(mu))) = 0;\n'
               '  void Touch() { x = 1; }\n};\n',
    "only_in_header.cc": 'int Used() { return Table().at("a"); }\n',
}


class PrecompiledHeaderTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="es-tsa-pch-test-")
        write(os.path.join(self.root, "heavy.h"), HEAVY)
        for name, text in SOURCES.items():
            write(os.path.join(self.root, name), text)
        self.headers = []

    def tearDown(self):
        for h in self.headers:
            h.close()
        shutil.rmtree(self.root)

    def entry(self, name, flags="-O2"):
        """A compile_commands.json entry for `name`, as CMake writes one."""
        return {"directory": self.root, "file": os.path.join(self.root, name),
                "command": f"clang++ -I{self.root} {flags} -std=c++20 -o {name}.o -c {self.root}/{name}"}

    def header_for(self, entry, sources=PCH_MIN_SOURCES, headers=("heavy.h",)):
        made = PrecompiledHeaders({pch_key(entry): sources}, headers=list(headers))
        self.headers.append(made)
        return made.get(pch_key(entry))

    def test_the_header_is_used_and_the_checks_still_find_a_race(self):
        pch = self.header_for(self.entry("clean.cc"))
        self.assertTrue(pch and os.path.exists(pch))
        self.assertEqual(parse_source(self.entry("only_in_header.cc"), pch), (0, ""))
        self.assertNotEqual(parse_source(self.entry("only_in_header.cc"))[0], 0)  # without it: undeclared
        self.assertEqual(parse_source(self.entry("clean.cc"), pch), (0, ""))
        rc, messages = parse_source(self.entry("racy.cc"), pch)
        self.assertNotEqual(rc, 0)
        self.assertIn("-Wthread-safety", messages)

    def test_all_sources_of_a_command_line_share_one_header(self):
        self.assertEqual(pch_key(self.entry("clean.cc")), pch_key(self.entry("racy.cc")))
        self.assertNotEqual(pch_key(self.entry("clean.cc")), pch_key(self.entry("clean.cc", "-O0")))

    def test_a_header_clang_refuses_for_the_source_leaves_the_plain_parse_to_decide(self):
        pch = self.header_for(self.entry("clean.cc", "-O2"))  # __OPTIMIZE__ there, not in a -O0 parse
        self.assertEqual(parse_source(self.entry("clean.cc", "-O0"), pch), (0, ""))
        rc, messages = parse_source(self.entry("racy.cc", "-O0"), pch)
        self.assertNotEqual(rc, 0)
        self.assertIn("-Wthread-safety", messages)

    def test_a_header_that_fails_to_build_is_not_used(self):
        self.assertIsNone(self.header_for(self.entry("clean.cc"), headers=("missing.h",)))

    def test_a_group_too_small_gets_no_header(self):
        self.assertIsNone(self.header_for(self.entry("clean.cc"), sources=PCH_MIN_SOURCES - 1))


if __name__ == "__main__":
    unittest.main()
