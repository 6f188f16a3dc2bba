/* SPDX-License-Identifier: MIT */
/*
 * store-verify.c: see store-verify.h. Includes <lmdb.h>, as only files of src/store/ may:
 * it knows nothing of the store's format beyond "an environment with named databases",
 * and never writes.
 */

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <lmdb.h>

#include "checkpoint.h"
#include "store-verify.h"

#define VERIFY_DBS_MAX     64  /* named databases walked; the store has three */
#define VERIFY_MESSAGE_MAX 256 /* bytes: the child's sentence, through a pipe */
#define VERIFY_FILE_MODE                                                                                    \
        0600 /* lock.mdb, when this check is the first to open the directory (a copy of data.mdb            \
              * alone): checkpoint.c's mode, so that the daemon can open it afterwards */

static volatile uint64_t verify_sink; /* keeps the byte reads from being optimized away */

/* Reads every key and value of one database; returns an MDB code. */
static int walk_db(MDB_txn *txn, MDB_dbi dbi) {
        MDB_cursor *cur;
        MDB_val k, v;
        uint64_t sum = 0;
        int r;

        r = mdb_cursor_open(txn, dbi, &cur);
        if (r != 0)
                return r;
        for (r = mdb_cursor_get(cur, &k, &v, MDB_FIRST); r == 0; r = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
                for (size_t i = 0; i < k.mv_size; i++)
                        sum += ((const uint8_t *) k.mv_data)[i];
                for (size_t i = 0; i < v.mv_size; i++)
                        sum += ((const uint8_t *) v.mv_data)[i];
        }
        mdb_cursor_close(cur);
        verify_sink += sum;
        return r == MDB_NOTFOUND ? 0 : r;
}

/* The child: walks the freelist, the main database and every named database in it. Returns
 * 0 when everything was read; 2 when the environment does not even open (not LMDB, another
 * version: store_open() says so better); 1 with a sentence written to fd on any other
 * LMDB error. */
static int verify_child(const char *path, int fd) {
        char name[512], msg[VERIFY_MESSAGE_MAX];
        MDB_env *env = NULL;
        MDB_txn *txn = NULL;
        MDB_cursor *cur = NULL;
        MDB_dbi main_dbi;
        MDB_val k, v;
        mdb_filehandle_t data_fd;
        int r;

        r = mdb_env_create(&env);
        if (r == 0)
                r = mdb_env_set_maxdbs(env, VERIFY_DBS_MAX);
        if (r == 0)
                r = mdb_env_open(env, path, MDB_RDONLY, VERIFY_FILE_MODE);
        if (r != 0) {
                mdb_env_close(env);
                return 2;
        }
        if (mdb_env_get_fd(env, &data_fd) == 0) /* read it in file order, not the walk's */
                (void) posix_fadvise(data_fd, 0, 0, POSIX_FADV_WILLNEED);
        r = mdb_txn_begin(env, NULL, MDB_RDONLY, &txn);
        if (r == 0)
                r = walk_db(txn, 0); /* the freelist: a write reuses its pages */
        if (r == 0)
                r = mdb_dbi_open(txn, NULL, 0, &main_dbi);
        if (r == 0)
                r = walk_db(txn, main_dbi);
        if (r == 0)
                r = mdb_cursor_open(txn, main_dbi, &cur);
        for (unsigned n = 0; r == 0 && n < VERIFY_DBS_MAX; n++) {
                MDB_dbi dbi;

                r = mdb_cursor_get(cur, &k, &v, n == 0 ? MDB_FIRST : MDB_NEXT);
                if (r != 0)
                        break;
                if (k.mv_size == 0 || k.mv_size >= sizeof name || memchr(k.mv_data, '\0', k.mv_size))
                        continue; /* not a database name: store_open() judges foreign content */
                memcpy(name, k.mv_data, k.mv_size);
                name[k.mv_size] = '\0';
                r = mdb_dbi_open(txn, name, 0, &dbi);
                if (r == MDB_INCOMPATIBLE) { /* a plain key of the main database */
                        r = 0;
                        continue;
                }
                if (r == 0)
                        r = walk_db(txn, dbi);
        }
        if (r == MDB_NOTFOUND)
                r = 0;
        if (cur)
                mdb_cursor_close(cur);
        if (txn)
                mdb_txn_abort(txn);
        mdb_env_close(env);
        if (r == 0)
                return 0;
        snprintf(msg, sizeof msg, "reading it failed: %s", mdb_strerror(r));
        (void) !write(fd, msg, strlen(msg));
        return 1;
}

