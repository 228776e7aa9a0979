/*
 * rdkafka_produce: a librdkafka load generator for `headwater bench` (produce side only; the
 * benchmark consumes with kcat, also librdkafka from C).
 *
 * Sends up to COUNT records of SIZE bytes (null key, so librdkafka's default partitioner spreads
 * them over the topic's partitions) as fast as librdkafka takes them, for at most SECONDS. What
 * librdkafka still queues then is dropped (and not counted as sent); requests in flight get
 * SECONDS more. Then it prints one JSON line on stdout:
 *
 *   {"generator": "rdkafka-c", "librdkafka": "2.0.2", "sent": N, "acked": N, "errors": N,
 *    "first_error": "...", "bytes": N, "seconds": S, "cpu": S, "tx_requests": N, "tx_bytes": N}
 *
 * `seconds` runs from the first produce call to the last successful delivery report; `cpu` is this
 * process' CPU time (all threads) from the first produce call to the end of the run. `tx_requests` (Produce
 * requests) and `tx_bytes` (all bytes sent) come from librdkafka's statistics, summed over the
 * brokers, when statistics.interval.ms is set (a last snapshot is awaited after the run); they
 * give the average request size.
 *
 * Build: gcc -O2 -o rdkafka_produce rdkafka_produce.c -lrdkafka   (Debian: librdkafka-dev)
 * Usage: rdkafka_produce -b BOOTSTRAP -t TOPIC -n COUNT -s SIZE [-d SECONDS] [-X key=value]...
 */
#define _DEFAULT_SOURCE
#include <librdkafka/rdkafka.h>
#include <signal.h>
#include <sys/resource.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static long long acked, errors, purged;
static char first_error[256];
static double last_ack;
static int stats_on;
static long long stats_tx_requests = -1, stats_tx_bytes = -1;

