/*
 * The C library's test: one source, built two ways.
 *
 *   cc dbm_test.c $(pkg-config --cflags --libs tsumiki) -pthread      (tsumiki)
 *   cc -DUSE_GDBM dbm_test.c -lgdbm_compat -lgdbm                       (gdbm's ndbm)
 *
 * Usage: dbm_test DIR   (DIR: an existing, empty scratch directory)
 *
 * The first part uses only the POSIX ndbm interface and prints a transcript on stdout
 * (keys in sorted order, so the two engines' iteration orders do not matter): the two
 * builds must print the same. The second part, tsumiki only, checks transactions (commit,
 * abort, a conflict between two handles, threads), the open flags (the table the Python
 * module's test checks too), error codes and errno (a full disk is ENOSPC), and that
 * dbm_dirfno's descriptor can be flocked.
 * Every check also asserts; a failed one prints the line and exits with 1.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#ifdef USE_GDBM
#include <ndbm.h>
#else
#include <pthread.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <tsumiki/ndbm.h>
#endif

#define CHECK(cond)                                                                  \
    do {                                                                             \
        if (!(cond)) {                                                               \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            exit(1);                                                                 \
        }                                                                            \
    } while (0)

/* A datum of n bytes at p; the casts let it compile against gdbm's char * and int. */
static datum mk(const void *p, size_t n) {
    datum d;
    d.dptr = (char *)p;
    d.dsize = n;
    return d;
}

static datum str(const char *s) { return mk(s, strlen(s)); }

/* Whether d holds exactly the n bytes at p. */
static int same(datum d, const void *p, size_t n) {
    return d.dptr != NULL && (size_t)d.dsize == n && (n == 0 || memcmp(d.dptr, p, n) == 0);
}

static DBM *open_db(const char *path, int flags, int mode) {
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", path);
    return dbm_open(buf, flags, mode);
}

/* Prints bytes as text, escaping anything not printable. */
static void print_bytes(const char *p, size_t n) {
    size_t i;
    for (i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c >= 0x21 && c < 0x7f && c != '\\')
            putchar(c);
        else
            printf("\\x%02x", c);
    }
}

struct rec {
    char *key;
    size_t klen;
    char *val;
    size_t vlen;
};

static int cmp_rec(const void *a, const void *b) {
    const struct rec *x = a, *y = b;
    size_t n = x->klen < y->klen ? x->klen : y->klen;
    int c = memcmp(x->key, y->key, n);
    if (c != 0) return c;
    return (x->klen > y->klen) - (x->klen < y->klen);
}

/* Iterates the whole database, fetching each key; prints the records sorted (values
 * longer than 40 bytes as their length and a checksum). Returns the count. */
static size_t dump(DBM *db, const char *title) {
    struct rec *recs = NULL;
    size_t n = 0, cap = 0, i;
    datum k;
    for (k = dbm_firstkey(db); k.dptr != NULL; k = dbm_nextkey(db)) {
        datum v;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            recs = realloc(recs, cap * sizeof *recs);
            CHECK(recs != NULL);
        }
        recs[n].klen = (size_t)k.dsize;
        recs[n].key = malloc(recs[n].klen + 1);
        CHECK(recs[n].key != NULL);
        memcpy(recs[n].key, k.dptr, recs[n].klen);
        v = dbm_fetch(db, mk(recs[n].key, recs[n].klen));
        CHECK(v.dptr != NULL);
        recs[n].vlen = (size_t)v.dsize;
        recs[n].val = malloc(recs[n].vlen + 1);
        CHECK(recs[n].val != NULL);
        memcpy(recs[n].val, v.dptr, recs[n].vlen);
        n++;
        CHECK(n < 100000); /* no endless iteration */
    }
#ifndef USE_GDBM
    CHECK(dbm_error(db) == 0); /* gdbm's stays set by an earlier DBM_INSERT of an existing key */
#endif
    qsort(recs, n, sizeof *recs, cmp_rec);
    for (i = 1; i < n; i++) CHECK(cmp_rec(&recs[i - 1], &recs[i]) < 0); /* each key once */
    printf("%s: %zu records\n", title, n);
    for (i = 0; i < n; i++) {
        printf("  ");
        print_bytes(recs[i].key, recs[i].klen);
        printf(" = ");
        if (recs[i].vlen <= 40) {
            print_bytes(recs[i].val, recs[i].vlen);
        } else {
            unsigned long sum = 0;
            size_t j;
            for (j = 0; j < recs[i].vlen; j++) sum = sum * 31 + (unsigned char)recs[i].val[j];
            printf("<%zu bytes, sum %lu>", recs[i].vlen, sum);
        }
        printf("\n");
        free(recs[i].key);
        free(recs[i].val);
    }
    free(recs);
    return n;
}

/* ---- part 1: POSIX ndbm only; the transcript must match gdbm's ---- */

