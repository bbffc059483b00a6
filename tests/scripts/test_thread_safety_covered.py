#!/usr/bin/env python3
"""scripts/check_thread_safety.py --covered-by against a real ninja build with
clang++: a source counts as checked only while its object is up to date and
its command ran the checks as errors; an edited header, a changed command, a
command without the checks, an object never built are parsed by the script
again."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from project_files import write  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from check_thread_safety import covered_sources  # noqa: E402

CHECKS = "-Wthread-safety -Werror=thread-safety -Wshadow -Werror"


class CoveredSourcesTest(unittest.TestCase):
    def setUp(self):
        self.root = tempfile.mkdtemp(prefix="es-covered-")
        self.build = os.path.join(self.root, "build")
        write(os.path.join(self.root, "locked.h"), "constexpr int kLocked = 1;\n")
        for name in ("checked", "other", "unchecked", "never_built"):
            include = '#include "locked.h"\n' if name == "checked" else ""
            write(os.path.join(self.root, f"{name}.cc"), f"{include}int {name}() {{ return 0; }}\n")
        self.flags = {"checked": CHECKS, "other": CHECKS, "unchecked": "-Wall", "never_built": CHECKS}
        self.configure()
        subprocess.run(["ninja", "-C", self.build, "checked.o", "other.o", "unchecked.o"], check=True,
                       capture_output=True)

    def tearDown(self):
        shutil.rmtree(self.root)

    def command(self, name):
        return f"clang++ -I.. {self.flags[name]} -c ../{name}.cc -o {name}.o"

    def configure(self):
        """build.ninja and compile_commands.json, as CMake writes them, from self.flags."""
        ninja = "rule cxx\n  command = $cmd -MD -MF $out.d\n  depfile = $out.d\n  deps = gcc\n"
        entries = []
        for name in self.flags:
            ninja += f"build {name}.o: cxx ../{name}.cc\n  cmd = {self.command(name)}\n"
            entries.append({"directory": self.build, "command": self.command(name),
                            "file": os.path.join(self.root, f"{name}.cc"), "output": f"{name}.o"})
        write(os.path.join(self.build, "build.ninja"), ninja)
        write(os.path.join(self.build, "compile_commands.json"), json.dumps(entries))

    def covered(self):
        return covered_sources(self.build, self.root)

    def test_only_up_to_date_objects_compiled_with_the_checks_count(self):
        self.assertEqual(self.covered(), {"checked.cc", "other.cc"})

    def test_an_edited_header_uncovers_the_sources_that_read_it_until_they_are_built_again(self):
        write(os.path.join(self.root, "locked.h"), "constexpr int kLocked = 2;\n")
        # The object as if built a while before the edit (no sleeping for a
        # coarse clock between the build and the edit).
        earlier = os.stat(os.path.join(self.root, "locked.h")).st_mtime - 5
        os.utime(os.path.join(self.build, "checked.o"), (earlier, earlier))
        self.assertEqual(self.covered(), {"other.cc"})
        subprocess.run(["ninja", "-C", self.build, "checked.o"], check=True, capture_output=True)
        self.assertEqual(self.covered(), {"checked.cc", "other.cc"})

    def test_a_changed_command_uncovers_its_source(self):
        self.flags["other"] = CHECKS + " -DSOMETHING_NEW"
        self.configure()
        self.assertEqual(self.covered(), {"checked.cc"})

    def test_a_build_without_compile_commands_is_refused(self):
        os.remove(os.path.join(self.build, "compile_commands.json"))
        with self.assertRaises(SystemExit) as refused:
            self.covered()
        self.assertIn("no compile_commands.json", str(refused.exception))


if __name__ == "__main__":
    unittest.main()