static double cpu_seconds(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void on_delivery(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    (void)rk;
    (void)opaque;
    if (m->err == RD_KAFKA_RESP_ERR__PURGE_QUEUE) {
        purged++; /* still queued at the deadline: never sent */
    } else if (m->err) {
        if (errors++ == 0)
            snprintf(first_error, sizeof first_error, "%s", rd_kafka_err2str(m->err));
    } else {
        acked++;
        last_ack = now();
    }
}

/* Sum a numeric field over the "brokers" object of librdkafka's statistics JSON, without a JSON
 * parser: each broker object carries "txbytes": N and "req": {"Produce": N, ...} before its
 * next "nodeid". Only real brokers count (nodeid >= 0; bootstrap placeholders are -1). */
static long long sum_broker_field(const char *json, const char *field) {
    const char *p = strstr(json, "\"brokers\":");
    long long total = 0;
    char key[64], node[] = "\"nodeid\":";
    snprintf(key, sizeof key, "\"%s\":", field);
    if (!p)
        return -1;
    while ((p = strstr(p, node)) != NULL) {
        long nodeid = strtol(p + strlen(node), NULL, 10);
        const char *f = strstr(p, key);
        if (!f)
            break;
        if (nodeid >= 0)
            total += strtoll(f + strlen(key), NULL, 10);
        p = f + strlen(key);
    }
    return total;
}

static int on_stats(rd_kafka_t *rk, char *json, size_t len, void *opaque) {
    (void)rk;
    (void)len;
    (void)opaque;
    stats_tx_requests = sum_broker_field(json, "Produce");
    stats_tx_bytes = sum_broker_field(json, "txbytes");
    return 0; /* librdkafka frees json */
}

static void usage(void) {
    fprintf(stderr, "usage: rdkafka_produce -b BOOTSTRAP -t TOPIC -n COUNT -s SIZE [-d SECONDS] [-T RECORDS_PER_TXN] [-X key=value]...\n");
    exit(2);
}

int main(int argc, char **argv) {
    const char *bootstrap = NULL, *topic = NULL;
    long long count = 0;
    long size = 0;
    double max_seconds = 60.0;
    long per_txn = 0; /* -T: a transaction (needs -X transactional.id=...) committed every N records */
    char errstr[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    int opt;

    while ((opt = getopt(argc, argv, "b:t:n:s:d:T:X:")) != -1) {
        switch (opt) {
        case 'b': bootstrap = optarg; break;
        case 't': topic = optarg; break;
        case 'n': count = atoll(optarg); break;
        case 's': size = atol(optarg); break;
        case 'd': max_seconds = atof(optarg); break;
        case 'T': per_txn = atol(optarg); break;
        case 'X': {
            char *eq = strchr(optarg, '=');
            if (!eq)
                usage();
            *eq = '\0';
            if (strcmp(optarg, "statistics.interval.ms") == 0 && atoi(eq + 1) > 0)
                stats_on = 1;
            if (rd_kafka_conf_set(conf, optarg, eq + 1, errstr, sizeof errstr) != RD_KAFKA_CONF_OK) {
                fprintf(stderr, "rdkafka_produce: %s\n", errstr);
                return 2;
            }
            break;
        }
        default: usage();
        }
    }
    if (!bootstrap || !topic || count <= 0 || size < 0)
        usage();
    if (rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap, errstr, sizeof errstr) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "rdkafka_produce: %s\n", errstr);
        return 2;
    }
    rd_kafka_conf_set_dr_msg_cb(conf, on_delivery);
    rd_kafka_conf_set_stats_cb(conf, on_stats);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, errstr, sizeof errstr);
    if (!rk) {
        fprintf(stderr, "rdkafka_produce: %s\n", errstr);
        return 2;
    }
    char *value = malloc(size > 0 ? (size_t)size : 1);
    for (long i = 0; i < size; i++)
        value[i] = (char)('a' + i % 26);

    /* Wait for the topic's metadata so the clock does not include the bootstrap. */
    const struct rd_kafka_metadata *md = NULL;
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    for (int attempt = 0; attempt < 50; attempt++) {
        if (rd_kafka_metadata(rk, 0, rkt, &md, 2000) == RD_KAFKA_RESP_ERR_NO_ERROR) {
            int ok = md->topic_cnt == 1 && md->topics[0].err == 0 && md->topics[0].partition_cnt > 0;
            rd_kafka_metadata_destroy(md);
            if (ok)
                break;
        }
        usleep(100000);
    }

    rd_kafka_error_t *txn_error = NULL;
    if (per_txn > 0 && (txn_error = rd_kafka_init_transactions(rk, 60000)) != NULL) {
        fprintf(stderr, "rdkafka_produce: init_transactions: %s\n", rd_kafka_error_string(txn_error));
        return 1;
    }
    long long sent = 0;
    double start = now(), deadline = start + max_seconds, cpu0 = cpu_seconds();
    last_ack = start;
    if (per_txn > 0)
        txn_error = rd_kafka_begin_transaction(rk);
    while (sent < count && !txn_error) {
        rd_kafka_resp_err_t err =
            rd_kafka_producev(rk, RD_KAFKA_V_RKT(rkt), RD_KAFKA_V_VALUE(value, (size_t)size), RD_KAFKA_V_END);
        if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL) {
            rd_kafka_poll(rk, 1);
            if (now() > deadline)
                break;
            continue;
        }
        if (err) {
            if (errors++ == 0)
                snprintf(first_error, sizeof first_error, "produce: %s", rd_kafka_err2str(err));
            break;
        }
        sent++;
        if (per_txn > 0 && (sent % per_txn == 0 || sent == count)) {
            /* commit (it waits for every record of the transaction), then the next one */
            if ((txn_error = rd_kafka_commit_transaction(rk, -1)) == NULL && sent < count)
                txn_error = rd_kafka_begin_transaction(rk);
            if (!txn_error)
                last_ack = now();
            if (now() > deadline)
                break;
            continue;
        }
        if ((sent & 1023) == 0) {
            rd_kafka_poll(rk, 0);
            if (now() > deadline)
                break;
        }
    }
    if (txn_error) {
        if (errors++ == 0)
            snprintf(first_error, sizeof first_error, "transaction: %s", rd_kafka_error_string(txn_error));
        rd_kafka_error_destroy(txn_error);
    }
    /* Until the deadline, wait for the acknowledgements. Then drop what librdkafka still queues
     * (never sent: not counted as sent) and give the requests in flight SECONDS more. */
    while (acked + errors < sent && now() < deadline)
        rd_kafka_poll(rk, 10);
    if (acked + errors < sent) {
        rd_kafka_purge(rk, RD_KAFKA_PURGE_F_QUEUE);
        double grace = now() + max_seconds;
        while (acked + errors + purged < sent && now() < grace)
            rd_kafka_poll(rk, 10);
    }
    sent -= purged;
    double seconds = last_ack - start, cpu = cpu_seconds() - cpu0;
    if (acked + errors < sent && errors++ == 0)
        snprintf(first_error, sizeof first_error, "%lld records not acknowledged in time", sent - acked);
    if (stats_on) { /* wait for a statistics snapshot taken after the run */
        long long seen = stats_tx_bytes;
        double until = now() + 2.0;
        while (stats_tx_bytes == seen && now() < until)
            rd_kafka_poll(rk, 50);
    }

    printf("{\"generator\": \"rdkafka-c\", \"librdkafka\": \"%s\", \"sent\": %lld, \"acked\": %lld, "
           "\"errors\": %lld, \"first_error\": \"%s\", \"bytes\": %lld, \"seconds\": %.6f, "
           "\"cpu\": %.6f, \"tx_requests\": %lld, \"tx_bytes\": %lld}\n",
           rd_kafka_version_str(), sent, acked, errors, first_error, acked * (long long)size, seconds, cpu,
           stats_tx_requests, stats_tx_bytes);
    fflush(stdout);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_flush(rk, 1000);
    rd_kafka_destroy(rk);
    free(value);
    return 0;
}