static void common_part(const char *dir) {
    char path[4096], key[64], val[64];
    static char big[10000];
    const char bin_key[] = {'b', 0, 'i', 0, 'n'};
    DBM *db;
    datum d;
    int i, rc;

    snprintf(path, sizeof path, "%s/db", dir);
    db = open_db(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(db != NULL);
    printf("open O_RDWR|O_CREAT|O_TRUNC: ok\n");

    for (i = 0; i < 100; i++) {
        snprintf(key, sizeof key, "key%03d", i);
        snprintf(val, sizeof val, "value%d", i);
        rc = dbm_store(db, str(key), str(val), DBM_INSERT);
        CHECK(rc == 0);
    }
    printf("store key000..key099 with DBM_INSERT: all 0\n");

    rc = dbm_store(db, str("key007"), str("other"), DBM_INSERT);
    printf("DBM_INSERT of existing key007: %d\n", rc);
    CHECK(rc == 1);
    d = dbm_fetch(db, str("key007"));
    CHECK(same(d, "value7", 6)); /* DBM_INSERT changed nothing */
    rc = dbm_store(db, str("key007"), str("replaced"), DBM_REPLACE);
    printf("DBM_REPLACE of key007: %d\n", rc);
    CHECK(rc == 0);
    d = dbm_fetch(db, str("key007"));
    CHECK(same(d, "replaced", 8));
    printf("fetch key007: ");
    print_bytes(d.dptr, (size_t)d.dsize);
    printf("\n");

    d = dbm_fetch(db, str("missing"));
    printf("fetch missing: %s\n", d.dptr == NULL ? "NULL" : "found");
    CHECK(d.dptr == NULL);

    rc = dbm_delete(db, str("key013"));
    printf("delete key013: %d\n", rc);
    CHECK(rc == 0);
    rc = dbm_delete(db, str("key013"));
    printf("delete key013 again: %d\n", rc);
    CHECK(rc == -1);
    d = dbm_fetch(db, str("key013"));
    printf("fetch key013: %s\n", d.dptr == NULL ? "NULL" : "found");
    CHECK(d.dptr == NULL);

    rc = dbm_store(db, str("empty-value"), mk("", 0), DBM_REPLACE);
    CHECK(rc == 0);
    d = dbm_fetch(db, str("empty-value"));
    printf("empty value: store %d, fetch %s, dsize %d\n", rc, d.dptr ? "found" : "NULL", (int)d.dsize);
    CHECK(d.dptr != NULL && d.dsize == 0);

    rc = dbm_store(db, mk("", 0), str("empty key"), DBM_INSERT);
    CHECK(rc == 0);
    d = dbm_fetch(db, mk("", 0));
    printf("empty key: store %d, fetch %s\n", rc, same(d, "empty key", 9) ? "equal" : "DIFFERENT");
    CHECK(same(d, "empty key", 9));

    for (i = 0; i < (int)sizeof big; i++) big[i] = (char)(i * 7 + 3);
    rc = dbm_store(db, mk(bin_key, sizeof bin_key), mk(big, sizeof big), DBM_REPLACE);
    CHECK(rc == 0);
    d = dbm_fetch(db, mk(bin_key, sizeof bin_key));
    printf("binary key, 10000-byte value: store %d, fetch %s\n", rc, same(d, big, sizeof big) ? "equal" : "DIFFERENT");
    CHECK(same(d, big, sizeof big));

    CHECK(dump(db, "iteration") == 102);
    dbm_close(db);

    /* Reopen after close, without O_CREAT: everything is there. */
    db = open_db(path, O_RDWR, 0);
    CHECK(db != NULL);
    printf("reopen O_RDWR: ok\n");
    d = dbm_fetch(db, str("key007"));
    CHECK(same(d, "replaced", 8));
    rc = dbm_store(db, str("after-reopen"), str("yes"), DBM_INSERT);
    CHECK(rc == 0);
    CHECK(dump(db, "after reopen") == 103);
    dbm_close(db);

    /* Read-only: reads work, writes fail. */
    db = open_db(path, O_RDONLY, 0);
    CHECK(db != NULL);
    d = dbm_fetch(db, str("after-reopen"));
    CHECK(same(d, "yes", 3));
    rc = dbm_store(db, str("ro"), str("x"), DBM_REPLACE);
    printf("read-only: store %d", rc);
    CHECK(rc == -1);
    CHECK(dbm_error(db) != 0);
    dbm_clearerr(db);
    CHECK(dbm_error(db) == 0);
    rc = dbm_delete(db, str("key000"));
    printf(", delete %d\n", rc);
    CHECK(rc == -1);
    CHECK(dbm_error(db) != 0);
    dbm_clearerr(db);
    d = dbm_fetch(db, str("key000"));
    CHECK(same(d, "value0", 6));
    CHECK(dump(db, "read-only") == 103);
    dbm_close(db);

    /* Deleting everything through dbm_firstkey. */
    db = open_db(path, O_RDWR, 0);
    CHECK(db != NULL);
    i = 0;
    for (d = dbm_firstkey(db); d.dptr != NULL; d = dbm_firstkey(db)) {
        CHECK(dbm_delete(db, d) == 0);
        CHECK(++i <= 103);
    }
    printf("deleted through dbm_firstkey: %d\n", i);
    CHECK(i == 103);
    CHECK(dump(db, "emptied") == 0);
    for (i = 0; i < 10; i++) {
        snprintf(key, sizeof key, "again%d", i);
        CHECK(dbm_store(db, str(key), str(key), DBM_INSERT) == 0);
    }
    dbm_close(db);

    /* O_TRUNC empties an existing database. */
    db = open_db(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    CHECK(db != NULL);
    CHECK(dump(db, "after O_TRUNC") == 0);
    dbm_close(db);
}

#ifndef USE_GDBM
/* ---- part 2: tsumiki only ---- */

static void check_code(DBM *db, int code) {
    int got = tsumiki_dbm_errcode(db);
    const char *msg = tsumiki_dbm_errmsg(db);
    if (got != code) {
        fprintf(stderr, "expected code %d, got %d (%s)\n", code, got, msg ? msg : "(null)");
    }
    CHECK(got == code);
    CHECK(msg != NULL);
    CHECK(code == TSUMIKI_DBM_OK ? msg[0] == '\0' : msg[0] != '\0');
}

static void open_flags(const char *dir) {
    char path[4096];
    struct stat st;
    DBM *db;

    /* The mode: x where r, minus the umask. */
    umask(022);
    snprintf(path, sizeof path, "%s/mode1", dir);
    db = open_db(path, O_RDWR | O_CREAT, 0640);
    CHECK(db != NULL);
    CHECK(stat(path, &st) == 0 && S_ISDIR(st.st_mode));
    CHECK((st.st_mode & 0777) == 0750);
    dbm_close(db);
    umask(077);
    snprintf(path, sizeof path, "%s/mode2", dir);
    db = open_db(path, O_RDWR | O_CREAT, 0666);
    CHECK(db != NULL);
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) == 0700);
    dbm_close(db);
    umask(022);

    /* O_EXCL on an existing database. */
    errno = 0;
    db = open_db(path, O_RDWR | O_CREAT | O_EXCL, 0600);
    CHECK(db == NULL && errno == EEXIST);
    check_code(NULL, TSUMIKI_DBM_EXISTS);

    /* A missing database without O_CREAT, also read-only, and a missing parent. */
    snprintf(path, sizeof path, "%s/missing", dir);
    errno = 0;
    db = open_db(path, O_RDWR, 0);
    CHECK(db == NULL && errno == ENOENT);
    check_code(NULL, TSUMIKI_DBM_NOT_FOUND);
    errno = 0;
    db = open_db(path, O_RDONLY, 0);
    CHECK(db == NULL && errno == ENOENT);
    CHECK(access(path, F_OK) != 0); /* nothing was created */
    snprintf(path, sizeof path, "%s/no/such/parent", dir);
    errno = 0;
    db = open_db(path, O_RDWR | O_CREAT, 0600);
    CHECK(db == NULL && errno == ENOENT);
    check_code(NULL, TSUMIKI_DBM_NOT_FOUND);

    /* A directory that holds no database is no database. */
    snprintf(path, sizeof path, "%s/plain", dir);
    CHECK(mkdir(path, 0700) == 0);
    errno = 0;
    db = open_db(path, O_RDWR, 0);
    CHECK(db == NULL && errno == ENOENT);
    check_code(NULL, TSUMIKI_DBM_NOT_FOUND);

    /* Bad flags. */
    errno = 0;
    db = open_db(path, O_RDONLY | O_TRUNC, 0);
    CHECK(db == NULL && errno == EINVAL);
    check_code(NULL, TSUMIKI_DBM_BAD_ARGUMENT);
    errno = 0;
    CHECK(dbm_open(NULL, O_RDWR, 0) == NULL && errno == EINVAL);
}

