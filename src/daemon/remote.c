/* SPDX-License-Identifier: MIT */
/* remote.c: the Redis/Valkey store in the daemon's loop; see remote.h. */

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <time.h>

#include "log.h"
#include "remote.h"
#include "batch.h"
#include "core/config.h"
#include "server.h"
#include "shared/clock.h"
#include "store/redis-store.h"
#include "store/store-fallback.h"

typedef struct RemoteWatch {
        int fd; /* -1: free */
        sd_event_source *source;
} RemoteWatch;

struct Remote {
        sd_event *event;
        Metrics *metrics;
        const char *url; /* the settings' */
        RedisIo io;      /* must outlive the RedisStore */
        RedisStore *redis;
        StoreFallback *fallback;
        RemoteWatch *watches; /* one per socket the store watches (a cluster's nodes, a sentinel) */
        size_t n_watches;
        sd_event_source *timer;
        RedisStoreState state; /* as last logged */
        bool state_known;
        uint64_t switches; /* Sentinel: primary switches as last logged */
};

static void remote_check_state(Remote *r);

static int remote_io_handler(sd_event_source *s, int fd, uint32_t revents, void *userdata) {
        Remote *r = userdata;

        (void) s;
        (void) redis_store_on_io(r->redis, fd, revents);
        remote_check_state(r);
        return 0;
}

static int remote_timer_handler(sd_event_source *s, uint64_t usec, void *userdata) {
        Remote *r = userdata;

        (void) s;
        (void) usec; /* when it was due; the store wants now (a late loop turn is late) */
        (void) redis_store_on_timer(r->redis, clock_usec(CLOCK_MONOTONIC));
        remote_check_state(r);
        return 0;
}

/* RedisIo.watch: one io source per socket, its events changed in place. */
static int remote_watch(void *userdata, int fd, uint32_t events) {
        Remote *r = userdata;
        RemoteWatch *w = NULL, *free_slot = NULL;
        int k;

        for (size_t i = 0; i < r->n_watches; i++) {
                if (r->watches[i].fd == fd) {
                        w = r->watches + i;
                        break;
                }
                if (r->watches[i].fd < 0 && !free_slot)
                        free_slot = r->watches + i;
        }
        if (events == 0) {
                if (w) {
                        w->source = sd_event_source_disable_unref(w->source);
                        w->fd = -1;
                }
                return 0;
        }
        if (w)
                return sd_event_source_set_io_events(w->source, events);
        if (!free_slot) {
                /* as many as the store has sockets: a cluster of many primaries has one each */
                size_t n = r->n_watches ? r->n_watches * 2 : 8;
                RemoteWatch *p = realloc(r->watches, n * sizeof *p);

                if (!p)
                        return -ENOMEM;
                for (size_t i = r->n_watches; i < n; i++)
                        p[i] = (RemoteWatch){ .fd = -1 };
                r->watches = p;
                free_slot = p + r->n_watches;
                r->n_watches = n;
        }
        k = sd_event_add_io(r->event, &free_slot->source, fd, events, remote_io_handler, r);
        if (k < 0)
                return k;
        free_slot->fd = fd;
        return 0;
}

/* RedisIo.timer: the store's next deadline (CLOCK_MONOTONIC µs), 0 for none. */
static int remote_timer(void *userdata, uint64_t at_usec) {
        Remote *r = userdata;
        int k;

        if (at_usec == 0)
                return r->timer ? sd_event_source_set_enabled(r->timer, SD_EVENT_OFF) : 0;
        if (!r->timer)
                return sd_event_add_time(r->event, &r->timer, CLOCK_MONOTONIC, at_usec, 1000,
                                         remote_timer_handler, r);
        k = sd_event_source_set_time(r->timer, at_usec);
        if (k >= 0)
                k = sd_event_source_set_enabled(r->timer, SD_EVENT_ONESHOT);
        return k;
}

int remote_new(sd_event *event, const RemoteSettings *settings, Store *local, Metrics *metrics,
               Remote **ret) {
        Remote *r;
        char errbuf[512] = "";
        int k;

        r = calloc(1, sizeof *r);
        if (!r)
                return log_error_errno(ENOMEM, "Out of memory");
        r->event = event;
        r->metrics = metrics;
        r->url = settings->url;
        r->io = (RedisIo){ .userdata = r, .watch = remote_watch, .timer = remote_timer };

        RedisStoreOptions o = {
                .url = settings->url,
                .password = settings->password,
                .timeout_usec = settings->timeout_usec ?: REMOTE_TIMEOUT_DEFAULT_USEC,
        };
        k = redis_store_open(&o, &r->io, &r->redis, errbuf, sizeof errbuf);
        if (k < 0) {
                log_error_errno(k, "Failed to set up the store %s: %s", settings->url,
                                errbuf[0] ? errbuf : strerror(-k));
                remote_free(r);
                return k;
        }
        StoreFallbackOptions fo = {
                .primary = redis_store_submit,
                .primary_backend = r->redis,
                .local = store_submit_backend,
                .local_backend = local,
                .default_policy = settings->on_error ?: RULE_ON_ERROR_LOCAL,
                .max_batches = SERVER_BATCHES,
                .max_hits = BATCH_HITS_MAX,
        };
        k = store_fallback_new(&fo, &r->fallback);
        if (k < 0) {
                log_error_errno(k, "Failed to set up the store %s: %m", settings->url);
                remote_free(r);
                return k;
        }
        log_info("Counters in %s (on error: %s, timeout %" PRIu64 " ms)", settings->url,
                 rule_on_error_to_string(fo.default_policy), o.timeout_usec / 1000);
        *ret = r;
        return 0;
}

