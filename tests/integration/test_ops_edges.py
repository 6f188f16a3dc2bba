#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""What operators touch, at the edges the other tests leave: each test here is the
regression test of a bug found by a bug hunt (see each test's comment), not a re-run of
test_lifecycle, test_metrics, test_admin, test_client or tests/cli.

- A configuration error quotes text of the file; a JSON string may hold a line break
  ("x\\nREADY=1"), an INI line an escape or a carriage return. The message must stay one
  line with no control bytes: it is one line of --check-config's output, one log line with
  its <N> prefix, and the value of STATUS= in an sd_notify datagram, where a line break
  would start another assignment (READY=1, STOPPING=1, MAINPID=...).
- A JSON operation key or value that no request can carry (a control byte, a '"',
  invalid UTF-8) made a rule that can never match, accepted without a word, where the
  same operation in an INI header is refused; and --dump-config then wrote it out as
  invalid JSON.
- STATUS= keeps a failed reload's first error in 512 bytes; the cut split a UTF-8
  character.
- The paths on the command line (the configuration, --db) went raw into STATUS= and into
  log lines: a line break in a path did what one in a configuration's text did.

Run one test:  tests/integration/test_ops_edges.py OpsEdges.test_reload_error_is_one_status_line
"""

import os
import re
import signal
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

GOOD_JSON = """\
{
  "overrides": [
    { "operation": { "path": "/kept" }, "creditLimit": 10, "resetSeconds": 3600 }
  ],
  "default": { "creditLimit": 0, "resetSeconds": 0 }
}
"""

# An unknown top-level key whose name holds line breaks: each part after one looks like an
# sd_notify assignment. OPS_INJECTED is harmless if it leaks; READY=1 would not be.
HOSTILE_JSON = GOOD_JSON.replace('"default"', '"x\\nOPS_INJECTED=1\\nREADY=1": 1,\n  "default"')

CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def write(path, text, mode="w"):
    with open(path + ".tmp", mode) as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def check_config(path):
    p = subprocess.run([harness.divvyd_path(), "--check-config", path], capture_output=True,
                       timeout=harness.IO_TIMEOUT)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


class OpsEdges(harness.DaemonTestCase):
    def tmp(self):
        d = harness.make_tmpdir()
        self.addCleanup(harness.shutil.rmtree, d, True)
        return d

    # Bug: diag messages quoted JSON keys and INI text raw, so a line break in the file
    # split the message: extra lines in --check-config's output, a log line without its
    # priority prefix, and an assignment of the file's choosing in the STATUS= datagram.
    def test_check_config_errors_are_one_line_each(self):
        tmp = self.tmp()
        cases = {
            "key.json": HOSTILE_JSON,
            "op.json": GOOD_JSON.replace('"path": "/kept"', '"a\\nb": null'),
            "twice.json": GOOD_JSON.replace('"path": "/kept"', '"a\\rb": "1", "a\\rb": "2"'),
            "outside.ini": "junk\x1b[31mred\r\n[default]\ncreditLimit = 0\nresetSeconds = 0\n",
            "header.ini": "[path=/a\x1b]\ncreditLimit = 1\nresetSeconds = 1\n"
                          "[default]\ncreditLimit = 0\nresetSeconds = 0\n",
            "cr.ini": "[path=/a\rX]\ncreditLimit = 1\nresetSeconds = 1\n"
                      "[default]\ncreditLimit = 0\nresetSeconds = 0\n",
        }
        for name, text in cases.items():
            with self.subTest(name):
                path = os.path.join(tmp, name)
                write(path, text.encode("utf-8"), "wb")
                rc, out, err = check_config(path)
                self.assertEqual((rc, out), (1, ""), err)
                lines = err.split("\n")
                self.assertEqual(lines[-1], "", repr(err))
                for line in lines[:-1]:
                    self.assertTrue(line.startswith(path + ":"), repr(err))
                    self.assertIsNone(CONTROL.search(line), repr(err))

    # Bug: the JSON reader took any string as an operation key or value; INI refuses them.
    def test_json_operation_a_request_cannot_carry(self):
        tmp = self.tmp()
        cases = {
            "line break in value": ('"path": "/a\\nb"', "control"),
            "quote in value": ('"path": "/a\\"b"', "'\"'"),
            "control in key": ('"pa\\u0001th": "/a"', "control"),
            "invalid UTF-8": ('"path": "/a\xff"', "UTF-8"),
        }
        for name, (op, why) in cases.items():
            with self.subTest(name):
                path = os.path.join(tmp, "rules.json")
                write(path, GOOD_JSON.replace('"path": "/kept"', op).encode("latin-1"), "wb")
                rc, out, err = check_config(path)
                self.assertEqual((rc, out), (1, ""), err)
                self.assertRegex(err, r"^%s:3: overrides\[0\]: operation: .*%s" % (re.escape(path),
                                                                                 re.escape(why)))
        # What a request can carry stays accepted: spaces, '=', tabs and UTF-8, quoted on the wire.
        path = os.path.join(tmp, "ok.json")
        write(path, GOOD_JSON.replace('"path": "/kept"', '"path": "/a b=c\\t\u00e9", "q w": "1"'))
        self.assertEqual(check_config(path)[0], 0)

    def test_reload_error_is_one_status_line(self):
        d = self.new_daemon(None)
        d.config = os.path.join(d.tmpdir, "rules.json")
        write(d.config, GOOD_JSON)
        d.start()
        self.assertHit(d.request("HIT path=/kept"), True, 9, 3600)
        write(d.config, HOSTILE_JSON)
        before = d.last_seq()
        d.signal(signal.SIGHUP)
        seq, status = d.wait_note(re.compile(r"^STATUS=Reload failed"), after=before,
                                  what="STATUS=Reload failed")
        # READY=1 follows the reload; wait for it, then look at every line since the signal.
        d.wait_note("READY=1", after=before)
        notes = [l for s, l in d.notes if s > before]
        self.assertFalse([l for l in notes if l.startswith("OPS_INJECTED")], notes)
        self.assertEqual([l for l in notes if l == "READY=1"], ["READY=1"], notes)
        self.assertIn("unknown key", status)
        self.assertHit(d.request("HIT path=/kept"), True, 8, self.since_start(3600))
        self.assertEqual(d.stop(), 0)
        bad = [l for l in d.log_text().splitlines() if not re.match(r"^<[0-7]>", l)]
        self.assertEqual(bad, [], "log lines without a <N> priority prefix")

    # Bug: the first error of a failed reload was kept for STATUS= in 512 bytes by snprintf(),
    # which could cut a UTF-8 character in two: the datagram's text ended in half a character.
    def test_reload_error_cut_at_a_character(self):
        tmp = self.tmp()
        # A path of more than 512 bytes, mostly two-byte characters, padded with ASCII so that
        # byte 510 (the last one a 511-byte cut keeps) starts a character: the cut splits it.
        for pad in ("", "x"):
            deep = os.path.join(tmp, pad + "\u00e9" * 120, "\u00e9" * 120, "\u00e9" * 120)
            if len(deep.encode()) > 520 and deep.encode()[510] == 0xC3:
                break
        else:
            self.fail("no padding puts a lead byte at 510")
        os.makedirs(deep)
        d = self.new_daemon(None)
        d.config = os.path.join(deep, "rules.json")
        write(d.config, GOOD_JSON)
        d.start()
        write(d.config, GOOD_JSON.replace('"default"', '"unknown": 1,\n  "default"'))
        before = d.last_seq()
        d.signal(signal.SIGHUP)
        _, status = d.wait_note(re.compile(r"^STATUS=Reload failed"), after=before,
                                what="STATUS=Reload failed")
        self.assertNotIn("\ufffd", status)  # the harness decodes with errors="replace"
        kept = status[len("STATUS=Reload failed: "):-len("; serving previous rules")]
        self.assertTrue(d.config.startswith(kept), (kept, d.config))
        self.assertEqual(len(kept.encode()), 510)  # the split character left out whole
        self.assertEqual(d.stop(), 0)

    # Bug: "STATUS=Reloading <path>", "STATUS=Checking the database in <path>" and the log
    # lines "Loaded/Reloading/Reloaded <path>" quoted the paths given on the command line
    # raw. Every STATUS= and every log line now masks control bytes, whatever it quotes.
    def test_paths_with_line_breaks_stay_one_line(self):
        tmp = self.tmp()
        conf_dir = os.path.join(tmp, "conf\nOPS_INJECTED=1\nREADY=1")
        os.makedirs(conf_dir)
        d = self.new_daemon(None, db=os.path.join(tmp, "db\nOPS_DB_INJECTED=1"))
        d.config = os.path.join(conf_dir, "rules.json")
        write(d.config, GOOD_JSON)
        d.start()
        self.assertHit(d.request("HIT path=/kept"), True, 9, 3600)
        before = d.last_seq()
        d.signal(signal.SIGHUP)
        _, status = d.wait_note(re.compile(r"^STATUS=Reloading "), after=before,
                                what="STATUS=Reloading")
        self.assertIn("conf?OPS_INJECTED=1?READY=1", status)
        d.wait_note(re.compile(r"^STATUS=Serving "), after=before, what="STATUS=Serving")
        self.assertHit(d.request("HIT path=/kept"), True, 8, self.since_start(3600))
        self.assertEqual(d.stop(), 0)
        notes = [l for _, l in d.notes]
        self.assertFalse([l for l in notes if l.startswith("OPS_")], notes)
        self.assertEqual([l for l in notes if l == "READY=1"], ["READY=1", "READY=1"], notes)
        self.assertTrue([l for l in notes if l.startswith("STATUS=Checking the database in ")
                         and l.endswith("db?OPS_DB_INJECTED=1")], notes)
        log = d.log_text().splitlines()
        self.assertEqual([l for l in log if not re.match(r"^<[0-7]>", l)], [],
                         "log lines without a <N> priority prefix")
        self.assertTrue([l for l in log if "Reloaded " in l and "conf?OPS_INJECTED=1?READY=1" in l],
                        log)


if __name__ == "__main__":
    harness.main()