static void errors(const char *dir) {
    char path[4096];
    static char huge[(16 << 20) + 1];
    char longkey[5000];
    DBM *db, *ro;
    datum d;

    snprintf(path, sizeof path, "%s/errors", dir);
    db = open_db(path, O_RDWR | O_CREAT, 0600);
    CHECK(db != NULL);
    check_code(db, TSUMIKI_DBM_OK);

    /* Outcomes that are not errors: dbm_error stays 0. */
    CHECK(dbm_store(db, str("k"), str("v"), DBM_INSERT) == 0);
    check_code(db, TSUMIKI_DBM_OK);
    CHECK(dbm_store(db, str("k"), str("w"), DBM_INSERT) == 1);
    check_code(db, TSUMIKI_DBM_EXISTS);
    CHECK(dbm_fetch(db, str("nope")).dptr == NULL);
    check_code(db, TSUMIKI_DBM_NOT_FOUND);
    CHECK(dbm_delete(db, str("nope")) == -1);
    check_code(db, TSUMIKI_DBM_NOT_FOUND);
    CHECK(dbm_error(db) == 0);
    d = dbm_fetch(db, str("k"));
    CHECK(same(d, "v", 1));
    check_code(db, TSUMIKI_DBM_OK);

    /* Bad arguments and limits: errors, errno EINVAL, dbm_error set. */
    errno = 0;
    CHECK(dbm_store(db, str("k"), str("v"), 7) == -1 && errno == EINVAL);
    check_code(db, TSUMIKI_DBM_BAD_ARGUMENT);
    CHECK(dbm_error(db) != 0);
    CHECK(dbm_clearerr(db) == 0 && dbm_error(db) == 0);
    check_code(db, TSUMIKI_DBM_OK);
    errno = 0;
    CHECK(dbm_store(db, mk(NULL, 5), str("v"), DBM_REPLACE) == -1 && errno == EINVAL);
    check_code(db, TSUMIKI_DBM_BAD_ARGUMENT);
    memset(longkey, 'x', sizeof longkey);
    errno = 0;
    CHECK(dbm_store(db, mk(longkey, sizeof longkey), str("v"), DBM_REPLACE) == -1 && errno == EINVAL);
    check_code(db, TSUMIKI_DBM_TOO_LONG);
    CHECK(dbm_fetch(db, mk(longkey, sizeof longkey)).dptr == NULL);
    check_code(db, TSUMIKI_DBM_TOO_LONG);
    CHECK(dbm_store(db, mk(longkey, 4096), str("v"), DBM_REPLACE) == 0); /* the limit itself */
    errno = 0;
    CHECK(dbm_store(db, str("huge"), mk(huge, sizeof huge), DBM_REPLACE) == -1 && errno == EINVAL);
    check_code(db, TSUMIKI_DBM_TOO_LONG);
    CHECK(dbm_fetch(db, str("huge")).dptr == NULL);

    /* Transaction misuse. */
    CHECK(tsumiki_dbm_commit(db) == -1);
    check_code(db, TSUMIKI_DBM_NO_TXN);
    CHECK(tsumiki_dbm_abort(db) == -1);
    check_code(db, TSUMIKI_DBM_NO_TXN);
    CHECK(tsumiki_dbm_begin(db) == 0);
    CHECK(tsumiki_dbm_begin(db) == -1);
    check_code(db, TSUMIKI_DBM_IN_TXN);
    CHECK(tsumiki_dbm_abort(db) == 0);

    /* A read-only handle beside a writable one (they share the open database). */
    ro = open_db(path, O_RDONLY, 0);
    CHECK(ro != NULL);
    errno = 0;
    CHECK(dbm_store(ro, str("k"), str("x"), DBM_REPLACE) == -1 && errno == EPERM);
    check_code(ro, TSUMIKI_DBM_READ_ONLY);
    CHECK(dbm_error(ro) != 0);
    errno = 0;
    CHECK(dbm_delete(ro, str("k")) == -1 && errno == EPERM);
    check_code(ro, TSUMIKI_DBM_READ_ONLY);
    CHECK(tsumiki_dbm_begin(ro) == 0); /* reading transactions are fine */
    CHECK(same(dbm_fetch(ro, str("k")), "v", 1));
    CHECK(dbm_store(ro, str("k"), str("x"), DBM_INSERT) == -1);
    check_code(ro, TSUMIKI_DBM_READ_ONLY);
    CHECK(tsumiki_dbm_commit(ro) == 0);
    CHECK(dbm_store(db, str("k"), str("w"), DBM_REPLACE) == 0); /* the writer still writes */
    CHECK(same(dbm_fetch(ro, str("k")), "w", 1));
    dbm_close(ro);

    /* nextkey before firstkey; NULL handles. */
    CHECK(dbm_nextkey(db).dptr == NULL);
    check_code(db, TSUMIKI_DBM_BAD_ARGUMENT);
    errno = 0;
    CHECK(dbm_store(NULL, str("k"), str("v"), DBM_REPLACE) == -1 && errno == EINVAL);
    CHECK(dbm_fetch(NULL, str("k")).dptr == NULL);
    CHECK(tsumiki_dbm_begin(NULL) == -1);
    dbm_close(NULL);
    dbm_close(db);
}

