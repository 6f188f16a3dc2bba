/* SPDX-License-Identifier: MIT */
#include "store-sync.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "shared/clock.h"

static int commit_sync_fd(Store *s, int fd) {
        if (s->opts.journal_sync)
                return s->opts.journal_sync(fd);
        if (fd < 0)
                return -EBADF;
        return fdatasync(fd) < 0 ? -errno : 0;
}

static void commit_signal(Store *s) {
        uint64_t one = 1;

        /* cannot fail but by overflow of the count, which leaves it readable anyway */
        (void) !write(s->commit_efd, &one, sizeof one);
}

/* Under commit_lock: a sync up to lsn failed with error r. */
static void commit_failed(Store *s, uint64_t lsn, int r) {
        if (s->commit_fail_to == 0)
                s->commit_fail_from = s->commit_synced + 1;
        if (lsn > s->commit_fail_to)
                s->commit_fail_to = lsn;
        s->commit_fail_error = r;
}

static void *commit_thread(void *userdata) {
        Store *s = userdata;

        pthread_mutex_lock(&s->commit_lock);
        for (;;) {
                uint64_t target, start, took;
                int fd, r;

                while (!s->commit_stop && s->commit_want <= s->commit_tried)
                        pthread_cond_wait(&s->commit_wake, &s->commit_lock);
                if (s->commit_want <= s->commit_tried)
                        break; /* stopping, and everything asked for was tried */
                target = s->commit_want;
                fd = s->commit_fd;
                s->commit_busy = true;
                pthread_mutex_unlock(&s->commit_lock);

                /* Every batch appended up to target is in the segment's pages: one sync covers
                 * them all (the group commit), however many arrived while the last one ran. */
                start = clock_usec(CLOCK_MONOTONIC);
                r = commit_sync_fd(s, fd);
                took = clock_usec(CLOCK_MONOTONIC) - start;

                pthread_mutex_lock(&s->commit_lock);
                s->commit_busy = false;
                if (target > s->commit_tried)
                        s->commit_tried = target;
                if (r >= 0) {
                        if (target > s->commit_synced)
                                s->commit_synced = target;
                        /* stats read them */
                        __atomic_add_fetch(&s->commit_syncs, 1, __ATOMIC_RELAXED);
                        __atomic_add_fetch(&s->commit_sync_usec, took, __ATOMIC_RELAXED);
                } else
                        commit_failed(s, target, r);
                pthread_cond_broadcast(&s->commit_idle);
                commit_signal(s);
        }
        pthread_mutex_unlock(&s->commit_lock);
        return NULL;
}

int store_commit_start(Store *s) {
        uint64_t last;
        int fd, r;

        s->commit_fd = -1;
        s->commit_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (s->commit_efd < 0)
                return -errno;
        wal_current(s->wal, &fd, &s->commit_seq, &last);
        /* none yet on a full disk: the first batch journaled hands it over (submit_always()) */
        s->commit_fd = fd >= 0 ? fcntl(fd, F_DUPFD_CLOEXEC, 3) : -1;
        if (fd >= 0 && s->commit_fd < 0)
                return -errno;
        s->commit_synced = s->commit_tried = s->commit_want = last; /* wal_open() synced them */
        r = -pthread_mutex_init(&s->commit_lock, NULL);
        if (r < 0)
                return r;
        if (pthread_cond_init(&s->commit_wake, NULL) != 0 || pthread_cond_init(&s->commit_idle, NULL) != 0)
                return -ENOMEM; /* cannot happen with default attributes */
        /* The thread takes no signal: it starts before the daemon blocks the ones its event
         * loop handles (signalfd), and one delivered here would kill the process. */
        sigset_t all, old;
        sigfillset(&all);
        (void) pthread_sigmask(SIG_SETMASK, &all, &old);
        r = -pthread_create(&s->commit_thread, NULL, commit_thread, s);
        (void) pthread_sigmask(SIG_SETMASK, &old, NULL);
        if (r < 0)
                return r;
        s->committer = true;
        return 0;
}

void store_commit_rotated(Store *s, int fd, uint64_t seq, uint64_t last) {
        int r;

        while (s->commit_busy)
                pthread_cond_wait(&s->commit_idle, &s->commit_lock);
        if (s->commit_fd >= 0)
                close(s->commit_fd);
        s->commit_fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        s->commit_seq = seq;
        r = s->commit_fd < 0 ? -errno : wal_sync(s->wal);
        if (r >= 0 && s->opts.journal_sync)
                r = s->opts.journal_sync(s->commit_fd);
        if (r >= 0) {
                if (last > s->commit_synced)
                        s->commit_synced = last;
        } else
                commit_failed(s, last, r);
        if (last > s->commit_tried)
                s->commit_tried = last;
        if (last > s->commit_want)
                s->commit_want = last;
        commit_signal(s);
}

int store_event_fd(Store *s) {
        return s && s->committer ? s->commit_efd : -1;
}

int store_process(Store *s) {
        uint64_t v, synced, from, to, covered;
        int error, n = 0;

        if (!s)
                return -EINVAL;
        if (!s->committer && s->pending_n == 0)
                return 0;
        if (s->commit_efd >= 0)
                (void) !read(s->commit_efd, &v, sizeof v); /* EAGAIN: nothing new, fine */
        pthread_mutex_lock(&s->commit_lock);
        synced = s->commit_synced;
        from = s->commit_fail_from;
        to = s->commit_fail_to;
        error = s->commit_fail_error;
        s->commit_fail_to = 0; /* taken: every batch it concerns is queued already */
        pthread_mutex_unlock(&s->commit_lock);
        covered = synced > to ? synced : to;

        while (s->pending_n > 0) {
                Pending p = s->pending[s->pending_head];

                if (p.lsn > covered)
                        break;
                s->pending_head = (s->pending_head + 1) % s->pending_cap;
                s->pending_n--;
                n++;
                /* done may submit the next batch: the entry is off the FIFO first */
                if (p.done)
                        p.done(p.userdata, to > 0 && p.lsn >= from && p.lsn <= to ? error : 0);
        }
        return n;
}

void store_commit_stop(Store *s) {
        if (s->committer) {
                pthread_mutex_lock(&s->commit_lock);
                s->commit_stop = true;
                pthread_cond_signal(&s->commit_wake);
                pthread_mutex_unlock(&s->commit_lock);
                (void) pthread_join(s->commit_thread, NULL);
                (void) store_process(s); /* the thread tried everything queued: completes all */
                s->committer = false;
                pthread_cond_destroy(&s->commit_wake);
                pthread_cond_destroy(&s->commit_idle);
                pthread_mutex_destroy(&s->commit_lock);
        }
        if (s->commit_fd >= 0)
                close(s->commit_fd);
        if (s->commit_efd >= 0)
                close(s->commit_efd);
        s->commit_fd = s->commit_efd = -1;
        free(s->pending);
        s->pending = NULL;
}
