#!/usr/bin/env python3
"""bench/atomic.py, the bench scripts' one way to write a file (ctest: bench_atomic, label
python; standard library only): the target appears whole with a written file's usual mode,
a writer that fails leaves the old target as it was and no temporary beside it."""
import json
import os
import stat
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench"))
import atomic  # noqa: E402


class Atomic(unittest.TestCase):
    def test_whole_or_nothing(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "out.json")
            atomic.save_json(path, {"a": 1})
            with open(path) as f:
                self.assertEqual(json.load(f), {"a": 1})
            umask = os.umask(0)
            os.umask(umask)
            self.assertEqual(stat.S_IMODE(os.stat(path).st_mode), 0o666 & ~umask)

            def half(f):
                f.write("{\"a\": ")
                raise RuntimeError("the writer stops half-way")
            with self.assertRaises(RuntimeError):
                atomic.replace_with(path, half)
            with open(path) as f:
                self.assertEqual(json.load(f), {"a": 1})  # the old file, untouched
            self.assertEqual(os.listdir(tmp), ["out.json"])  # no temporary left
            atomic.save_text(path, "x\n")
            with open(path) as f:
                self.assertEqual(f.read(), "x\n")
            atomic.replace_with(os.path.join(tmp, "b.bin"), lambda f: f.write(b"\x00\x01"), binary=True)
            with open(os.path.join(tmp, "b.bin"), "rb") as f:
                self.assertEqual(f.read(), b"\x00\x01")

    def test_a_missing_folder_is_an_error(self):
        with self.assertRaises(OSError):
            atomic.save_text("/nonexistent-folder-fmsim/x.txt", "x")


if __name__ == "__main__":
    unittest.main(verbosity=2)
