/* tsumiki from C: the ndbm interface, plus a transaction.
 * cc hello.c $(pkg-config --cflags --libs tsumiki) && ./a.out /tmp/hello-db */
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <tsumiki/ndbm.h>

int main(int argc, char **argv) {
    const char *path = argc > 1 ? argv[1] : "hello-db";
    DBM *db = dbm_open(path, O_RDWR | O_CREAT, 0644); /* a directory */
    datum key = {"greeting", 8}, value = {"hello", 5}, got;
    if (db == NULL) {
        fprintf(stderr, "dbm_open: %s\n", tsumiki_dbm_errmsg(NULL));
        return 1;
    }
    dbm_store(db, key, value, DBM_REPLACE); /* durable when it returns */
    got = dbm_fetch(db, key);
    printf("%.*s\n", (int)got.dsize, (char *)got.dptr);

    /* Two stores that commit together, or not at all; run again on a conflict. */
    do {
        tsumiki_dbm_begin(db);
        dbm_store(db, (datum){"a", 1}, (datum){"1", 1}, DBM_REPLACE);
        dbm_store(db, (datum){"b", 1}, (datum){"2", 1}, DBM_REPLACE);
    } while (tsumiki_dbm_commit(db) != 0 && tsumiki_dbm_errcode(db) == TSUMIKI_DBM_CONFLICT);
    if (tsumiki_dbm_errcode(db) != TSUMIKI_DBM_OK) {
        fprintf(stderr, "commit: %s\n", tsumiki_dbm_errmsg(db));
        return 1;
    }

    for (key = dbm_firstkey(db); key.dptr != NULL; key = dbm_nextkey(db))
        printf("%.*s\n", (int)key.dsize, (char *)key.dptr);
    dbm_close(db);
    return 0;
}
