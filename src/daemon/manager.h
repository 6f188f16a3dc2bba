/* SPDX-License-Identifier: MIT */
#pragma once

/*
 * manager.c: the daemon's one state struct. Owns the event loop, the current
 * RuleSet, the Store, the Metrics, the server, the listeners (which hand their
 * connections to the server) and the statsd sender and HTTP endpoint; handles
 * signals (SIGHUP reload, SIGTERM/SIGINT stop), the periodic jobs (journal sync,
 * sweeper, checkpoint, STATUS) and sd_notify. STATUS shows the connections counted by the
 * server and the hits counted in the Metrics. Reload is parse -> validate -> swap,
 * or change nothing.
 */

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "http-api-server.h"
#include "http.h"
#include "listener.h"
#include "remote.h"
#include "server.h"
#include "statsd.h"
#include "store/store.h"

#define MANAGER_STOP_TIMEOUT_USEC                                                                           \
        (5ULL * 1000ULL * 1000ULL) /* 5 s: at SIGTERM, how long clients get to take their last              \
                                    * replies before we close them anyway (below systemd's 90 s) */
#define MANAGER_STATUS_INTERVAL_USEC (5ULL * 1000ULL * 1000ULL) /* 5 s: STATUS= refresh */
#define MANAGER_SWEEP_BACKLOG_DELAY_USEC                                                                    \
        (1000ULL) /* 1 ms: gap between sweep steps while expired counters remain; pending                   \
                   * requests are served in between */
#define MANAGER_SWEEP_INTERVAL_DEFAULT_USEC (1000ULL * 1000ULL) /* 1 s */
#define MANAGER_MAINTAIN_INTERVAL_USEC                                                                      \
        (1000ULL * 1000ULL) /* 1 s: the checkpoint's timer (store_maintain()): reap, start, prepare; and    \
                             * the HTTP endpoint's deadline (http_expire()) */

typedef struct ManagerSettings {
        const char *config_path;
        const ListenAddress *listen; /* used unless socket-activated; n_listen >= 1 */
        size_t n_listen;
        const ListenAddress *http_api; /* --http-api: used unless socket-activated; may be 0 */
        size_t n_http_api;
        mode_t unix_mode;
        mode_t admin_unix_mode; /* of the admin Unix sockets we create (ListenAddress.admin) */
        StoreOptions store;     /* path must be set */
        ServerSettings server;
        uint64_t sweep_interval_usec;
        StatsdSettings statsd; /* statsd.host NULL: no statsd */
        HttpSettings http;     /* http.metrics_path NULL: no HTTP endpoint */
        RemoteSettings remote; /* remote.url NULL: the local store alone */
} ManagerSettings;

typedef struct Manager Manager;

/* Loads the rules, opens the store, creates or adopts the listeners and sets up
 * signals and timers. Logs every failure itself. The settings' strings and arrays
 * must outlive the manager. Returns 0 or -errno. */
int manager_new(const ManagerSettings *settings, Manager **ret);

/* Sends READY=1 and runs the loop until SIGTERM/SIGINT (or a fatal error). Returns
 * 0 after a normal stop, -errno otherwise. */
int manager_run(Manager *m);

/* Stops the HTTP thread and statsd (which sends a last flush), closes the listeners and
 * the connections, then the store (which syncs). Accepts NULL. */
Manager *manager_free(Manager *m);
