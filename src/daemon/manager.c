/* SPDX-License-Identifier: MIT */
/* manager.c: event loop, signals, reload, periodic jobs, sd_notify; see manager.h. */

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>

#include <systemd/sd-daemon.h>
#include <systemd/sd-event.h>

#include "core/config.h"
#include "core/diag.h"
#include "log.h"
#include "manager.h"

#include "shared/clock.h"
#include "shared/utf8.h"
#include "store/store-verify.h"

struct Manager {
        ManagerSettings settings;
        sd_event *event;
        sd_event_source *sigterm, *sigint, *sighup;
        sd_event_source *store_source; /* store_event_fd(): the group commit's completions */
        sd_event_source *sync_timer, *sweep_timer, *status_timer, *stop_timer, *maintain_timer;

        RuleSet *rules;
        Store *store;
        Remote *remote; /* --store=redis...: NULL for the local store alone */
        Listener **listeners;
        size_t n_listeners;
        Server *server;
        Metrics *metrics;
        Statsd *statsd;          /* NULL: not configured */
        Http *http;              /* NULL: not configured */
        HttpApiServer *http_api; /* NULL: not configured */

        bool stopping;
        bool reload_failed;
        bool reload_wanted;       /* SIGHUP during a batch in flight: new batches held, reloaded once
                                   * none is in flight (manager_reload_when_idle()) */
        bool checkpoint_failing;  /* the last checkpoint failed: logged once per change */
        bool journal_failing;     /* no room for a journal segment: logged once per change */
        uint64_t journal_damaged; /* damaged journal records logged (store_journal_damage()) */
        char reload_error[512];   /* first diag message of the failed reload */

        uint64_t status_hits; /* hits at the last STATUS, for the rate */
        uint64_t status_usec; /* CLOCK_MONOTONIC of the last STATUS */
};

/* Sends STATUS=<text> (printf-formatted), then the assignments in extra ("" or lines of
 * NAME=value, each ending in a newline). The text quotes what came from outside: the paths
 * given on the command line, a configuration's words, errors of the store and of Redis. A
 * line break there would end STATUS= and start an assignment of its choosing (READY=1,
 * MAINPID=...), so control bytes become '?'; a text cut to the buffer is cut between
 * characters (the datagram is UTF-8). */