static void transactions(const char *dir) {
    char path[4096];
    DBM *h1, *h2;
    datum d;
    int rc, met;
    size_t n;

    snprintf(path, sizeof path, "%s/txn", dir);
    h1 = open_db(path, O_RDWR | O_CREAT, 0600);
    h2 = open_db(path, O_RDWR, 0); /* a second handle on the same database */
    CHECK(h1 != NULL && h2 != NULL);

    /* Commit: invisible to the other handle until then. */
    CHECK(tsumiki_dbm_begin(h1) == 0);
    CHECK(dbm_store(h1, str("a"), str("1"), DBM_REPLACE) == 0);
    CHECK(dbm_store(h1, str("b"), str("2"), DBM_INSERT) == 0);
    CHECK(same(dbm_fetch(h1, str("a")), "1", 1)); /* its own write */
    CHECK(dbm_fetch(h2, str("a")).dptr == NULL);
    n = 0;
    for (d = dbm_firstkey(h1); d.dptr != NULL; d = dbm_nextkey(h1)) n++;
    CHECK(n == 2);
    CHECK(tsumiki_dbm_commit(h1) == 0);
    check_code(h1, TSUMIKI_DBM_OK);
    CHECK(same(dbm_fetch(h2, str("a")), "1", 1));
    CHECK(same(dbm_fetch(h2, str("b")), "2", 1));

    /* Abort: nothing happened. */
    CHECK(tsumiki_dbm_begin(h1) == 0);
    CHECK(dbm_store(h1, str("c"), str("3"), DBM_REPLACE) == 0);
    CHECK(dbm_delete(h1, str("a")) == 0);
    CHECK(dbm_fetch(h1, str("a")).dptr == NULL);
    CHECK(tsumiki_dbm_abort(h1) == 0);
    CHECK(dbm_fetch(h1, str("c")).dptr == NULL);
    CHECK(same(dbm_fetch(h1, str("a")), "1", 1));

    /* Conflict: both read k, both write it; the first commit wins, the second handle
     * meets the conflict at its store or at its commit, and its commit reports it. */
    CHECK(dbm_store(h1, str("k"), str("0"), DBM_REPLACE) == 0);
    CHECK(tsumiki_dbm_begin(h1) == 0);
    CHECK(tsumiki_dbm_begin(h2) == 0);
    CHECK(same(dbm_fetch(h1, str("k")), "0", 1));
    CHECK(same(dbm_fetch(h2, str("k")), "0", 1));
    CHECK(dbm_store(h1, str("k"), str("1"), DBM_REPLACE) == 0);
    CHECK(tsumiki_dbm_commit(h1) == 0);
    rc = dbm_store(h2, str("k"), str("2"), DBM_REPLACE);
    met = rc == -1;
    if (met) {
        check_code(h2, TSUMIKI_DBM_CONFLICT);
        /* Rolled back: later calls fail too, until commit or abort ends it. */
        CHECK(dbm_fetch(h2, str("a")).dptr == NULL);
        check_code(h2, TSUMIKI_DBM_CONFLICT);
    } else {
        CHECK(rc == 0);
    }
    errno = 0;
    CHECK(tsumiki_dbm_commit(h2) == -1 && errno == EAGAIN);
    check_code(h2, TSUMIKI_DBM_CONFLICT);
    CHECK(dbm_error(h2) != 0);
    fprintf(stderr, "conflict met at the %s\n", met ? "store" : "commit");
    CHECK(tsumiki_dbm_commit(h2) == -1); /* it has ended */
    check_code(h2, TSUMIKI_DBM_NO_TXN);
    CHECK(same(dbm_fetch(h2, str("k")), "1", 1)); /* the winner's value */

    /* The loser runs again and succeeds. */
    do {
        CHECK(tsumiki_dbm_begin(h2) == 0);
        d = dbm_fetch(h2, str("k"));
        if (d.dptr != NULL) dbm_store(h2, str("k"), str("2"), DBM_REPLACE);
    } while (tsumiki_dbm_commit(h2) != 0 && tsumiki_dbm_errcode(h2) == TSUMIKI_DBM_CONFLICT);
    check_code(h2, TSUMIKI_DBM_OK);
    CHECK(same(dbm_fetch(h1, str("k")), "2", 1));

    /* Closing a handle with an open transaction rolls it back. */
    CHECK(tsumiki_dbm_begin(h2) == 0);
    CHECK(dbm_store(h2, str("closed"), str("x"), DBM_REPLACE) == 0);
    dbm_close(h2);
    CHECK(dbm_fetch(h1, str("closed")).dptr == NULL);

    /* Deleting each key as iteration returns it visits every key once. */
    CHECK(dbm_store(h1, str("d"), str("4"), DBM_REPLACE) == 0);
    n = 0;
    for (d = dbm_firstkey(h1); d.dptr != NULL; d = dbm_nextkey(h1)) {
        CHECK(dbm_delete(h1, d) == 0);
        n++;
    }
    CHECK(n == 4); /* a, b, d, k */
    CHECK(dbm_firstkey(h1).dptr == NULL);
    check_code(h1, TSUMIKI_DBM_NOT_FOUND);
    dbm_close(h1);
}

