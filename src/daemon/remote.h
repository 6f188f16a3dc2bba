/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * remote.c: the daemon's side of the Redis/Valkey store (issue #16, --store=redis...): opens
 * store/redis-store.h's backend with this loop's sd-event sources for its sockets and its
 * one timer, puts store/store-fallback.h's policies (onBackendError) in front of it with the
 * local LMDB store behind, logs each change of the backend's state once, and publishes its
 * counters to the metrics and STATUS. The server submits batches to remote_backend().
 */

#include <stdint.h>

#include <systemd/sd-event.h>

#include "core/rules.h"
#include "metrics.h"
#include "store/store.h"

#define REMOTE_TIMEOUT_DEFAULT_USEC (50ULL * 1000ULL) /* --backend-timeout: a batch's deadline */

typedef struct RemoteSettings {
        const char *url;       /* --store=redis...; NULL: the local store alone */
        const char *password;  /* --store-password-file / $DIVVYD_STORE_PASSWORD; NULL: the URL's */
        uint64_t timeout_usec; /* 0: REMOTE_TIMEOUT_DEFAULT_USEC */
        RuleOnError on_error;  /* --on-backend-error; DEFAULT: local */
} RemoteSettings;

typedef struct Remote Remote;

/* Opens the remote store (connecting happens in the loop, never blocking it). Logs failures.
 * local: this host's store, for onBackendError=local. */
int remote_new(sd_event *event, const RemoteSettings *settings, Store *local, Metrics *metrics,
               Remote **ret);
/* Fails what is in flight on Redis (the fallback decides it: onBackendError=local submits
 * to the local store, which may complete it later, sync=always) and closes the connections.
 * Call it before the local store is closed, and remote_free() after: the fallback must
 * outlive the local store's batches. Accepts NULL; idempotent. */
void remote_close(Remote *r);
/* remote_close(), then frees the fallback. Accepts NULL. */
Remote *remote_free(Remote *r);

/* The backend the server submits batches to (StoreSubmitFunc store_fallback_submit). */
StoreSubmitFunc remote_submit_func(void);
void *remote_backend(Remote *r);

/* Logs a warning for each two rules whose divvy keys can meet in Redis
 * (config_check_divvy_keys()), when url is a store that uses divvy's keys (not a cluster).
 * For each set of rules loaded. */
void remote_warn_rules(const RemoteSettings *settings, const RuleSet *rules);

/* Refreshes the backend's metrics (its counters, copied). The manager's periodic timers call
 * it (each second with the sweep); a change of state is logged and published at once, from
 * the backend's own events. */
void remote_publish(Remote *r);
/* One phrase for STATUS, e.g. "redis 127.0.0.1:6379 up" or "redis down (connection refused)". */
const char *remote_status(Remote *r, char *buf, size_t size);