static void notify_status(const char *extra, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void notify_status(const char *extra, const char *fmt, ...) {
        char text[2048];
        va_list ap;
        int n;

        va_start(ap, fmt);
        n = vsnprintf(text, sizeof text, fmt, ap);
        va_end(ap);
        if (n < 0)
                return;
        if ((size_t) n >= sizeof text)
                text[utf8_boundary(text, sizeof text - 1)] = '\0';
        text_mask_controls(text);
        (void) sd_notifyf(false, "%sSTATUS=%s", extra, text);
}

/* Keeps msg as the reload's error for STATUS=, cut at a character boundary when longer than
 * the buffer: the datagram is UTF-8 text. */
static void set_reload_error(Manager *m, const char *msg) {
        size_t n = strlen(msg);

        if (n >= sizeof m->reload_error)
                n = utf8_boundary(msg, sizeof m->reload_error - 1);
        memcpy(m->reload_error, msg, n);
        m->reload_error[n] = '\0';
}

/* Loads path; on failure logs every problem and keeps the first for STATUS. */
static int manager_load_rules(Manager *m, RuleSet **ret) {
        const char *path = m->settings.config_path;
        Diag diag;
        int r;

        diag_init(&diag, path);
        r = config_load(path, ret, &diag);
        if (r >= 0)
                remote_warn_rules(&m->settings.remote, *ret);
        if (r < 0) {
                for (size_t i = 0; i < diag.n_messages; i++)
                        log_error("%s", diag.messages[i]);
                if (diag.n_dropped > 0)
                        log_error("%s: ... and %zu more errors", path, diag.n_dropped);
                if (diag.n_messages > 0)
                        set_reload_error(m, diag.messages[0]);
                else {
                        char msg[PATH_MAX + 128]; /* the path whole in the log */

                        snprintf(msg, sizeof msg, "%s: %s", path, strerror(-r));
                        set_reload_error(m, msg);
                        log_error("%s", msg);
                }
        }
        diag_done(&diag);
        return r;
}

static void manager_notify_status(Manager *m) {
        const ServerCounters *k = server_counters(m->server);
        uint64_t now = clock_usec(CLOCK_MONOTONIC);
        uint64_t hits = metrics_hits_total(m->metrics, METRICS_STATUS_ACCEPTED) +
                        metrics_hits_total(m->metrics, METRICS_STATUS_REJECTED);
        double rate = 0;

        if (m->status_usec > 0 && now > m->status_usec)
                rate = (double) (hits - m->status_hits) * 1e6 / (double) (now - m->status_usec);
        m->status_hits = hits;
        m->status_usec = now;

        if (m->reload_failed)
                notify_status("", "Reload failed: %s; serving previous rules", m->reload_error);
        else if (m->stopping)
                notify_status("", "Stopping, %" PRIu64 " connections left", k->connections_current);
        else {
                StoreStats st = {};
                char ckpt[640], remote[300] = "", damaged[64] = "", cap[96] = "";

                (void) store_get_stats(m->store, &st);
                if (st.journal_damaged_records > 0)
                        snprintf(damaged, sizeof damaged, " (%" PRIu64 " damaged records skipped at start)",
                                 st.journal_damaged_records);
                if (st.checkpoint_failing)
                        snprintf(ckpt, sizeof ckpt, "checkpoint failing (%" PRIu64 " failures): %s",
                                 st.checkpoint_failures, store_checkpoint_error(m->store));
                else if (st.commits == 0)
                        snprintf(ckpt, sizeof ckpt, "no checkpoint since start");
                else
                        snprintf(ckpt, sizeof ckpt, "last checkpoint %" PRIu64 " s ago",
                                 st.checkpoint_age_usec / 1000000);
                if (st.counters_max > 0)
                        snprintf(cap, sizeof cap, " (max %" PRIu64 ", %" PRIu64 " new refused)",
                                 st.counters_max, st.refused_limit);
                notify_status("",
                              "Serving %zu rules on %zu listeners, %" PRIu64
                              " connections, %.0f hits/s, %" PRIu64 " counters%s, journal %" PRIu64
                              " MiB%s%s, %s%s%s",
                              m->rules->n_rules, m->n_listeners, k->connections_current, rate, st.counters,
                              cap, st.journal_bytes >> 20, st.journal_failing ? " (disk full)" : "", damaged,
                              ckpt, m->remote ? ", " : "",
                              m->remote ? remote_status(m->remote, remote, sizeof remote) : "");
        }
}

static int manager_reload(Manager *m) {
        RuleSet *rules = NULL;
        char summary[256], extra[64];
        int r;

        snprintf(extra, sizeof extra, "RELOADING=1\nMONOTONIC_USEC=%" PRIu64 "\n",
                 clock_usec(CLOCK_MONOTONIC));
        notify_status(extra, "Reloading %s", m->settings.config_path);
        log_info("Reloading %s", m->settings.config_path);

        r = manager_load_rules(m, &rules);
        if (r < 0) {
                m->reload_failed = true;
                metrics_count_reload(m->metrics, false);
                log_error("Reload failed: %s; serving previous rules", m->reload_error);
        } else {
                /* Label slots first, so that no hit on the new rules is counted on the old map;
                 * a failure only costs per-label counts (they go unlabelled). */
                if (metrics_set_rules(m->metrics, rules) < 0)
                        log_warning("Out of memory for per-label metrics, counting new rules unlabelled");
                metrics_count_reload(m->metrics, true);
                /* Between batches: nothing points into the old set any more. */
                server_set_rules(m->server, rules);
                ruleset_free(m->rules);
                m->rules = rules;
                m->reload_failed = false;
                log_info("Reloaded %s: %s", m->settings.config_path,
                         config_summary(rules, summary, sizeof summary));
        }

        (void) sd_notify(false, "READY=1");
        manager_notify_status(m);
        return r;
}

/* The batches were held for a wanted reload and none is in flight any more (the server's
 * idle callback, the maintenance and the store's handler): reload, then let them run. */
static void manager_reload_when_idle(void *userdata) {
        Manager *m = userdata;

        if (!m->reload_wanted || m->stopping || server_batch_pending(m->server))
                return;
        m->reload_wanted = false;
        (void) manager_reload(m);
        server_hold_batches(m->server, false, NULL, NULL);
}

static int manager_stop_timeout(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;

        log_warning("Clients did not take their last replies within %llu s, closing them",
                    (unsigned long long) (MANAGER_STOP_TIMEOUT_USEC / 1000000ULL));
        return sd_event_exit(m->event, 0);
}

static void manager_stop(Manager *m, const char *why) {
        int r;

        if (m->stopping) {
                log_info("Second %s, stopping now", why);
                (void) sd_event_exit(m->event, 0);
                return;
        }
        m->stopping = true;
        if (m->reload_wanted) {
                /* every request read is answered: the held batches run, no reload */
                m->reload_wanted = false;
                server_hold_batches(m->server, false, NULL, NULL);
        }
        metrics_set_serving(m->metrics, false);
        log_info("Received %s, stopping", why);
        (void) sd_notify(false, "STOPPING=1");

        for (size_t i = 0; i < m->n_listeners; i++)
                listener_free(m->listeners[i]);
        m->n_listeners = 0;
        http_api_server_stop(m->http_api);

        r = sd_event_add_time_relative(m->event, &m->stop_timer, CLOCK_MONOTONIC, MANAGER_STOP_TIMEOUT_USEC,
                                       100 * 1000, manager_stop_timeout, m);
        if (r < 0)
                log_warning_errno(r, "Failed to arm the stop timer, ignoring: %m");

        server_stop(m->server); /* exits the loop once every connection is done */
}

static int manager_signal_handler(sd_event_source *s, const struct signalfd_siginfo *si, void *userdata) {
        Manager *m = userdata;

        switch (si->ssi_signo) {
        case SIGHUP:
                if (m->stopping)
                        break;
                if (m->reload_wanted)
                        break; /* one is coming */
                if (server_batch_pending(m->server)) {
                        /* The batch in flight points into the rules: no new batch until every
                         * one in flight is answered, then the reload. */
                        m->reload_wanted = true;
                        server_hold_batches(m->server, true, manager_reload_when_idle, m);
                } else
                        (void) manager_reload(m);
                break;
        case SIGTERM:
                manager_stop(m, "SIGTERM");
                break;
        case SIGINT:
                manager_stop(m, "SIGINT");
                break;
        }
        return 0;
}

static int manager_sync_handler(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;
        int r;

        r = store_sync(m->store);
        if (r < 0)
                log_warning_errno(r, "Failed to sync the store, retrying: %m");
        /* From now, not from when it was due: after a stall or a suspend, no catch-up burst. */
        return sd_event_source_set_time_relative(s, m->settings.store.sync_interval_usec);
}

/* Store gauges for the metrics, refreshed with every sweep (memory and journal counts, no I/O),
 * and the Redis store's counters when there is one. */
static void manager_publish_store_stats(Manager *m) {
        StoreStats st;
        if (store_get_stats(m->store, &st) >= 0)
                metrics_set_store(m->metrics, &st);
        if (m->remote)
                remote_publish(m->remote);
}

static int manager_sweep_handler(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;
        size_t deleted = 0;
        int r;

        /* One short step per run, then back to the loop: with a backlog (the step deleted
         * counters and the pass over the table is not over) the next step follows 1 ms later,
         * every batch of requests that became ready in between served first, so sweeping a
         * million expired counters never stalls clients. A finished pass waits the interval. */
        r = store_sweep(m->store, clock_usec(CLOCK_REALTIME), STORE_SWEEP_CHUNK_DEFAULT, &deleted);
        if (deleted > 0)
                log_debug("Swept %zu expired counters", deleted);
        if (r > 0)
                return sd_event_source_set_time_relative(s, MANAGER_SWEEP_BACKLOG_DELAY_USEC);

        manager_publish_store_stats(m);
        return sd_event_source_set_time_relative(s, m->settings.sweep_interval_usec);
}

/* The store's group commit (sync=always) synced: the batches it covers are answered. A reload
 * that waited for the batches in flight runs as soon as none is left. */
static int manager_store_handler(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Manager *m = userdata;
        int r;

        r = store_process(m->store);
        if (r < 0)
                log_warning_errno(r, "Failed to complete the store's batches, retrying: %m");
        manager_reload_when_idle(m);
        return 0;
}

/* The journal's segments could not be preallocated (a full disk, found at start or by the
 * maintenance tick, which retries every time): logged once per change of state. */
static void manager_journal_state(Manager *m, const StoreStats *st) {
        if (st->journal_failing && !m->journal_failing)
                log_warning("No room for the journal's %s segment, retrying every second; meanwhile hits "
                            "that must be journaled answer \"store full\"%s: %s",
                            st->journal_ready ? "next" : "first",
                            st->journal_ready ? " once the current segment is full" : "",
                            store_journal_error(m->store));
        else if (!st->journal_failing && m->journal_failing)
                log_info("The journal has room again: hits are journaled");
        m->journal_failing = st->journal_failing;
}

/* The background checkpoint: reaped, started, the journal's next segment prepared. A failed
 * checkpoint changes nothing for clients (hits are answered from memory and journaled); it is
 * logged once per change of state, shown in STATUS and counted in the metrics. */
static int manager_maintain_handler(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;
        StoreStats st;
        int r;

        manager_reload_when_idle(m);
        if (m->http)
                (void) http_expire(m->http, clock_usec(CLOCK_MONOTONIC)); /* slow HTTP clients */
        r = store_maintain(m->store, clock_usec(CLOCK_REALTIME));
        if (store_get_stats(m->store, &st) >= 0) {
                if (st.journal_damaged_records > m->journal_damaged)
                        log_error("Journal damaged: %s", store_journal_damage(m->store));
                m->journal_damaged = st.journal_damaged_records;
                manager_journal_state(m, &st);
                if (st.checkpoint_failing && !m->checkpoint_failing)
                        log_error("Checkpoint failed, keeping the journal and retrying: %s",
                                  store_checkpoint_error(m->store));
                else if (!st.checkpoint_failing && m->checkpoint_failing)
                        log_info("Checkpoint succeeded again");
                else if (r > 0 && !st.checkpoint_failing)
                        log_debug("Checkpoint written in %" PRIu64 " ms, data.mdb %" PRIu64 " bytes",
                                  st.checkpoint_duration_usec / 1000, st.file_size);
                if (r > 0)
                        metrics_set_store(m->metrics, &st);
                if (st.checkpoint_failing != m->checkpoint_failing || (r > 0 && st.commits == 1)) {
                        m->checkpoint_failing = st.checkpoint_failing;
                        manager_notify_status(m); /* at once, not at the next refresh */
                }
        }
        return sd_event_source_set_time_relative(s, MANAGER_MAINTAIN_INTERVAL_USEC);
}

static int manager_status_handler(sd_event_source *s, uint64_t usec, void *userdata) {
        Manager *m = userdata;

        manager_notify_status(m);
        return sd_event_source_set_time_relative(s, MANAGER_STATUS_INTERVAL_USEC);
}

static int manager_add_listener(Manager *m, Listener *l) {
        Listener **a = realloc(m->listeners, (m->n_listeners + 1) * sizeof *a);
        if (!a) {
                listener_free(l);
                return log_error_errno(ENOMEM, "Out of memory");
        }
        m->listeners = a;
        m->listeners[m->n_listeners++] = l;
        return 0;
}

/* The HTTP API, started at its first listener. Returns 0 or -errno (logged). */
static int manager_http_api(Manager *m) {
        int r;

        if (m->http_api)
                return 0;
        r = http_api_server_new(m->event, m->server, &m->http_api);
        if (r < 0)
                return log_error_errno(r, "Failed to start the HTTP API: %m");
        return 0;
}

/* A socket passed for the HTTP API (its name: listen_fdname_is_http_api()). */
static int manager_adopt_http_api(Manager *m, int fd, const char *name) {
        int r = manager_http_api(m);

        if (r < 0)
                return r;
        r = http_api_server_adopt(m->http_api, fd, name);
        if (r < 0)
                return log_error_errno(r, "Socket fd %d (%s) passed for the HTTP API is not usable: %m", fd,
                                       name);
        log_info("Serving the HTTP API on fd %d (%s) (socket activation)", fd, name);
        return 0;
}

/* The --http-api listeners. */
static int manager_listen_http_api(Manager *m) {
        for (size_t i = 0; i < m->settings.n_http_api; i++) {
                const ListenAddress *a = &m->settings.http_api[i];
                char errbuf[256] = "", name[LISTEN_ADDRESS_MAX + 8];
                int r = manager_http_api(m);

                if (r < 0)
                        return r;
                listen_address_to_string(a, name, sizeof name);
                r = http_api_server_listen(m->http_api, a,
                                           a->admin ? m->settings.admin_unix_mode : m->settings.unix_mode,
                                           errbuf, sizeof errbuf);
                if (r < 0)
                        return log_error_errno(r, "Failed to serve the HTTP API on %s: %s", name, errbuf);
                log_info("Serving the HTTP API on %s", name);
        }
        return 0;
}

static int manager_open_listeners(Manager *m) {
        char **names = NULL;
        int n, r = 0;

        n = sd_listen_fds_with_names(true, &names);
        if (n < 0)
                return log_error_errno(n, "Failed to receive sockets from the service manager: %m");

        if (n > 0) {
                for (int i = 0; i < n; i++) {
                        int fd = SD_LISTEN_FDS_START + i;
                        const char *name = names ? names[i] : NULL;
                        Listener *l = NULL;

                        if (r >= 0 && listen_fdname_is_http_api(name))
                                r = manager_adopt_http_api(m, fd, name);
                        else if (r >= 0) {
                                r = listener_adopt(m->event, fd, name, m->server, &l);
                                if (r < 0)
                                        log_error_errno(r,
                                                        "Socket fd %d (%s) passed by the service manager is "
                                                        "not usable: %m",
                                                        fd, name ?: "unnamed");
                                else {
                                        r = manager_add_listener(m, l);
                                        if (r >= 0)
                                                log_info("Listening on %s (socket activation)",
                                                         listener_name(l));
                                }
                        }
                        free(names ? names[i] : NULL);
                }
                free(names);
                return r;
        }
        free(names);

        for (size_t i = 0; i < m->settings.n_listen; i++) {
                char errbuf[256] = "", name[LISTEN_ADDRESS_MAX + 8];
                Listener *l = NULL;

                listen_address_to_string(&m->settings.listen[i], name, sizeof name);
                r = listener_new(m->event, &m->settings.listen[i],
                                 m->settings.listen[i].admin ? m->settings.admin_unix_mode
                                                             : m->settings.unix_mode,
                                 m->server, &l, errbuf, sizeof errbuf);
                if (r < 0)
                        return log_error_errno(r, "Failed to listen on %s: %s", name, errbuf);
                r = manager_add_listener(m, l);
                if (r < 0)
                        return r;
                log_info("Listening on %s", name);
        }
        return manager_listen_http_api(m);
}

static int manager_add_periodic(Manager *m, sd_event_source **s, uint64_t interval,
                                sd_event_time_handler_t cb) {
        /* 10% slack, at most 50 ms: explicit, since 0 would mean sd-event's 250 ms. */
        uint64_t accuracy = interval / 10 > 50000 ? 50000 : (interval / 10 ?: 1);
        int r;

        r = sd_event_add_time_relative(m->event, s, CLOCK_MONOTONIC, interval, accuracy, cb, m);
        if (r >= 0)
                r = sd_event_source_set_enabled(*s, SD_EVENT_ON);
        return r;
}

/* Signals arrive through signalfd; SIGPIPE never (we send with MSG_NOSIGNAL, but a stray
 * write must not kill the daemon). Returns 0 or -errno (logged). */
static int manager_watch_signals(Manager *m) {
        sigset_t mask;
        int r;

        signal(SIGPIPE, SIG_IGN);
        sigemptyset(&mask);
        sigaddset(&mask, SIGTERM);
        sigaddset(&mask, SIGINT);
        sigaddset(&mask, SIGHUP);
        if (sigprocmask(SIG_BLOCK, &mask, NULL) < 0)
                return log_error_errno(errno, "Failed to block signals: %m");
        r = sd_event_add_signal(m->event, &m->sigterm, SIGTERM, manager_signal_handler, m);
        if (r >= 0)
                r = sd_event_add_signal(m->event, &m->sigint, SIGINT, manager_signal_handler, m);
        if (r >= 0)
                r = sd_event_add_signal(m->event, &m->sighup, SIGHUP, manager_signal_handler, m);
        if (r < 0)
                return log_error_errno(r, "Failed to watch signals: %m");
        return 0;
}

/* The metrics' readers that were asked for: statsd and the HTTP endpoint. Returns 0 or
 * -errno (logged). */
static int manager_start_exporters(Manager *m) {
        char errbuf[512] = "";
        int r;

        if (m->settings.statsd.host) {
                r = statsd_new(m->event, &m->settings.statsd, m->metrics, &m->statsd, errbuf, sizeof errbuf);
                if (r < 0)
                        return log_error_errno(r, "Failed to set up statsd: %s", errbuf);
                log_info("Sending statsd metrics to %s:%u over %s every %" PRIu64 " ms",
                         m->settings.statsd.host, m->settings.statsd.port,
                         m->settings.statsd.tcp ? "TCP" : "UDP",
                         (uint64_t) (m->settings.statsd.interval_usec ?: STATSD_INTERVAL_DEFAULT_USEC) /
                                 1000);
        }
        if (m->settings.http.metrics_path) {
                r = http_new(&m->settings.http, m->metrics, &m->http, errbuf, sizeof errbuf);
                if (r < 0)
                        return log_error_errno(r, "Failed to set up the HTTP endpoint: %s", errbuf);
                log_info("Serving Prometheus metrics on http://%s%s%s:%u%s",
                         strchr(m->settings.http.address ?: HTTP_ADDRESS_DEFAULT, ':') ? "[" : "",
                         m->settings.http.address ?: HTTP_ADDRESS_DEFAULT,
                         strchr(m->settings.http.address ?: HTTP_ADDRESS_DEFAULT, ':') ? "]" : "",
                         http_port(m->http), m->settings.http.metrics_path);
        }
        return 0;
}

/* The periodic jobs: store sync (when the store needs one), sweeper, STATUS. Returns 0 or
 * -errno (logged). */
static int manager_add_timers(Manager *m) {
        int r;

        if (m->settings.store.sync == STORE_SYNC_PERIODIC) {
                r = manager_add_periodic(m, &m->sync_timer, m->settings.store.sync_interval_usec,
                                         manager_sync_handler);
                if (r < 0)
                        return log_error_errno(r, "Failed to set up the sync timer: %m");
        }
        r = manager_add_periodic(m, &m->sweep_timer, m->settings.sweep_interval_usec, manager_sweep_handler);
        if (r >= 0)
                r = manager_add_periodic(m, &m->maintain_timer, MANAGER_MAINTAIN_INTERVAL_USEC,
                                         manager_maintain_handler);
        if (r >= 0)
                r = manager_add_periodic(m, &m->status_timer, MANAGER_STATUS_INTERVAL_USEC,
                                         manager_status_handler);
        if (r < 0)
                return log_error_errno(r, "Failed to set up timers: %m");
        return 0;
}

int manager_new(const ManagerSettings *settings, Manager **ret) {
        char summary[256], errbuf[512] = "", extra[64];
        StoreStats st;
        Manager *m;
        int r;

        m = calloc(1, sizeof *m);
        if (!m)
                return log_error_errno(ENOMEM, "Out of memory");
        m->settings = *settings;
        if (m->settings.sweep_interval_usec == 0)
                m->settings.sweep_interval_usec = MANAGER_SWEEP_INTERVAL_DEFAULT_USEC;
        if (m->settings.store.sync_interval_usec == 0)
                m->settings.store.sync_interval_usec = STORE_SYNC_INTERVAL_DEFAULT_USEC;

        r = manager_load_rules(m, &m->rules);
        if (r < 0)
                goto fail;
        r = metrics_new(&m->metrics);
        if (r >= 0)
                r = metrics_set_rules(m->metrics, m->rules);
        if (r < 0) {
                log_error_errno(r, "Failed to set up metrics: %m");
                goto fail;
        }
        log_info("Loaded %s: %s", settings->config_path, config_summary(m->rules, summary, sizeof summary));

        /* LMDB keeps no checksums: read the whole checkpoint in a child first, so that a damaged
         * one is refused here rather than crashing us now or at some later HIT. That read
         * can outlast systemd's start timeout on a large, uncached database: ask for time. */
        snprintf(extra, sizeof extra, "EXTEND_TIMEOUT_USEC=%llu\n",
                 (unsigned long long) (STORE_VERIFY_TIMEOUT_SEC + 30) * 1000000ULL);
        notify_status(extra, "Checking the database in %s", m->settings.store.path);
        r = store_verify(m->settings.store.path, errbuf, sizeof errbuf);
        if (r >= 0)
                r = store_open(&m->settings.store, &m->store, errbuf, sizeof errbuf);
        if (r < 0) {
                log_error_errno(r, "Failed to open store '%s': %s", m->settings.store.path,
                                errbuf[0] ? errbuf : strerror(-r));
                goto fail;
        }
        if (store_get_stats(m->store, &st) >= 0) {
                manager_journal_state(m, &st);                   /* a full disk: started without a segment */
                m->journal_damaged = st.journal_damaged_records; /* logged just below */
        }
        if (store_journal_damage(m->store)[0])
                log_error("Journal damaged: %s", store_journal_damage(m->store));

        r = sd_event_new(&m->event);
        if (r < 0) {
                log_error_errno(r, "Failed to create the event loop: %m");
                goto fail;
        }

        r = manager_watch_signals(m);
        if (r < 0)
                goto fail;

        r = server_new(m->event, &settings->server, &m->server);
        if (r < 0) {
                log_error_errno(r, "Failed to set up the server: %m");
                goto fail;
        }
        server_set_rules(m->server, m->rules);
        server_set_store(m->server, m->store);
        if (settings->remote.url) {
                r = remote_new(m->event, &settings->remote, m->store, m->metrics, &m->remote);
                if (r < 0)
                        goto fail;
                server_set_backend(m->server, remote_submit_func(), remote_backend(m->remote));
        }
        if (store_event_fd(m->store) >= 0) {
                r = sd_event_add_io(m->event, &m->store_source, store_event_fd(m->store), EPOLLIN,
                                    manager_store_handler, m);
                if (r < 0) {
                        log_error_errno(r, "Failed to watch the store: %m");
                        goto fail;
                }
        }
        server_set_metrics(m->server, m->metrics);
        manager_publish_store_stats(m);

        r = manager_start_exporters(m);
        if (r >= 0)
                r = manager_open_listeners(m);
        if (r >= 0)
                r = manager_add_timers(m);
        if (r < 0)
                goto fail;

        r = sd_event_set_watchdog(m->event, true);
        if (r < 0) {
                log_error_errno(r, "Failed to enable the watchdog: %m");
                goto fail;
        }

        *ret = m;
        return 0;
fail:
        manager_free(m);
        return r;
}

int manager_run(Manager *m) {
        int r;

        (void) sd_notify(false, "READY=1");
        metrics_set_serving(m->metrics, true);
        manager_notify_status(m);
        log_info("Serving %zu rules on %zu listeners", m->rules->n_rules, m->n_listeners);

        r = sd_event_loop(m->event);
        if (r < 0)
                return log_error_errno(r, "Event loop failed: %m");
        return r > 0 ? -r : 0;
}

Manager *manager_free(Manager *m) {
        if (!m)
                return NULL;

        /* The HTTP thread reads the metrics: stop it first. statsd sends a last flush. */
        http_free(m->http);
        statsd_free(m->statsd);

        for (size_t i = 0; i < m->n_listeners; i++)
                listener_free(m->listeners[i]);
        free(m->listeners);
        /* Before the local store: what is in flight on Redis is failed into the fallback,
         * which may hand it to the local store. */
        remote_close(m->remote);
        sd_event_source_disable_unref(m->store_source);
        if (m->store) {
                /* Before the server: batches still in flight (the stop timeout) are completed
                 * into their connections, which must exist. */
                int r = store_finish(m->store); /* completes every batch, the last checkpoint */

                if (r < 0)
                        log_error_errno(r,
                                        "The last checkpoint failed, the journal will be replayed at the "
                                        "next start: %s",
                                        store_checkpoint_error(m->store));
                store_close(m->store); /* syncs */
                m->store = NULL;
                log_debug("Store closed");
        }
        /* After the local store: the fallback's hits it completed (sync=always) were in it. */
        m->remote = remote_free(m->remote);
        http_api_server_free(m->http_api); /* no batch in flight now; before the server it schedules into */
        server_free(m->server);

        sd_event_source_disable_unref(m->sigterm);
        sd_event_source_disable_unref(m->sigint);
        sd_event_source_disable_unref(m->sighup);
        sd_event_source_disable_unref(m->sync_timer);
        sd_event_source_disable_unref(m->sweep_timer);
        sd_event_source_disable_unref(m->maintain_timer);
        sd_event_source_disable_unref(m->status_timer);
        sd_event_source_disable_unref(m->stop_timer);
        sd_event_unref(m->event);

        ruleset_free(m->rules);
        metrics_free(m->metrics);
        free(m);
        return NULL;
}
