#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""divvyd restarts and serves on a full disk (issue #30, part 3).

A running divvyd on a full filesystem degrades: the hits that must be journaled answer
ERR unknown "store full", the rest is served, and it journals again once space is freed.
These tests stop it there (SIGTERM, and SIGKILL) and start it again on the SAME full
filesystem (a small tmpfs, mounted as root; whatever the stop freed is filled again): it must
start without a journal segment, keep every hit acknowledged before the stop, serve what
needs no journal (PEEK, denied hits, rules without a counter), answer "store full" to what
does, say so once in the log, and journal again without a restart once space is freed.
What truly cannot start there (a database to create, a lock.mdb to make) exits 1 with one
sentence, never a crash.

Run one test:  tests/integration/test_disk_full.py RestartFull.test_sigkill
"""

import os
import re
import shutil
import signal
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import faultlib  # noqa: E402
import harness  # noqa: E402
import test_durability as durability  # noqa: E402  (its helpers; its tests are not loaded)
from faultlib import report  # noqa: E402
from test_durability import LIMIT, hit  # noqa: E402

RULES = """
# Two hits per actor: the third is denied, and a denial journals nothing.
[path=/small user=*]
creditLimit = 2
resetSeconds = 86400
actorField = user

""" + durability.RULES

PEEK_RE = re.compile(r"^OK allowed=(true|false) credit=(\d+) ")
SMALL = ["--journal-segment-size", "256K"]  # segments an 8 MiB tmpfs holds
STORE_FULL = 'ERR unknown "store full"'
ROOM_LOG = "No room for the journal's first segment"


def rules_and_tmpfs(test):
    """A rules file and an 8 MiB tmpfs mounted for the test (skipped, loudly, if not root):
    returns (the rules file, the tmpfs)."""
    tmp = harness.make_tmpdir()
    test.addCleanup(shutil.rmtree, tmp, True)
    config = os.path.join(tmp, "rules.ini")
    with open(config, "w") as f:
        f.write(RULES)
    fs = os.path.join(tmp, "fs")
    os.mkdir(fs)
    faultlib.mount_tmpfs(test, fs)
    return config, fs


class RestartFull(durability._Counters, harness.DaemonTestCase):
    def _peek_all(self, d, hits, what):
        """PEEK (journals nothing) every counter of hits: each must show every hit acknowledged
        (credit at most LIMIT - 1 - hits, one taken by the PEEK's TAKE 1) and no more than were
        sent. Returns how many counters were read."""
        keys = sorted(hits)
        replies = []
        for start in range(0, len(keys), 2000):
            with d.connect("unix") as c:
                replies += c.pipeline(["PEEK path=/d user=" + k for k in keys[start:start + 2000]])
        self.assertEqual(len(replies), len(keys), what)
        bad = []
        for k, r in zip(keys, replies):
            lo, hi = hits[k] if isinstance(hits[k], tuple) else (hits[k], hits[k])
            m = PEEK_RE.match(r)
            # a counter never acknowledged (lo 0) may be absent: a fresh one shows LIMIT - 1
            if not m or m.group(1) != "true" or not LIMIT - 1 - hi <= int(m.group(2)) <= LIMIT - 1 - lo:
                bad.append("%s: %r, expected credit %d..%d" % (k, r, LIMIT - 1 - hi, LIMIT - 1 - lo))
        self.assertEqual(bad[:5], [], "%s: %d of %d counters wrong" % (what, len(bad), len(keys)))
        return len(keys)

    def _restart_full(self, sig):
        config, fs = rules_and_tmpfs(self)
        db = os.path.join(fs, "db")
        args = ["--map-size", "1M", "--map-size-max", "64M", "--sync", "always"] + SMALL + durability.FREQUENT
        d = self.start_daemon(config, listen=("unix",), db=db, args=args)
        hits = {}
        self._new_counters(d, "a", 3000, hits)
        for credit in (1, 0):
            self.assertHit(d.request("HIT path=/small user=s", "unix"), True, credit, 86400)

        # Full, running: new counters until one is refused (the journal has no next segment).
        faultlib.fill_filesystem(os.path.join(fs, "ballast"))
        refused, err = durability.Full._until_refused(self, d, ["g-%d" % i for i in range(200000)], hits)
        self.assertEqual(err, STORE_FULL)
        acked = sum(v for v in hits.values() if not isinstance(v, tuple))
        self.assertEqual(d.stop(sig), 0 if sig == signal.SIGTERM else -sig)

        # The same full filesystem: whatever the stop freed (the clean stop's checkpoint may
        # have released journal segments) is taken again.
        faultlib.fill_filesystem(os.path.join(fs, "ballast-2"))
        d2 = self.start_daemon(config, listen=("unix",), db=db, args=args)
        log = d2.log_text()
        self.assertEqual(log.count(ROOM_LOG), 1, d2.log_tail())
        # Every hit acknowledged before the stop is there, read without journaling.
        read = self._peek_all(d2, hits, "PEEK on the full disk after %s" % sig.name)
        # What needs no journal is served: a denied hit, a rule without a counter.
        self.assertHit(d2.request("HIT path=/small user=s", "unix"), False, 0, (86000, 86400))
        self.assertEqual(d2.request("HIT path=/open", "unix"), "OK true 5 0")
        # What must be journaled gets the documented error, on a known and on a new counter;
        # neither counts (checked by _expect below).
        self.assertEqual(d2.request(hit("a-1"), "unix"), STORE_FULL)
        self.assertEqual(d2.request(hit("new-while-full"), "unix"), STORE_FULL)
        hits.setdefault("new-while-full", 0)
        self.assertTrue(d2.running())
        # STATUS= says so; by its next refresh (5 s) the segment was retried a few times, and
        # the log still says it once.
        d2.wait_note(re.compile(r"^STATUS=Serving .* journal \d+ MiB \(disk full\), "), after=d2.last_seq(),
                     timeout=15, what="a STATUS= refresh saying the disk is full")
        self.assertEqual(d2.log_text().count(ROOM_LOG), 1, "logged once, not at each retry")

        # Space freed: journaled again, without a restart.
        os.unlink(os.path.join(fs, "ballast"))
        os.unlink(os.path.join(fs, "ballast-2"))
        faultlib.wait_for(lambda: harness.parse_ok(d2.request(hit("probe"), "unix")), 10,
                          "a hit journaled once space was freed")
        hits["probe"] = 1
        faultlib.wait_for(lambda: "The journal has room again" in d2.log_text(), 10,
                          "the log saying the journal has room again")
        self._expect(d2, hits, "after space was freed")
        # ... and what was journaled then survives a kill.
        self.assertEqual(d2.stop(signal.SIGKILL), -signal.SIGKILL)
        d3 = self.start_daemon(config, listen=("unix",), db=db, args=args)
        self._expect(d3, hits, "restart after the disk was full")
        self.assertEqual(d3.stop(), 0)
        report("disk-full-restart-" + sig.name.lower(),
               "8 MiB tmpfs full (%s): restarted after %s with no journal segment; %d counters "
               "(%d acknowledged hits) read back by PEEK, hits needing the journal answered "
               "\"store full\", journaled again once space was freed" % (err, sig.name, read, acked))

    def test_sigterm(self):
        self._restart_full(signal.SIGTERM)

    def test_sigkill(self):
        self._restart_full(signal.SIGKILL)


class CannotStart(harness.DaemonTestCase):
    """What truly cannot start on a full disk (a database to create) says so in one sentence
    and exits 1: never a crash (LMDB writes lock.mdb through a mapping: a SIGBUS where the
    filesystem has no page for it), never a claim that the database is damaged."""

    def _refused(self, config, db, what):
        d = self.new_daemon(config, listen=("unix",), db=db, args=SMALL)
        d.start(wait_ready=False)
        self.assertEqual(d.wait_exit(), 1, d.log_tail())
        errors = [l for l in d.log_text().splitlines() if l.startswith("<3>")]
        self.assertEqual(len(errors), 1, d.log_tail())
        self.assertRegex(errors[0], r"^<3>Failed to open store '%s': %s: the disk is full, no room for %s "
                         r"\(No space left on device\): free some space$" % (re.escape(db), re.escape(db), what))
        return errors[0]

    def test_new_database(self):
        config, fs = rules_and_tmpfs(self)
        faultlib.fill_filesystem(os.path.join(fs, "ballast"))
        db = os.path.join(fs, "db")
        sentence = self._refused(config, db, r"(lock|data)\.mdb")
        os.unlink(os.path.join(fs, "ballast"))
        d = self.start_daemon(config, listen=("unix",), db=db, args=SMALL)
        self.assertHit(d.request(hit("x"), "unix"), True, LIMIT - 1, 86400)
        report("disk-full-new-database", "refused in one sentence: " + sentence[3:])

    def test_lock_file_missing(self):
        # A copy of data.mdb without lock.mdb (a restored backup) on a full disk: the check
        # of the database, the first to open it, would make lock.mdb.
        config, fs = rules_and_tmpfs(self)
        db = os.path.join(fs, "db")
        d = self.start_daemon(config, listen=("unix",), db=db, args=SMALL)
        self.assertHit(d.request(hit("x"), "unix"), True, LIMIT - 1, 86400)
        self.assertEqual(d.stop(), 0)
        os.unlink(os.path.join(db, "lock.mdb"))
        faultlib.fill_filesystem(os.path.join(fs, "ballast"))
        self._refused(config, db, r"lock\.mdb")
        os.unlink(os.path.join(fs, "ballast"))
        d = self.start_daemon(config, listen=("unix",), db=db, args=SMALL)
        self.assertHit(d.request(hit("x"), "unix"), True, LIMIT - 2, (86000, 86400))


if __name__ == "__main__":
    harness.main()
