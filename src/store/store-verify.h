/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * store-verify.c: reads every page of an existing counter store in a child process,
 * before the daemon opens it. LMDB keeps no checksums: a damaged branch or leaf page
 * makes it read past the end of the map (SIGBUS) or through a wild offset (SIGSEGV).
 * The child takes that fall and the parent gets a sentence for the operator, so that a
 * damaged database is refused at start instead of crashing the daemon, then or later.
 */

#include <stddef.h>

#define STORE_VERIFY_TIMEOUT_SEC                                                                            \
        600 /* s: the walk is linear in the file's size (about 1 s per GB when cached); a damaged tree      \
             * that loops is given up after this */

/* Walks every entry of every database in path/data.mdb (read-only, in a child process).
 * Returns 0 if there is no data.mdb yet (or it is empty, not a regular file, or not an
 * environment LMDB opens: store_open() explains those), 0 if the walk completed, or
 * -EBADMSG with a sentence in errbuf when the walk crashed, failed or timed out; -errno
 * if the child could not be run. */
int store_verify(const char *path, char *errbuf, size_t errbuf_size);
