/*
 * Paper 004's fill through the ndbm interface, the C twin of `tsumiki bench fill`
 * (ascending order, 8-byte values, durable at every commit).
 *
 *   cc -O2 fill.c $(pkg-config --cflags --libs tsumiki)          (tsumiki: begin/commit)
 *   cc -O2 -DUSE_GDBM fill.c -lgdbm_compat -lgdbm                  (gdbm's ndbm: fsync)
 *
 * Usage: fill DB RECORDS PER_TXN
 *   DB: the database to create (tsumiki: a directory; gdbm: DB.dir and DB.pag), replaced
 *   if it exists. Inserts RECORDS records, PER_TXN per transaction: key k (0, 1, 2...) is
 *   its 4 bytes big-endian, its value the 8 bytes of (k + 1) * 0x9e3779b97f4a7c15
 *   little-endian, as `tsumiki bench fill` writes them. A transaction is, for tsumiki,
 *   tsumiki_dbm_begin .. tsumiki_dbm_commit (durable when commit returns); for gdbm, the
 *   stores then an fsync of the database's files (dbm_pagfno, dbm_dirfno). Reads back the
 *   first and the last record, then prints one JSON line:
 *   {"engine", "records", "per_txn", "txns", "seconds", "tx_per_s"}
 *   where seconds covers the transactions only (not the open or the close).
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#ifdef USE_GDBM
#include <ndbm.h>
#define ENGINE "gdbm-ndbm"
#else
#include <tsumiki/ndbm.h>
#define ENGINE "tsumiki-capi"
#endif

static void die(const char *what, DBM *db) {
#ifdef USE_GDBM
    (void)db;
    fprintf(stderr, "fill: %s failed: %s\n", what, strerror(errno));
#else
    fprintf(stderr, "fill: %s failed: %s\n", what, tsumiki_dbm_errmsg(db));
#endif
    exit(1);
}

static void key_of(uint32_t k, unsigned char out[4]) {
    out[0] = (unsigned char)(k >> 24);
    out[1] = (unsigned char)(k >> 16);
    out[2] = (unsigned char)(k >> 8);
    out[3] = (unsigned char)k;
}

static void value_of(uint32_t k, unsigned char out[8]) {
    uint64_t w = ((uint64_t)k + 1) * UINT64_C(0x9e3779b97f4a7c15);
    int i;
    for (i = 0; i < 8; i++) out[i] = (unsigned char)(w >> (8 * i));
}

static datum mk(const void *p, size_t n) {
    datum d;
    d.dptr = (char *)p;
    d.dsize = n;
    return d;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Makes the transaction's stores durable. */
static void commit(DBM *db) {
#ifdef USE_GDBM
    int pag = dbm_pagfno(db), dir = dbm_dirfno(db);
    if (fsync(pag) != 0) die("fsync", db);
    if (dir != pag && fsync(dir) != 0) die("fsync", db);
#else
    if (tsumiki_dbm_commit(db) != 0) die("tsumiki_dbm_commit", db);
#endif
}

static void check(DBM *db, uint32_t k) {
    unsigned char key[4], want[8];
    datum v;
    key_of(k, key);
    value_of(k, want);
    v = dbm_fetch(db, mk(key, 4));
    if (v.dptr == NULL || v.dsize != 8 || memcmp(v.dptr, want, 8) != 0) {
        fprintf(stderr, "fill: record %lu reads back wrong\n", (unsigned long)k);
        exit(1);
    }
}

int main(int argc, char **argv) {
    unsigned long records, per_txn, done = 0, txns = 0;
    char *end;
    DBM *db;
    double t0, seconds;

    if (argc != 4) {
        fprintf(stderr, "usage: %s DB RECORDS PER_TXN\n", argv[0]);
        return 2;
    }
    errno = 0;
    records = strtoul(argv[2], &end, 10);
    if (errno || *end || records == 0 || records > UINT32_MAX + 1UL) {
        fprintf(stderr, "fill: RECORDS must be 1 to 4294967296\n");
        return 2;
    }
    per_txn = strtoul(argv[3], &end, 10);
    if (errno || *end || per_txn == 0) {
        fprintf(stderr, "fill: PER_TXN must be at least 1\n");
        return 2;
    }
    db = dbm_open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (db == NULL) {
        fprintf(stderr, "fill: cannot open %s: %s\n", argv[1], strerror(errno));
        return 1;
    }
    t0 = now();
    while (done < records) {
        unsigned long n = records - done < per_txn ? records - done : per_txn, i;
#ifndef USE_GDBM
        if (tsumiki_dbm_begin(db) != 0) die("tsumiki_dbm_begin", db);
#endif
        for (i = 0; i < n; i++) {
            unsigned char key[4], val[8];
            key_of((uint32_t)(done + i), key);
            value_of((uint32_t)(done + i), val);
            if (dbm_store(db, mk(key, 4), mk(val, 8), DBM_REPLACE) != 0) die("dbm_store", db);
        }
        commit(db);
        done += n;
        txns++;
    }
    seconds = now() - t0;
    check(db, 0);
    check(db, (uint32_t)(records - 1));
    dbm_close(db);
    printf("{\"engine\": \"%s\", \"records\": %lu, \"per_txn\": %lu, \"txns\": %lu, \"seconds\": %.6f, "
           "\"tx_per_s\": %.1f}\n",
           ENGINE, records, per_txn, txns, seconds, (double)txns / seconds);
    return 0;
}