/* A conflict met inside a transaction, before its commit: under 2PL (no-wait) a write of
 * a record another transaction has written conflicts at once. */
static void rolled_back(const char *dir) {
    char path[4096];
    DBM *h1, *h2;
    int round;

    snprintf(path, sizeof path, "%s/bad-cc", dir);
    CHECK(setenv("TSUMIKI_CC", "no-such-protocol", 1) == 0);
    errno = 0;
    CHECK(open_db(path, O_RDWR | O_CREAT, 0600) == NULL && errno == EINVAL);
    check_code(NULL, TSUMIKI_DBM_BAD_ARGUMENT);

    snprintf(path, sizeof path, "%s/2pl", dir);
    CHECK(setenv("TSUMIKI_CC", "2pl", 1) == 0);
    h1 = open_db(path, O_RDWR | O_CREAT, 0600);
    CHECK(unsetenv("TSUMIKI_CC") == 0);
    h2 = open_db(path, O_RDWR, 0); /* shares h1's database, so 2PL too */
    CHECK(h1 != NULL && h2 != NULL);
    CHECK(dbm_store(h1, str("k"), str("0"), DBM_REPLACE) == 0);
    for (round = 0; round < 2; round++) {
        CHECK(tsumiki_dbm_begin(h1) == 0);
        CHECK(dbm_store(h1, str("k"), str(round ? "2" : "1"), DBM_REPLACE) == 0);
        CHECK(tsumiki_dbm_begin(h2) == 0);
        CHECK(dbm_store(h2, str("other"), str("x"), DBM_REPLACE) == 0);
        errno = 0;
        CHECK(dbm_store(h2, str("k"), str("9"), DBM_REPLACE) == -1 && errno == EAGAIN);
        check_code(h2, TSUMIKI_DBM_CONFLICT);
        /* Rolled back: every call fails until commit or abort ends it. */
        CHECK(dbm_fetch(h2, str("other")).dptr == NULL);
        check_code(h2, TSUMIKI_DBM_CONFLICT);
        CHECK(dbm_firstkey(h2).dptr == NULL);
        check_code(h2, TSUMIKI_DBM_CONFLICT);
        CHECK(dbm_delete(h2, str("k")) == -1);
        check_code(h2, TSUMIKI_DBM_CONFLICT);
        CHECK(tsumiki_dbm_begin(h2) == -1);
        check_code(h2, TSUMIKI_DBM_IN_TXN);
        if (round == 0) {
            CHECK(tsumiki_dbm_commit(h2) == -1);
            check_code(h2, TSUMIKI_DBM_CONFLICT);
        } else {
            CHECK(tsumiki_dbm_abort(h2) == 0);
        }
        CHECK(tsumiki_dbm_commit(h2) == -1); /* ended either way */
        check_code(h2, TSUMIKI_DBM_NO_TXN);
        CHECK(tsumiki_dbm_commit(h1) == 0);
        CHECK(same(dbm_fetch(h2, str("k")), round ? "2" : "1", 1));
        CHECK(dbm_fetch(h2, str("other")).dptr == NULL); /* rolled back */
    }
    dbm_close(h2);
    dbm_close(h1);
}