void remote_close(Remote *r) {
        /* completes what is in flight, through the fallback */
        if (r)
                r->redis = redis_store_close(r->redis);
}

Remote *remote_free(Remote *r) {
        if (!r)
                return NULL;
        remote_close(r);
        store_fallback_free(r->fallback);
        for (size_t i = 0; i < r->n_watches; i++)
                sd_event_source_disable_unref(r->watches[i].source);
        free(r->watches);
        sd_event_source_disable_unref(r->timer);
        free(r);
        return NULL;
}

StoreSubmitFunc remote_submit_func(void) {
        return store_fallback_submit;
}

void *remote_backend(Remote *r) {
        return r->fallback;
}

/* Logs a change between answering and not: once per change, never per request or per
 * reconnect attempt (down, connecting, breaker-open and failing-over follow each other while it
 * is out), and each move to a new primary the sentinels named; publishes the state at once. Cheap (no
 * counters copied): runs after every event of the store's sockets and timer; the counters are refreshed by
 * remote_publish(). */
static void remote_check_state(Remote *r) {
        RedisStoreState state = redis_store_state(r->redis);
        bool up = state == REDIS_STORE_CONNECTED;
        uint64_t switches = redis_store_primary_switches(r->redis);

        if (switches != r->switches) {
                RedisStoreStats st;

                redis_store_get_stats(r->redis, &st);
                log_notice("Store %s: the sentinels named a new primary, %s: the store moved there", r->url,
                           st.address);
                r->switches = switches;
        }

        if (r->state_known && up == (r->state == REDIS_STORE_CONNECTED))
                return;
        if (r->state_known || up) {
                RedisStoreStats st;

                redis_store_get_stats(r->redis, &st);
                if (up)
                        log_info("Store %s is up (%s)", r->url, st.address);
                else
                        log_warning("Store %s is %s, hits are decided by onBackendError: %s", r->url,
                                    redis_store_state_to_string(state),
                                    st.last_error[0] ? st.last_error : "no reply yet");
        }
        r->state = state;
        r->state_known = true;
        remote_publish(r);
}

void remote_publish(Remote *r) {
        RedisStoreStats st;
        StoreFallbackStats fb;
        MetricsBackend mb = { 0 };

        redis_store_get_stats(r->redis, &st);
        store_fallback_get_stats(r->fallback, &fb);
        mb.up = st.state == REDIS_STORE_CONNECTED;
        mb.errors[METRICS_BACKEND_TIMEOUT] = st.errors_timeout;
        mb.errors[METRICS_BACKEND_CONNECTION] = st.errors_connection + st.errors_refused;
        mb.errors[METRICS_BACKEND_PROTOCOL] = st.errors_protocol;
        mb.errors[METRICS_BACKEND_SERVER] = st.errors_server;
        for (size_t i = 0; i < _RULE_ON_ERROR_MAX; i++)
                mb.fallbacks[i] = fb.fallbacks[i];
        mb.rtt_usec_sum = st.rtt_sum_usec;
        mb.rtt_count = st.rtt_count;
        mb.reconnects = st.reconnects;
        mb.noscript_reloads = st.noscript_reloads;
        mb.redirects = st.redirects_moved + st.redirects_ask;
        metrics_set_backend(r->metrics, &mb);
}

const char *remote_status(Remote *r, char *buf, size_t size) {
        RedisStoreStats st;
        StoreFallbackStats fb;

        redis_store_get_stats(r->redis, &st);
        store_fallback_get_stats(r->fallback, &fb);
        if (st.state == REDIS_STORE_CONNECTED)
                snprintf(buf, size, "redis %s up, %" PRIu64 " fallbacks", st.address, fb.failed_hits);
        else
                snprintf(buf, size, "redis %s%s%s%s, %" PRIu64 " fallbacks",
                         redis_store_state_to_string(st.state), st.last_error[0] ? " (" : "", st.last_error,
                         st.last_error[0] ? ")" : "", fb.failed_hits);
        return buf;
}

void remote_warn_rules(const RemoteSettings *settings, const RuleSet *rules) {
        RedisUrl url;
        Diag diag;

        if (!settings->url || redis_url_parse(settings->url, &url, NULL, 0) < 0 ||
            url.mode == REDIS_MODE_CLUSTER)
                return; /* a cluster uses divvyd's own keys */
        diag_init(&diag, rules->source);
        if (config_check_divvy_keys(rules, &diag) < 0)
                log_warning("Out of memory checking the rules' divvy keys, ignoring");
        for (size_t i = 0; i < diag.n_messages; i++)
                log_warning("%s", diag.messages[i]);
        if (diag.n_dropped > 0)
                log_warning("%s: ... and %zu more warnings", rules->source ? rules->source : "<config>",
                            diag.n_dropped);
        diag_done(&diag);
}
