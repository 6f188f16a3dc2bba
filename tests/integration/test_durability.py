#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""Durability of the version 2 store (issue #14): nothing acknowledged is ever lost.

The store answers from memory, journals every batch in mmap'd wal-*.divvyd segments and
checkpoints them into LMDB (data.mdb) in a thread, after which the covered segments are
deleted; start-up loads the checkpoint and replays the journal. These tests attack each part:

Kill (50 x --sync=always, 50 x --sync=periodic): several pipelining clients (TCP and Unix)
hit many counters; every acknowledged reply's credit is recorded; the daemon is SIGKILLed at
a random moment and restarted on the same --db, and one more HIT per counter must show every
acknowledged hit (credit <= the lowest acknowledged - 1) and no more hits than were sent.
Checkpoints run every second (the daemon's maintenance tick) on a 64K journal threshold;
every fifth round waits for the checkpoint thread and kills INSIDE a checkpoint, and every
fifth restart is killed DURING THE JOURNAL REPLAY (a sealed segment open, before READY=1),
then restarted again. Every kill is a SIGSTOP first, so that /proc shows the state the
process was frozen in (a checkpoint thread alive, a segment being replayed), then SIGKILL:
the counts of kills that landed mid-checkpoint and mid-replay come from that, not from timing.
Also 10 kills with --sync=none (the mapping is shared: a process crash loses nothing), and
SIGTERMs that land inside a checkpoint (exit 0, nothing lost).

Full: the LMDB map cap reached by a checkpoint (hits answered from memory, the failure in the
log, STATUS and divvyd_checkpoint_failures_total, retried; a larger cap lets it through and a
restart keeps every counter); a full filesystem (a tmpfs the test mounts as root): the journal
cannot get a new segment, hits answer ERR and are not counted, the checkpoint fails and is
reported, and once space is freed hits and checkpoints work again with nothing lost; and a
tmpfs with room for the journal but not for data.mdb: LMDB's write fails, hits go on.

Restart: counters survive a clean SIGTERM restart from the journal alone (no checkpoint ever
ran), and after a checkpoint released the journal (fewer wal-* files), from LMDB.

JournalDamage: one flipped bit in one record (the first, a middle, the last; of the last
segment and of an earlier one) after 2200 acknowledged --sync=always hits and a SIGKILL: the
restart replays every valid record after it, so exactly one acknowledged hit is lost (the
damaged record's), and the damage is in the log at error level, the metric and STATUS=.

Kill runs as a program of its own, test_durability_kill.py (the longest tests: make -j runs them
beside the rest). Run one test:  tests/integration/test_durability.py Kill.test_kill_sync_always
"""

import os
import random
import re
import shutil
import signal
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import faultlib  # noqa: E402
import harness  # noqa: E402
from faultlib import report  # noqa: E402

LIMIT = 1000000000  # nothing is ever denied: every acknowledged hit counts down by one

RULES = """\
# Counters that stay for a day and allow a billion hits: every hit is counted, none denied.
[path=/d user=*]
creditLimit = %d
resetSeconds = 86400
actorField = user

[path=/open]
creditLimit = 5
resetSeconds = 0

[default]
creditLimit = 0
resetSeconds = 0
""" % LIMIT

STORE_ERR = r'^ERR unknown "store (full|error: .*)"$'

WAL_RE = re.compile(r"^wal-([0-9a-f]{16})\.divvyd$")

# Checkpoints as often as the daemon can: its maintenance tick is 1 s, and any journal over
# 64K (about 1400 records) since the last checkpoint starts one.
FREQUENT = ["--checkpoint-interval", "1", "--checkpoint-journal-max", "64K"]
NEVER = ["--checkpoint-interval", "31536000", "--checkpoint-journal-max", "1G"]


def rules_file(test):
    tmp = harness.make_tmpdir()
    test.addCleanup(shutil.rmtree, tmp, True)
    path = os.path.join(tmp, "rules.ini")
    with open(path, "w") as f:
        f.write(RULES)
    return tmp, path


def hit(key):
    return "HIT path=/d user=" + key


def segments(db):
    """{seq: size} of the journal's segments in db (the prepared spare, *.new, excluded)."""
    out = {}
    for name in os.listdir(db):
        m = WAL_RE.match(name)
        if m:
            try:
                out[int(m.group(1), 16)] = os.path.getsize(os.path.join(db, name))
            except OSError:
                pass
    return out


def journal_bytes(db):
    return sum(segments(db).values())


def checkpoint_failures(port):
    """divvyd_checkpoint_failures_total, from the daemon's Prometheus endpoint."""
    return harness.prometheus_samples(harness.http_get(port)[2])["divvyd_checkpoint_failures_total"]


def ready_since_start(d):
    d.drain_notes(0)
    return any(line == "READY=1" and seq > d.start_seq for seq, line in d.notes)


class Ledger:
    """What the clients know of each counter: the lowest credit acknowledged (an OK reply
    received) and how many hits were sent at all (acknowledged or in flight)."""

    def __init__(self, keys):
        self.keys = list(keys)
        self.low = {}
        self.sent = dict.fromkeys(self.keys, 0)
        self.acked = 0

    def merge(self, load):
        for w in load.workers:
            for k, c in w.low.items():
                self.low[k] = min(self.low.get(k, c), c)
            for k, n in w.sent.items():
                self.sent[k] += n
            self.acked += w.acked

    def check(self, test, d, what):
        """One more HIT per counter (pipelined): every acknowledged hit still counted, never
        more than were sent. The probes are acknowledged hits too."""
        with d.connect("unix") as c:
            replies = c.pipeline([hit(k) for k in self.keys])
        test.assertEqual(len(replies), len(self.keys), what)
        lost = []
        for k, r in zip(self.keys, replies):
            ok = harness.parse_ok(r)
            test.assertTrue(ok and ok[0], "%s: %s: %r" % (what, k, r))
            credit = ok[1]
            if k in self.low and credit > self.low[k] - 1:
                lost.append("%s: credit %d after restart, %d was acknowledged before" %
                            (k, credit, self.low[k]))
            # hits counted before this probe <= hits sent
            test.assertGreaterEqual(credit, LIMIT - 1 - self.sent[k],
                                    "%s: %s counted more hits than were sent (%d): %r" %
                                    (what, k, self.sent[k], r))
            self.low[k] = credit
            self.sent[k] += 1
        test.assertEqual(lost[:5], [], "%s: acknowledged hits lost on %d of %d counters" %
                         (what, len(lost), len(self.keys)))


class Worker:
    """One pipelining client connection hitting random counters, chunk by chunk."""

    def __init__(self, load, index):
        self.load, self.index = load, index
        self.rng = random.Random(load.seed * 1000 + index)
        self.low, self.sent = {}, {}
        self.acked = 0
        self.error = None

    def run(self):
        load = self.load
        kind = "unix" if self.index % 2 == 0 else "tcp"
        try:
            with load.daemon.connect(kind) as c:
                while not load.stopping.is_set():
                    keys = [self.rng.choice(load.keys) for _ in range(load.chunk)]
                    for k in keys:
                        self.sent[k] = self.sent.get(k, 0) + 1
                    c.send("".join(hit(k) + "\n" for k in keys))
                    for k in keys:
                        r = c.readline()
                        if r is None:  # the daemon was killed
                            return
                        ok = harness.parse_ok(r)
                        if not ok or not ok[0]:
                            self.error = r
                            return
                        self.low[k] = min(self.low.get(k, ok[1]), ok[1])
                        self.acked += 1
                        load.acked_one()
        except OSError as e:
            if not load.killing.is_set():
                self.error = repr(e)
        finally:
            load.acked_one(0)


class Load:
    def __init__(self, daemon, keys, seed, conns=3, chunk=64):
        self.daemon, self.keys, self.seed, self.chunk = daemon, keys, seed, chunk
        self.workers = [Worker(self, i) for i in range(conns)]
        self.stopping = threading.Event()
        self.killing = threading.Event()
        self.lock = threading.Lock()
        self.acked = 0
        self.target = None
        self.reached = threading.Event()
        self.threads = []

    def acked_one(self, n=1):
        with self.lock:
            self.acked += n
            if self.target is not None and self.acked >= self.target:
                self.reached.set()
            if n == 0 and not any(t.is_alive() for t in self.threads if t is not threading.current_thread()):
                self.reached.set()  # every worker ended: nobody will reach the target

    def start(self, target=None):
        self.target = target
        self.threads = [threading.Thread(target=w.run, daemon=True) for w in self.workers]
        for t in self.threads:
            t.start()
        return self

    def stop(self):
        self.stopping.set()
        for t in self.threads:
            t.join(harness.IO_TIMEOUT)
            if t.is_alive():
                raise harness.HarnessError("a load client did not stop")

    def errors(self):
        return [w.error for w in self.workers if w.error]


@harness.run_by("test_durability_kill.py")
class Kill(harness.DaemonTestCase):
    ROUNDS = 50
    KEYS = 400

    def _freeze_kill(self, d, load, base):
        """SIGSTOP, look, SIGKILL. Returns True if a checkpoint thread (a thread beyond those
        the daemon had at READY=1) was alive in the frozen process."""
        if load:
            load.killing.set()
        pid = d.pid()
        faultlib.freeze(pid)
        mid = bool(faultlib.tasks(pid) - base)
        self.assertEqual(d.stop(signal.SIGKILL), -signal.SIGKILL)
        return mid

    def _kill_in_checkpoint(self, d, load, base, nth):
        """Waits for the nth checkpoint thread of this process life (the first ones complete)
        and kills while it runs. Bounded: gives up after a few maintenance ticks and kills
        anyway. Returns True if the kill landed inside a checkpoint."""
        pid = d.pid()
        seen = set()
        deadline = time.monotonic() + (2.5 + nth) * harness.TIMEOUT_SCALE
        while time.monotonic() < deadline:
            extra = faultlib.tasks(pid) - base
            new = extra - seen
            if new:
                seen |= new
                if len(seen) >= nth:
                    load.killing.set()
                    faultlib.freeze(pid)
                    if faultlib.tasks(pid) - base:
                        self.assertEqual(d.stop(signal.SIGKILL), -signal.SIGKILL)
                        return True
                    os.kill(pid, signal.SIGCONT)  # it ended in between: the next one
                    load.killing.clear()
            time.sleep(0.0005)
        return self._freeze_kill(d, load, base)

    def _kill_in_replay(self, d):
        """Restarts d on its journal and kills it while a sealed segment is being replayed
        (before READY=1). Returns (landed in the replay, journal bytes at that start)."""
        size = journal_bytes(d.db)
        d.start(wait_ready=False)
        pid = d.pid()

        def replaying(files):
            names = [os.path.basename(f) for f in files]
            seqs = [int(m.group(1), 16) for m in map(WAL_RE.match, names) if m]
            # wal.lock held and a segment older than the newest one open: replay reads the
            # sealed segments after the fresh current segment (and its spare) were made.
            return "wal.lock" in names and len(seqs) >= 2 and min(seqs) < max(seqs)

        deadline = time.monotonic() + harness.START_TIMEOUT
        while time.monotonic() < deadline and d.running() and not ready_since_start(d):
            if replaying(faultlib.open_files(pid)):
                faultlib.freeze(pid)
                landed = replaying(faultlib.open_files(pid))
                self.assertEqual(d.stop(signal.SIGKILL), -signal.SIGKILL)
                return landed and not ready_since_start(d), size
            time.sleep(0.0002)
        self.assertTrue(d.running(), "divvyd exited while starting on its journal\n" + d.log_tail())
        d.wait_ready()
        self.assertEqual(d.stop(signal.SIGKILL), -signal.SIGKILL)
        return False, size

    def _rounds(self, sync):
        _, config = rules_file(self)
        d = self.new_daemon(config, args=["--sync", sync, "--journal-segment-size", "1M"] + FREQUENT)
        ledger = Ledger(["%s-%d" % (sync, i) for i in range(self.KEYS)])
        rng = random.Random(14 + len(sync))
        kills = mid_ckpt = targeted = released = replay_kills = replay_tries = 0
        replay_sizes = []
        for i in range(self.ROUNDS):
            before = segments(d.db) if os.path.isdir(d.db) else {}
            d.start()
            base = faultlib.tasks(d.pid())
            ledger.check(self, d, "%s round %d" % (sync, i))
            load = Load(d, ledger.keys, seed=i)
            if i % 5 == 2:
                # Kill inside a checkpoint: the first of this life, or the second (after one
                # completed and released its segments).
                targeted += 1
                load.start()
                mid = self._kill_in_checkpoint(d, load, base, 1 + targeted % 2)
            else:
                load.start(target=rng.randint(1, 20000))
                self.assertTrue(load.reached.wait(harness.IO_TIMEOUT * 3), "round %d: no progress" % i)
                mid = self._freeze_kill(d, load, base)
            kills += 1
            mid_ckpt += mid
            load.stop()
            self.assertEqual(load.errors(), [], "%s round %d" % (sync, i))
            ledger.merge(load)
            after = segments(d.db)
            if before and after and min(after) > min(before):
                released += 1  # a checkpoint completed and deleted covered segments
            if i % 5 == 4:
                replay_tries += 1
                landed, size = self._kill_in_replay(d)
                replay_kills += landed
                replay_sizes.append(size)
        d.start()
        ledger.check(self, d, "%s after %d kills" % (sync, kills))
        self.assertEqual(d.stop(), 0)
        self.assertTrue(os.path.exists(os.path.join(d.db, "data.mdb")))
        report("kill-" + sync, "%d SIGKILLs under load, %d acknowledged hits on %d counters, none "
               "lost; %d of %d kills landed inside a checkpoint (%d aimed at one); checkpoints "
               "completed and released segments in %d rounds; %d of %d restarts killed during the "
               "journal replay (journals %s MiB)" %
               (kills, ledger.acked, len(ledger.keys), mid_ckpt, kills, targeted, released,
                replay_kills, replay_tries, "/".join("%.1f" % (s / 1048576) for s in replay_sizes)))
        # The kinds of kill the test is about must have happened, or it tested less than it says.
        self.assertGreater(released, 0, "no checkpoint ever completed during the rounds")
        self.assertGreater(mid_ckpt, 0, "no kill landed inside a checkpoint")
        self.assertGreater(replay_kills, 0, "no kill landed during a journal replay")

    def test_kill_sync_always(self):
        self._rounds("always")

    def test_kill_sync_none(self):
        # The mapping is shared: a process crash loses nothing even without any sync.
        self.ROUNDS = 10
        self._rounds("none")

    def test_sigterm_in_checkpoint(self):
        # A clean stop that arrives while the checkpoint thread runs: exit 0, nothing lost.
        _, config = rules_file(self)
        d = self.new_daemon(config, args=["--journal-segment-size", "1M"] + FREQUENT)
        ledger = Ledger(["t-%d" % i for i in range(self.KEYS)])
        landed = 0
        for i in range(3):
            d.start()
            base = faultlib.tasks(d.pid())
            ledger.check(self, d, "sigterm round %d" % i)
            load = Load(d, ledger.keys, seed=100 + i).start()
            pid = d.pid()
            faultlib.wait_for(lambda: faultlib.tasks(pid) - base, 5, "a checkpoint thread", interval=0.0005)
            load.killing.set()
            faultlib.freeze(pid)
            landed += bool(faultlib.tasks(pid) - base)
            os.kill(pid, signal.SIGTERM)
            os.kill(pid, signal.SIGCONT)
            self.assertEqual(d.wait_exit(), 0, d.log_tail())
            load.stop()
            self.assertEqual(load.errors(), [], "sigterm round %d" % i)
            ledger.merge(load)
        d.start()
        ledger.check(self, d, "after SIGTERMs in checkpoints")
        self.assertEqual(d.stop(), 0)
        report("sigterm-in-checkpoint", "%d of 3 SIGTERMs landed inside a checkpoint: exit 0, "
               "%d acknowledged hits kept" % (landed, ledger.acked))
        self.assertGreater(landed, 0)

    def test_kill_sync_periodic(self):
        self._rounds("periodic")


class _Counters:
    def _hit_all(self, d, keys, what):
        """One hit on each key (pipelined, 2000 a connection); returns the replies, which
        must all come (an ERR would end the connection)."""
        out = []
        for start in range(0, len(keys), 2000):
            with d.connect("unix") as c:
                out += c.pipeline([hit(k) for k in keys[start:start + 2000]])
        self.assertEqual(len(out), len(keys), what)
        return out

    def _new_counters(self, d, prefix, n, hits):
        """n new counters, one hit each, every one answered as a first hit; into hits."""
        keys = ["%s-%d" % (prefix, i) for i in range(n)]
        for k, r in zip(keys, self._hit_all(d, keys, "new counters " + prefix)):
            self.assertEqual((harness.parse_ok(r) or (None, None))[:2], (True, LIMIT - 1), "%s: %r" % (k, r))
            hits[k] = 1

    def _expect(self, d, hits, what):
        """hits: {key: hits counted so far, or (lo, hi) for hits never answered}. One more hit
        each must show exactly that many; the probe is counted (and hits[k] becomes exact)."""
        keys = sorted(hits)
        replies = self._hit_all(d, keys, what)
        bad = []
        for k, r in zip(keys, replies):
            lo, hi = hits[k] if isinstance(hits[k], tuple) else (hits[k], hits[k])
            ok = harness.parse_ok(r)
            if not ok or not ok[0] or not LIMIT - 1 - hi <= ok[1] <= LIMIT - 1 - lo:
                bad.append("%s: %r, expected credit %d..%d" % (k, r, LIMIT - 1 - hi, LIMIT - 1 - lo))
            else:
                hits[k] = LIMIT - ok[1]
        self.assertEqual(bad[:5], [], "%s: %d of %d counters wrong" % (what, len(bad), len(keys)))


class Full(_Counters, harness.DaemonTestCase):
    def _until_refused(self, d, keys, hits, chunk=1000):
        """Hits on keys (new or known counters, hits says how many each has), chunk by chunk,
        until the store refuses one. An ERR ends its connection (the protocol): the requests
        after it are not answered. Every OK must be right, and counts in hits; a refused hit
        must never count; an unanswered one may (hits[k] becomes a (lo, hi) range). Returns
        (refused keys, the ERR)."""
        refused, err = [], None
        for start in range(0, len(keys), chunk):
            batch = keys[start:start + chunk]
            with d.connect("unix") as c:
                replies = c.pipeline([hit(k) for k in batch])
            for k, r in zip(batch, replies):
                ok = harness.parse_ok(r)
                self.assertEqual(refused, [], "an answer after an ERR: %s %r" % (k, r))
                if ok:
                    self.assertEqual(ok[:2], (True, LIMIT - 1 - hits.get(k, 0)), "%s: %r" % (k, r))
                    hits[k] = hits.get(k, 0) + 1
                else:
                    self.assertRegex(r, STORE_ERR)
                    refused.append(k)
                    hits.setdefault(k, 0)
                    err = r
            if refused:
                for k in batch[len(replies):]:
                    hits[k] = (hits.get(k, 0), hits.get(k, 0) + 1)
                return refused, err
            self.assertEqual(len(replies), len(batch), "EOF without an ERR")
        self.fail("the store never refused a hit on the full filesystem")

    def test_map_full_checkpoint(self):
        tmp, config = rules_file(self)
        db = os.path.join(tmp, "db")
        port = harness.free_tcp_port()
        small = ["--map-size", "256K", "--map-size-max", "512K", "--journal-segment-size", "256K",
                 "--http-port", str(port), "--checkpoint-format", "lmdb"] + FREQUENT
        d = self.start_daemon(config, listen=("unix",), db=db, args=small)
        hits = {}
        self._new_counters(d, "m", 30000, hits)
        # The checkpoint cannot fit in 512K: reported in STATUS, the log and the metric ...
        d.wait_note(re.compile(r"^STATUS=.*checkpoint failing \(\d+ failures\): .*"), timeout=30,
                    what="a STATUS saying the checkpoint fails")
        self.assertRegex(d.log_text(), r"Checkpoint failed, keeping the journal and retrying: .*")
        first = checkpoint_failures(port)
        self.assertGreaterEqual(first, 1)
        # ... and retried (backoff 1 s, 2 s, ...): the failure count grows.
        faultlib.wait_for(lambda: checkpoint_failures(port) > first, 20,
                          "a retried checkpoint")
        # Hits are answered from memory meanwhile, old counters and new ones.
        self._new_counters(d, "m2", 3000, hits)
        self._expect(d, hits, "while the checkpoint fails")
        self.assertEqual(d.request("HIT path=/open", "unix"), "OK true 5 0")
        journal_full = journal_bytes(db)
        # A crash in this state loses nothing either: all of it is in the journal.
        self.assertEqual(d.stop(signal.SIGKILL), -signal.SIGKILL)

        # Room again: a larger cap. The checkpoint goes through and releases the journal.
        big = ["--map-size-max", "64M", "--checkpoint-format", "lmdb", "--journal-segment-size", "256K", "--http-port", str(port)] + FREQUENT
        d2 = self.start_daemon(config, listen=("unix",), db=db, args=big)
        self._expect(d2, hits, "restarted with a larger cap")
        d2.wait_note(re.compile(r"^STATUS=.*last checkpoint"), timeout=30,
                     what="a STATUS saying a checkpoint succeeded")
        faultlib.wait_for(lambda: journal_bytes(db) < journal_full, 20, "the journal released")
        self.assertEqual(checkpoint_failures(port), 0)
        self.assertEqual(d2.stop(), 0)
        size = os.path.getsize(os.path.join(db, "data.mdb"))
        self.assertGreater(size, 512 << 10)
        # From the checkpoint (and what is left of the journal): every counter.
        d3 = self.start_daemon(config, listen=("unix",), db=db, args=big[:-2] + NEVER)
        self._expect(d3, hits, "after the checkpoint")
        self.assertEqual(d3.stop(), 0)
        report("map-full-checkpoint", "512 KiB map cap: checkpoints of %d counters failed and were "
               "retried while hits were answered; journal %d KiB kept through a SIGKILL; with 64 MiB "
               "the checkpoint succeeded (data.mdb %d KiB, journal %d KiB) and every counter was "
               "exact" % (len(hits), journal_full >> 10, size >> 10, journal_bytes(db) >> 10))

    def _tmpfs(self, map_args, hits):
        """A daemon on a fresh 8 MiB tmpfs (mounted as root; skips loudly if it cannot) with
        4000 counters (into hits) and a first checkpoint. Returns (fs, config, port, args, d)."""
        tmp, config = rules_file(self)
        fs = os.path.join(tmp, "fs")
        os.mkdir(fs)
        faultlib.mount_tmpfs(self, fs)
        port = harness.free_tcp_port()
        args = map_args + ["--sync", "always", "--journal-segment-size", "256K",
                           "--http-port", str(port)] + FREQUENT
        d = self.start_daemon(config, listen=("unix",), db=os.path.join(fs, "db"), args=args)
        self._new_counters(d, "a", 4000, hits)
        d.wait_note(re.compile(r"^STATUS=.*last checkpoint"), timeout=30, what="a first checkpoint")
        return fs, config, port, args, d

    def test_disk_full_checkpoint(self):
        # Room for the journal's segments but not for the checkpoint: LMDB's write fails, the
        # hits are all answered and journaled, and nothing is lost once space returns.
        # 600K free: two more 256K segments (the 240K of records below, and the checkpoint's
        # rotation), about 88K left for a checkpoint of 5000 new counters: too little.
        self._disk_full_checkpoint(["--checkpoint-format", "lmdb"], 600 << 10, "disk-full-lmdb",
                                   "no room for data.mdb")

    def test_disk_full_snapshot(self):
        # The same with snapshots: 100K free, less than a snapshot of the 4000 counters and
        # more (128K and up) beside the previous one, while the journal's segment made in
        # advance takes the records: the snapshot's write fails, the previous snapshot and the
        # journal stay, and nothing is lost once space returns.
        self._disk_full_checkpoint(["--checkpoint-format", "snapshot"], 100 << 10, "disk-full-snapshot",
                                   "no room for counters.snap")

    def _disk_full_checkpoint(self, fmt, leave, figure, what):
        hits = {}
        fs, config, port, args, d = self._tmpfs(["--map-size", "64M"] + fmt, hits)
        db = d.db
        ballast = os.path.join(fs, "ballast")
        faultlib.fill_filesystem(ballast, leave=leave)
        self._new_counters(d, "b", 5000, hits)
        faultlib.wait_for(lambda: checkpoint_failures(port) >= 1, 20,
                          "a checkpoint failing on the full filesystem")
        m = re.search(r"Checkpoint failed, keeping the journal and retrying: (.*)", d.log_text())
        self.assertTrue(m, d.log_tail())
        self.assertRegex(m.group(1), r"^writing the checkpoint failed: ")
        d.wait_note(re.compile(r"^STATUS=.*checkpoint failing \(\d+ failures\): writing the checkpoint"),
                    timeout=10, what="a STATUS saying the checkpoint fails")
        # Answered from memory meanwhile (a sample: the journal has little room left).
        sample = {k: hits[k] for k in ["a-%d" % i for i in range(100)] + ["b-%d" % i for i in range(100)]}
        self._expect(d, sample, "while the checkpoint fails")
        hits.update(sample)
        os.unlink(ballast)
        faultlib.wait_for(lambda: "Checkpoint succeeded again" in d.log_text(), 70,
                          "a checkpoint succeeding once space was freed")
        self.assertEqual(d.stop(signal.SIGKILL), -signal.SIGKILL)
        d2 = self.start_daemon(config, listen=("unix",), db=db, args=args)
        self._expect(d2, hits, "restart after the checkpoint failed on a full disk")
        self.assertEqual(d2.stop(), 0)
        report(figure, "journal room, %s: %s; %d counters answered "
               "and kept through SIGKILL + restart once space returned" % (what, m.group(1), len(hits)))
        # The reason says the disk is full, although LMDB reports its short write
        # (mdb_page_flush: "short write, filesystem full?") as EIO.
        self.assertRegex(m.group(1), r"No space left|disk is full")

    def test_disk_full(self):
        hits = {}
        fs, config, port, args, d = self._tmpfs(["--map-size", "1M", "--map-size-max", "64M"], hits)
        db = d.db

        ballast = os.path.join(fs, "ballast")
        faultlib.fill_filesystem(ballast)
        # The filesystem is full: new counters until the journal needs a segment it cannot make.
        refused, err = self._until_refused(d, ["g-%d" % i for i in range(200000)], hits)
        # The checkpoint cannot write either: reported and retried; the daemon serves on.
        faultlib.wait_for(lambda: checkpoint_failures(port) >= 1, 20,
                          "a failed checkpoint on the full filesystem")
        self.assertRegex(d.log_text(), r"Checkpoint failed, keeping the journal and retrying: .*")
        self.assertEqual(d.request("HIT path=/open", "unix"), "OK true 5 0")
        # Still full: what is left of the current segment may take a few more; then ERR again,
        # for new counters and for known ones (whose refused hit must not count either).
        refused += self._until_refused(d, ["h-%d" % i for i in range(20000)], hits, chunk=16)[0]
        refused += self._until_refused(d, ["a-%d" % i for i in range(4000)], hits, chunk=16)[0]
        self.assertTrue(refused[-1].startswith("a-"))
        journaled = sum(1 for k in hits if hits[k] == 1)
        unanswered = [k for k in hits if isinstance(hits[k], tuple)]

        os.unlink(ballast)
        # Space again: hits are journaled (the refused ones were never counted) ...
        faultlib.wait_for(lambda: harness.parse_ok(d.request(hit("probe"), "unix")), 10,
                          "a hit once space was freed")
        hits["probe"] = 1
        self._expect(d, hits, "refused hits were not counted, space freed")
        # ... and the checkpoint succeeds again.
        faultlib.wait_for(lambda: "Checkpoint succeeded again" in d.log_text(), 70,
                          "a checkpoint succeeding once space was freed")
        failures = checkpoint_failures(port)
        self.assertEqual(d.stop(signal.SIGKILL), -signal.SIGKILL)
        d2 = self.start_daemon(config, listen=("unix",), db=db, args=args)
        self._expect(d2, hits, "restart after the disk was full")
        self.assertEqual(d2.stop(), 0)
        report("disk-full-checkpoint", "8 MiB tmpfs: %d counters with one hit journaled, then %s for %d (%d "
               "unanswered after them); %d failed checkpoints; after freeing space hits and checkpoints "
               "work, a SIGKILL and restart keep every counter, refused hits uncounted" %
               (journaled, err, len(refused), len(unanswered), failures))


class Restart(_Counters, harness.DaemonTestCase):
    def test_journal_only_then_checkpoint(self):
        tmp, config = rules_file(self)
        db = os.path.join(tmp, "db")
        seg = ["--journal-segment-size", "256K"]
        d = self.start_daemon(config, listen=("unix",), db=db, args=seg + NEVER)
        hits = {}
        keys = ["r-%d" % i for i in range(20000)]
        with d.connect("unix") as c:
            for rep in range(4):
                part = [k for i, k in enumerate(keys) if i % 4 >= rep]  # 1 to 4 hits a counter
                for start in range(0, len(part), 4000):
                    for k, r in zip(part[start:start + 4000], c.pipeline([hit(k) for k in part[start:start + 4000]])):
                        self.assertEqual(harness.parse_ok(r)[:2], (True, LIMIT - 1 - hits.get(k, 0)), r)
                        hits[k] = hits.get(k, 0) + 1
        journal = segments(db)
        self.assertEqual(d.stop(), 0)
        notes = [line for line in d.note_lines() if line.startswith("STATUS=Serving")]
        self.assertTrue(notes and notes[-1].endswith("no checkpoint since start"), notes[-1:])
        # No checkpoint while serving; the clean stop checkpoints the whole journal: every
        # segment it held is deleted, and the restart replays nothing.
        self.assertGreater(len(journal), 4)
        self.assertEqual(set(journal) & set(segments(db)), set(), "segments left after the last checkpoint")

        d2 = self.start_daemon(config, listen=("unix",), db=db, args=seg + NEVER)
        self._expect(d2, hits, "restart from the checkpoint written at the stop")
        # A kill leaves the journal: the restart replays it.
        self.assertEqual(d2.stop(signal.SIGKILL), -signal.SIGKILL)
        d2 = self.start_daemon(config, listen=("unix",), db=db, args=seg + NEVER)
        self._expect(d2, hits, "restart from the journal after a kill")
        self.assertEqual(d2.stop(signal.SIGKILL), -signal.SIGKILL)

        # Checkpoints on: once one ran, the journal it covers is deleted.
        before = segments(db)
        d3 = self.start_daemon(config, listen=("unix",), db=db, args=seg + FREQUENT)
        d3.wait_note(re.compile(r"^STATUS=.*last checkpoint"), timeout=30, what="a checkpoint")
        faultlib.wait_for(lambda: not (set(before) & set(segments(db))), 20,
                          "the checkpointed segments deleted")
        after = segments(db)
        self.assertLess(sum(after.values()), sum(before.values()))
        self._expect(d3, hits, "after a checkpoint")
        self.assertEqual(d3.stop(), 0)

        d4 = self.start_daemon(config, listen=("unix",), db=db, args=seg + NEVER)
        self._expect(d4, hits, "restart from the checkpoint")
        self.assertEqual(d4.stop(), 0)
        report("clean-restart", "%d counters (%d hits) survived a SIGTERM restart after the last "
               "checkpoint of %d journal segments at the stop, a SIGKILL restart from the journal, and one "
               "after a checkpoint left %d segments (%d KiB -> %d KiB)" %
               (len(hits), sum(hits.values()), len(journal), len(after), sum(before.values()) >> 10,
                sum(after.values()) >> 10))


WAL_HEADER_SIZE, WAL_RECORD_SIZE = 64, 48  # bytes (src/store/wal.h)


def segment_first_lsn(db, seq):
    """The lsn of segment seq's first record, from its header (bytes 24..31, little-endian)."""
    with open(os.path.join(db, "wal-%016x.divvyd" % seq), "rb") as f:
        return int.from_bytes(f.read(WAL_HEADER_SIZE)[24:32], "little")


class JournalDamage(_Counters, harness.DaemonTestCase):
    """One flipped bit in one journal record after acknowledged --sync=always hits and a
    SIGKILL: the restart replays every valid record after it, so exactly the one counter
    whose only record was damaged loses its hit, and the damage is in the log (error level:
    segment, record, count), the metric and STATUS=."""

    HITS = 2200  # one new counter each, one record each: lsn i + 1 is key i. 64K segments hold
    # 1364 records, so the journal is a full segment 1 and a last segment 2 of ~800

    def _case(self, config, tmp, where, pick):
        db = os.path.join(tmp, "db-" + where)
        port = harness.free_tcp_port()
        args = ["--sync", "always", "--journal-segment-size", "64K", "--http-port", str(port)] + NEVER
        d = self.start_daemon(config, listen=("unix",), db=db, args=args)
        keys = ["jd-%d" % i for i in range(self.HITS)]
        acked = [k for k, r in zip(keys, self._hit_all(d, keys, "hits"))
                 if (harness.parse_ok(r) or (None,))[0]]
        self.assertEqual(len(acked), self.HITS)
        self.assertEqual(d.stop(signal.SIGKILL), -signal.SIGKILL)

        segs = sorted(segments(db))
        self.assertGreaterEqual(len(segs), 2, "the hits fill more than one segment")
        firsts = [segment_first_lsn(db, q) for q in segs] + [self.HITS + 1]
        k = segs.index(segs[-1] if where.startswith("last") else segs[0])
        seq, n = segs[k], firsts[k + 1] - firsts[k]
        index = pick(n)
        lsn = firsts[k] + index
        name = "wal-%016x.divvyd" % seq
        with open(os.path.join(db, name), "r+b") as f:
            off = WAL_HEADER_SIZE + index * WAL_RECORD_SIZE + 30  # the state: neither lsn nor CRC
            f.seek(off)
            b = f.read(1)[0]
            f.seek(off)
            f.write(bytes([b ^ 0x01]))

        d2 = self.start_daemon(config, listen=("unix",), db=db, args=args)
        replies = self._hit_all(d2, keys, "after the damage")
        lost = [k for k, r in zip(keys, replies) if harness.parse_ok(r)[:2] == (True, LIMIT - 1)]
        self.assertEqual(lost, [keys[lsn - 1]], "%s: %d of %d acknowledged hits lost, expected only the "
                         "damaged record's (lsn %d)\n%s" % (where, len(lost), len(acked), lsn, d2.log_tail()))
        self.assertIn("<3>Journal damaged: %s/%s: record %d (lsn %d) is damaged; 1 damaged journal record "
                      "skipped in 1 segment at start: " % (db, name, index, lsn), d2.log_text())
        samples = harness.prometheus_samples(harness.http_get(port)[2])
        self.assertEqual(samples["divvyd_journal_damaged_records_total"], 1)
        d2.wait_note(re.compile(r"^STATUS=Serving .*journal \d+ MiB \(1 damaged records skipped at start\), "),
                     what="STATUS= with the damage")
        self.assertEqual(d2.stop(), 0)  # checkpoints what was replayed: the damage is gone
        d3 = self.start_daemon(config, listen=("unix",), db=db, args=args)
        self.assertEqual(harness.prometheus_samples(harness.http_get(port)[2])["divvyd_journal_damaged_records_total"], 0)
        self.assertEqual(d3.stop(), 0)
        self.assertNotIn("Journal damaged", d3.log_text())
        return "%s record %d of %d (%s): 1 of %d acknowledged hits lost" % (where, index, n, name, len(acked))

    def test_damaged_record(self):
        tmp, config = rules_file(self)
        out = []
        for where, pick in (("last segment, first", lambda n: 0), ("last segment, record 10", lambda n: 10),
                            ("last segment, last", lambda n: n - 1), ("earlier segment, first", lambda n: 0),
                            ("earlier segment, middle", lambda n: n // 2),
                            ("earlier segment, last", lambda n: n - 1)):
            out.append(self._case(config, tmp, where.replace(" ", "-").replace(",", ""), pick))
        report("journal-damage", "; ".join(out))


if __name__ == "__main__":
    harness.main()