/* Earlier versions of this check created lock.mdb with mode 0 (no access even for its owner,
 * so every later start failed with EACCES unless run as root): give such a file of ours the
 * mode of data.mdb. Best effort; any other mode is the operator's. */
static void repair_lock_mode(const char *path, const struct stat *data_st) {
        char lock[4096];
        struct stat st;

        if ((size_t) snprintf(lock, sizeof lock, "%s/lock.mdb", path) >= sizeof lock)
                return;
        if (stat(lock, &st) == 0 && S_ISREG(st.st_mode) && (st.st_mode & 07777) == 0 &&
            st.st_uid == geteuid())
                (void) chmod(lock, data_st->st_mode & 0666);
}

int store_verify(const char *path, char *errbuf, size_t errbuf_size) {
        char data[4096], msg[VERIFY_MESSAGE_MAX] = "";
        struct sigaction sa_chld_old = {};
        bool chld_ignored;
        struct stat st;
        int fds[2], status = 0, r;
        ssize_t n;
        pid_t pid;

        if (errbuf_size > 0)
                errbuf[0] = '\0';
        if ((size_t) snprintf(data, sizeof data, "%s/data.mdb", path) >= sizeof data)
                return 0; /* store_open() refuses the path */
        if (stat(data, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size == 0)
                return 0; /* nothing to walk yet, or not a file: store_open() explains */
        repair_lock_mode(path, &st);
        r = checkpoint_lock_prepare(path, errbuf, errbuf_size); /* the child's LMDB may create it */
        if (r < 0)
                return r;

        if (pipe2(fds, O_CLOEXEC) < 0)
                return -errno;
        /* With SIGCHLD ignored the kernel would reap the child and waitpid() fail with ECHILD:
         * default it meanwhile (any other disposition is left alone). */
        (void) sigaction(SIGCHLD, NULL, &sa_chld_old);
        chld_ignored = sa_chld_old.sa_handler == SIG_IGN || (sa_chld_old.sa_flags & SA_NOCLDWAIT);
        if (chld_ignored && sigaction(SIGCHLD, &(struct sigaction){ .sa_handler = SIG_DFL }, NULL) < 0) {
                r = -errno;
                close(fds[0]);
                close(fds[1]);
                return r;
        }
        pid = fork();
        if (pid < 0) {
                r = -errno;
                if (chld_ignored)
                        (void) sigaction(SIGCHLD, &sa_chld_old, NULL);
                close(fds[0]);
                close(fds[1]);
                return r;
        }
        if (pid == 0) {
                sigset_t alrm;

                /* A crash here is the answer, not an event: no core, no sanitizer report. */
                (void) setrlimit(RLIMIT_CORE, &(struct rlimit){ 0, 0 });
                signal(SIGSEGV, SIG_DFL);
                signal(SIGBUS, SIG_DFL);
                signal(SIGALRM, SIG_DFL);
                /* The timeout must fire even if the caller blocks SIGALRM (the mask is inherited). */
                sigemptyset(&alrm);
                sigaddset(&alrm, SIGALRM);
                (void) sigprocmask(SIG_UNBLOCK, &alrm, NULL);
                close(fds[0]);
                alarm(STORE_VERIFY_TIMEOUT_SEC);
                _exit(verify_child(path, fds[1]));
        }
        close(fds[1]);
        n = read(fds[0], msg, sizeof msg - 1);
        msg[n > 0 ? n : 0] = '\0';
        close(fds[0]);
        while ((r = waitpid(pid, &status, 0)) < 0 && errno == EINTR)
                ;
        r = r < 0 ? -errno : 0;
        if (chld_ignored)
                (void) sigaction(SIGCHLD, &sa_chld_old, NULL);
        if (r < 0)
                return r;

        if (WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 2))
                return 0;
        if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
                snprintf(errbuf, errbuf_size,
                         "%s is damaged or too slow to read: checking it took over %d s", data,
                         STORE_VERIFY_TIMEOUT_SEC);
        else if (WIFSIGNALED(status))
                snprintf(errbuf, errbuf_size,
                         "%s is damaged: reading it crashed the check (%s); move the directory aside to "
                         "start with empty counters",
                         data, strsignal(WTERMSIG(status)));
        else
                snprintf(errbuf, errbuf_size,
                         "%s is damaged: %s; move the directory aside to start with empty counters", data,
                         msg[0] ? msg : "the check failed");
        return -EBADMSG;
}