#define THREADS 4
#define INCREMENTS 50

struct worker {
    const char *path;
    int conflicts;
};

/* Increments the counter INCREMENTS times, each in a transaction run until it commits. */
static void *increment(void *arg) {
    struct worker *w = arg;
    DBM *db = open_db(w->path, O_RDWR, 0);
    int i;
    CHECK(db != NULL);
    for (i = 0; i < INCREMENTS; i++) {
        for (;;) {
            char buf[32];
            long n = 0;
            datum d;
            CHECK(tsumiki_dbm_begin(db) == 0);
            d = dbm_fetch(db, str("counter"));
            if (d.dptr != NULL) {
                CHECK(d.dsize < sizeof buf);
                memcpy(buf, d.dptr, d.dsize);
                buf[d.dsize] = '\0';
                n = atol(buf);
            } else {
                CHECK(tsumiki_dbm_errcode(db) == TSUMIKI_DBM_NOT_FOUND ||
                      tsumiki_dbm_errcode(db) == TSUMIKI_DBM_CONFLICT);
            }
            snprintf(buf, sizeof buf, "%ld", n + 1);
            dbm_store(db, str("counter"), str(buf), DBM_REPLACE);
            if (tsumiki_dbm_commit(db) == 0) break;
            CHECK(tsumiki_dbm_errcode(db) == TSUMIKI_DBM_CONFLICT);
            w->conflicts++;
        }
    }
    dbm_close(db);
    return NULL;
}

static void threads(const char *dir) {
    char path[4096];
    pthread_t t[THREADS];
    struct worker w[THREADS];
    DBM *db;
    datum d;
    int i, conflicts = 0;

    snprintf(path, sizeof path, "%s/threads", dir);
    db = open_db(path, O_RDWR | O_CREAT, 0600);
    CHECK(db != NULL);
    for (i = 0; i < THREADS; i++) {
        w[i].path = path;
        w[i].conflicts = 0;
        CHECK(pthread_create(&t[i], NULL, increment, &w[i]) == 0);
    }
    for (i = 0; i < THREADS; i++) {
        CHECK(pthread_join(t[i], NULL) == 0);
        conflicts += w[i].conflicts;
    }
    d = dbm_fetch(db, str("counter"));
    CHECK(d.dptr != NULL);
    fprintf(stderr, "%d threads x %d increments: counter %.*s, %d conflicts retried\n", THREADS, INCREMENTS,
            (int)d.dsize, (char *)d.dptr, conflicts);
    CHECK(same(d, "200", 3));
    dbm_close(db);
}

/* The open-flag table (the same as the header's, and as test_open_flag_table in the
 * Python module's tests): flags x what is at the path -> what happens. */
enum outcome { KEPT, EMPTY, E_NOENT, E_EXIST };

