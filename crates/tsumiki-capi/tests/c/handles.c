/*
 * Short-lived handles through C: open a database, store one record durably, close, as
 * scripts, CGI programs and mail tools do; the C twin of scripts/short-handles.py.
 *
 *   cc -O2 handles.c $(pkg-config --cflags --libs tsumiki)          (tsumiki's ndbm)
 *   cc -O2 -DUSE_GDBM handles.c -lgdbm_compat -lgdbm                  (gdbm's ndbm, fsync)
 *   cc -O2 -DUSE_SQLITE handles.c -lsqlite3                           (SQLite, synchronous=FULL)
 *
 * Usage: handles DB CYCLES PRELOAD
 *   Creates DB (replaced if it exists: tsumiki a directory, gdbm DB.dir and DB.pag, SQLite
 *   one file) with PRELOAD records (4-byte big-endian keys, 100-byte values) in one
 *   transaction, then runs CYCLES cycles of: open, store key "key<i>" = "value" (tsumiki: a
 *   call outside a transaction, durable when it returns; gdbm: the store, then an fsync of
 *   both files; SQLite: an autocommit INSERT OR REPLACE under synchronous=FULL, the default
 *   rollback journal), close. Reads every cycle's record back, then prints one JSON line:
 *   {"engine", "cycles", "preload", "seconds", "ms_per_cycle"}
 *   where seconds covers the cycles only.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#if defined(USE_SQLITE)
#include <sqlite3.h>
#define ENGINE "sqlite"
#elif defined(USE_GDBM)
#include <ndbm.h>
#define ENGINE "gdbm-ndbm"
#else
#include <tsumiki/ndbm.h>
#define ENGINE "tsumiki-capi"
#endif

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void fail(const char *what, const char *why) {
    fprintf(stderr, "handles: %s failed: %s\n", what, why);
    exit(1);
}

static void cycle_key(unsigned long i, char *out, size_t n) { snprintf(out, n, "key%lu", i); }

#if defined(USE_SQLITE)
static void exec(sqlite3 *db, const char *sql) {
    char *err = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &err) != SQLITE_OK) fail(sql, err ? err : "?");
}

static sqlite3 *open_db(const char *path) {
    sqlite3 *db = NULL;
    if (sqlite3_open(path, &db) != SQLITE_OK) fail("sqlite3_open", db ? sqlite3_errmsg(db) : "?");
    exec(db, "PRAGMA synchronous=FULL");
    return db;
}

static void put(sqlite3 *db, const void *k, int kn, const void *v, int vn) {
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "INSERT OR REPLACE INTO kv VALUES (?, ?)", -1, &st, NULL) != SQLITE_OK)
        fail("prepare", sqlite3_errmsg(db));
    sqlite3_bind_blob(st, 1, k, kn, SQLITE_STATIC);
    sqlite3_bind_blob(st, 2, v, vn, SQLITE_STATIC);
    if (sqlite3_step(st) != SQLITE_DONE) fail("insert", sqlite3_errmsg(db));
    sqlite3_finalize(st);
}

static void create(const char *path, unsigned long preload) {
    unsigned long k;
    unsigned char key[4], val[100];
    sqlite3 *db;
    unlink(path);
    db = open_db(path);
    exec(db, "CREATE TABLE kv (k BLOB PRIMARY KEY, v BLOB)");
    exec(db, "BEGIN");
    memset(val, 'x', sizeof val);
    for (k = 0; k < preload; k++) {
        key[0] = (unsigned char)(k >> 24), key[1] = (unsigned char)(k >> 16);
        key[2] = (unsigned char)(k >> 8), key[3] = (unsigned char)k;
        put(db, key, 4, val, sizeof val);
    }
    exec(db, "COMMIT");
    sqlite3_close(db);
}

static void cycle(const char *path, unsigned long i) {
    char key[32];
    sqlite3 *db = open_db(path);
    cycle_key(i, key, sizeof key);
    put(db, key, (int)strlen(key), "value", 5);
    if (sqlite3_close(db) != SQLITE_OK) fail("sqlite3_close", "busy");
}

static void check(const char *path, unsigned long cycles) {
    sqlite3 *db = open_db(path);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "SELECT count(*) FROM kv WHERE k >= CAST('key' AS BLOB) AND k < CAST('kez' AS BLOB)", -1,
                           &st, NULL) != SQLITE_OK)
        fail("prepare", sqlite3_errmsg(db));
    if (sqlite3_step(st) != SQLITE_ROW || (unsigned long)sqlite3_column_int64(st, 0) != cycles)
        fail("reading back", "a cycle's record is missing");
    sqlite3_finalize(st);
    sqlite3_close(db);
}
#else
static datum mk(const void *p, size_t n) {
    datum d;
    d.dptr = (char *)p;
    d.dsize = n;
    return d;
}

static const char *why(DBM *db) {
#ifdef USE_GDBM
    (void)db;
    return strerror(errno);
#else
    return tsumiki_dbm_errmsg(db);
#endif
}

/* Makes the stores so far durable (tsumiki: each was, when it returned). */
static void make_durable(DBM *db) {
#ifdef USE_GDBM
    int pag = dbm_pagfno(db), dir = dbm_dirfno(db);
    if (fsync(pag) != 0 || (dir != pag && fsync(dir) != 0)) fail("fsync", strerror(errno));
#else
    (void)db;
#endif
}