static void open_table(const char *dir) {
    static const struct {
        const char *name;
        int flags;
        enum outcome want[3]; /* a database holding k, an empty file, nothing */
    } rows[] = {
        {"O_RDONLY ('r')", O_RDONLY, {KEPT, E_NOENT, E_NOENT}},
        {"O_RDWR ('w')", O_RDWR, {KEPT, E_NOENT, E_NOENT}},
        {"O_RDWR|O_CREAT ('c')", O_RDWR | O_CREAT, {KEPT, EMPTY, EMPTY}},
        {"O_RDWR|O_CREAT|O_TRUNC ('n')", O_RDWR | O_CREAT | O_TRUNC, {EMPTY, EMPTY, EMPTY}},
        {"O_RDWR|O_CREAT|O_EXCL", O_RDWR | O_CREAT | O_EXCL, {E_EXIST, E_EXIST, EMPTY}},
        {"O_RDWR|O_TRUNC", O_RDWR | O_TRUNC, {EMPTY, E_NOENT, E_NOENT}},
    };
    static const char *situations[] = {"a database", "an empty file", "nothing"};
    size_t r, s;
    for (r = 0; r < sizeof rows / sizeof rows[0]; r++) {
        for (s = 0; s < 3; s++) {
            char path[4096];
            DBM *db;
            enum outcome got;
            snprintf(path, sizeof path, "%s/table-%zu-%zu", dir, r, s);
            if (s == 0) {
                db = open_db(path, O_RDWR | O_CREAT, 0700);
                CHECK(db != NULL);
                CHECK(dbm_store(db, str("k"), str("v"), DBM_REPLACE) == 0);
                dbm_close(db);
            } else if (s == 1) {
                int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
                CHECK(fd >= 0 && close(fd) == 0);
            }
            errno = 0;
            db = open_db(path, rows[r].flags, 0700);
            if (db != NULL) {
                got = dbm_fetch(db, str("k")).dptr != NULL ? KEPT : EMPTY;
                CHECK(got == KEPT || dbm_firstkey(db).dptr == NULL);
                dbm_close(db);
            } else if (errno == ENOENT && tsumiki_dbm_errcode(NULL) == TSUMIKI_DBM_NOT_FOUND) {
                got = E_NOENT;
            } else if (errno == EEXIST && tsumiki_dbm_errcode(NULL) == TSUMIKI_DBM_EXISTS) {
                got = E_EXIST;
            } else {
                fprintf(stderr, "%s on %s: errno %d, code %d: %s\n", rows[r].name, situations[s], errno,
                        tsumiki_dbm_errcode(NULL), tsumiki_dbm_errmsg(NULL));
                exit(1);
            }
            if (got != rows[r].want[s]) {
                fprintf(stderr, "%s on %s: outcome %d, expected %d\n", rows[r].name, situations[s], (int)got,
                        (int)rows[r].want[s]);
                exit(1);
            }
        }
    }
}

/* A full disk reaches the caller as errno ENOSPC, from the commit that met it and every
 * later write; reopened once space is freed, every acknowledged store is there. DIR is a
 * small file system of its own (.ci/capi.sh mounts a 16 MiB tmpfs for
 * `dbm_test --full-disk DIR`): a real full disk, not a simulated one. A 2 MiB ballast file
 * written first is removed before the reopen (the administrator freeing space). */
static void full_disk(const char *dir) {
    char path[4096], ballast[4096];
    static char value[64 << 10];
    DBM *db;
    int acked = 0, i, fd;

    snprintf(ballast, sizeof ballast, "%s/ballast", dir);
    fd = open(ballast, O_WRONLY | O_CREAT | O_EXCL, 0600);
    CHECK(fd >= 0);
    memset(value, 'b', sizeof value);
    for (i = 0; i < 32; i++) CHECK(write(fd, value, sizeof value) == (ssize_t)sizeof value);
    CHECK(fsync(fd) == 0 && close(fd) == 0);
    snprintf(path, sizeof path, "%s/full", dir);
    db = open_db(path, O_RDWR | O_CREAT, 0700);
    CHECK(db != NULL);
    memset(value, 'v', sizeof value);
    for (;;) {
        char key[16];
        snprintf(key, sizeof key, "%d", acked);
        errno = 0;
        if (dbm_store(db, str(key), mk(value, sizeof value), DBM_REPLACE) != 0) break;
        acked++;
        CHECK(acked < 4000);
    }
    if (errno != ENOSPC) {
        fprintf(stderr, "full disk: errno %d, code %d: %s\n", errno, tsumiki_dbm_errcode(db), tsumiki_dbm_errmsg(db));
    }
    CHECK(acked > 0 && errno == ENOSPC);
    CHECK(tsumiki_dbm_errcode(db) == TSUMIKI_DBM_POISONED);
    CHECK(dbm_error(db) != 0);
    errno = 0;
    CHECK(dbm_store(db, str("later"), str("x"), DBM_REPLACE) == -1 && errno == ENOSPC);
    check_code(db, TSUMIKI_DBM_POISONED);
    dbm_close(db);
    CHECK(unlink(ballast) == 0);
    db = open_db(path, O_RDONLY, 0);
    CHECK(db != NULL);
    for (i = 0; i < acked; i++) {
        char key[16];
        snprintf(key, sizeof key, "%d", i);
        CHECK(same(dbm_fetch(db, str(key)), value, sizeof value));
    }
    dbm_close(db);
}

/* dbm_dirfno's descriptor can be flocked; a second handle's descriptor is another open
 * file, which the lock excludes; the database works meanwhile. */