static void create(const char *path, unsigned long preload) {
    unsigned long k;
    unsigned char key[4], val[100];
    DBM *db = dbm_open((char *)path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (db == NULL) fail("dbm_open", strerror(errno));
    memset(val, 'x', sizeof val);
#ifndef USE_GDBM
    if (tsumiki_dbm_begin(db) != 0) fail("tsumiki_dbm_begin", why(db));
#endif
    for (k = 0; k < preload; k++) {
        key[0] = (unsigned char)(k >> 24), key[1] = (unsigned char)(k >> 16);
        key[2] = (unsigned char)(k >> 8), key[3] = (unsigned char)k;
        if (dbm_store(db, mk(key, 4), mk(val, sizeof val), DBM_REPLACE) != 0) fail("dbm_store", why(db));
    }
#ifndef USE_GDBM
    if (tsumiki_dbm_commit(db) != 0) fail("tsumiki_dbm_commit", why(db));
#endif
    make_durable(db);
    dbm_close(db);
}

static void cycle(const char *path, unsigned long i) {
    char key[32];
    DBM *db = dbm_open((char *)path, O_RDWR, 0600);
    if (db == NULL) fail("dbm_open", strerror(errno));
    cycle_key(i, key, sizeof key);
    if (dbm_store(db, mk(key, strlen(key)), mk("value", 5), DBM_REPLACE) != 0) fail("dbm_store", why(db));
    make_durable(db);
    dbm_close(db);
}

static void check(const char *path, unsigned long cycles) {
    unsigned long i;
    char key[32];
    DBM *db = dbm_open((char *)path, O_RDONLY, 0600);
    if (db == NULL) fail("dbm_open", strerror(errno));
    for (i = 0; i < cycles; i++) {
        datum v;
        cycle_key(i, key, sizeof key);
        v = dbm_fetch(db, mk(key, strlen(key)));
        if (v.dptr == NULL || v.dsize != 5 || memcmp(v.dptr, "value", 5) != 0) fail("reading back", key);
    }
    dbm_close(db);
}
#endif

int main(int argc, char **argv) {
    unsigned long cycles, preload, i;
    char *end;
    double t0, seconds;

    if (argc != 4) {
        fprintf(stderr, "usage: %s DB CYCLES PRELOAD\n", argv[0]);
        return 2;
    }
    errno = 0;
    cycles = strtoul(argv[2], &end, 10);
    if (errno || *end || cycles == 0) {
        fprintf(stderr, "handles: CYCLES must be at least 1\n");
        return 2;
    }
    preload = strtoul(argv[3], &end, 10);
    if (errno || *end || preload > 16777216UL) {
        fprintf(stderr, "handles: PRELOAD must be 0 to 16777216\n");
        return 2;
    }
    create(argv[1], preload);
    t0 = now();
    for (i = 0; i < cycles; i++) cycle(argv[1], i);
    seconds = now() - t0;
    check(argv[1], cycles);
    printf("{\"engine\": \"%s\", \"cycles\": %lu, \"preload\": %lu, \"seconds\": %.6f, \"ms_per_cycle\": %.4f}\n", ENGINE,
           cycles, preload, seconds, seconds * 1e3 / (double)cycles);
    return 0;
}