static void dirfno(const char *dir) {
    char path[4096];
    DBM *h1, *h2;
    int fd1, fd2;

    snprintf(path, sizeof path, "%s/dirfno", dir);
    h1 = open_db(path, O_RDWR | O_CREAT, 0700);
    h2 = open_db(path, O_RDONLY, 0);
    CHECK(h1 != NULL && h2 != NULL);
    fd1 = dbm_dirfno(h1);
    fd2 = dbm_dirfno(h2);
    CHECK(fd1 >= 0 && fd2 >= 0 && fd1 != fd2);
    CHECK(dbm_pagfno(h1) == fd1 && dbm_dirfno(h1) == fd1);
    CHECK(flock(fd1, LOCK_EX | LOCK_NB) == 0);
    errno = 0;
    CHECK(flock(fd2, LOCK_EX | LOCK_NB) == -1 && errno == EWOULDBLOCK);
    CHECK(dbm_store(h1, str("k"), str("v"), DBM_REPLACE) == 0);
    CHECK(same(dbm_fetch(h2, str("k")), "v", 1));
    CHECK(flock(fd1, LOCK_UN) == 0);
    CHECK(flock(fd2, LOCK_SH | LOCK_NB) == 0);
    CHECK(flock(fd2, LOCK_UN) == 0);
    errno = 0;
    CHECK(dbm_dirfno(NULL) == -1 && errno == EINVAL);
    dbm_close(h2);
    dbm_close(h1);
}

/* Another process cannot open a database this one has open. */
static void locked(const char *self, const char *dir) {
    char path[4096], cmd[8192];
    DBM *db;
    int status;

    snprintf(path, sizeof path, "%s/locked", dir);
    db = open_db(path, O_RDWR | O_CREAT, 0600);
    CHECK(db != NULL);
    snprintf(cmd, sizeof cmd, "'%s' --try-open '%s'", self, path);
    status = system(cmd);
    CHECK(status != -1 && WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    dbm_close(db);

    /* Read-only first: readers share the database, in this process and in another; a
     * writer is locked out of both until the readers close. */
    snprintf(path, sizeof path, "%s/readers", dir);
    db = open_db(path, O_RDWR | O_CREAT, 0600);
    CHECK(db != NULL);
    CHECK(dbm_store(db, str("k"), str("v"), DBM_REPLACE) == 0);
    dbm_close(db);
    db = open_db(path, O_RDONLY, 0);
    CHECK(db != NULL);
    errno = 0;
    CHECK(open_db(path, O_RDWR, 0) == NULL && errno == EAGAIN);
    check_code(NULL, TSUMIKI_DBM_LOCKED);
    snprintf(cmd, sizeof cmd, "'%s' --try-open '%s'", self, path);
    status = system(cmd);
    CHECK(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    snprintf(cmd, sizeof cmd, "'%s' --try-read '%s'", self, path);
    status = system(cmd);
    CHECK(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK(same(dbm_fetch(db, str("k")), "v", 1));
    dbm_close(db);
    db = open_db(path, O_RDWR, 0);
    CHECK(db != NULL);
    dbm_close(db);
}

/* The child of `locked`: exits 0 if the open fails as it should. */
static int try_open(const char *path) {
    DBM *db;
    errno = 0;
    db = open_db(path, O_RDWR, 0);
    if (db != NULL) {
        fprintf(stderr, "a second process opened %s\n", path);
        return 1;
    }
    if (errno != EAGAIN || tsumiki_dbm_errcode(NULL) != TSUMIKI_DBM_LOCKED) {
        fprintf(stderr, "second process: errno %d, code %d: %s\n", errno, tsumiki_dbm_errcode(NULL),
                tsumiki_dbm_errmsg(NULL));
        return 1;
    }
    return 0;
}

/* The child of `locked` beside a reader: exits 0 if a read-only open works and reads. */
static int try_read(const char *path) {
    DBM *db = open_db(path, O_RDONLY, 0);
    if (db == NULL) {
        fprintf(stderr, "a second reader: errno %d: %s\n", errno, tsumiki_dbm_errmsg(NULL));
        return 1;
    }
    if (!same(dbm_fetch(db, str("k")), "v", 1)) {
        fprintf(stderr, "a second reader read no k\n");
        return 1;
    }
    dbm_close(db);
    return 0;
}
#endif

int main(int argc, char **argv) {
#ifndef USE_GDBM
    if (argc == 3 && strcmp(argv[1], "--try-open") == 0) return try_open(argv[2]);
    if (argc == 3 && strcmp(argv[1], "--try-read") == 0) return try_read(argv[2]);
    if (argc == 3 && strcmp(argv[1], "--full-disk") == 0) {
        full_disk(argv[2]);
        fprintf(stderr, "full disk: ENOSPC reached the caller, every acknowledged store kept\n");
        return 0;
    }
#endif
    if (argc != 2) {
        fprintf(stderr, "usage: %s DIR | --full-disk DIR_ON_A_SMALL_FS\n", argv[0]);
        return 2;
    }
    common_part(argv[1]);
    fflush(stdout);
#ifndef USE_GDBM
    open_flags(argv[1]);
    open_table(argv[1]);
    dirfno(argv[1]);
    errors(argv[1]);
    transactions(argv[1]);
    rolled_back(argv[1]);
    threads(argv[1]);
    locked(argv[0], argv[1]);
    fprintf(stderr, "tsumiki-only checks passed\n");
#endif
    return 0;
}
