/*
 * tsumiki/ndbm.h: tsumiki's C interface, source-compatible with POSIX <ndbm.h>, with
 * transactions as an extension.
 *
 * A program written for ndbm switches to tsumiki by including <tsumiki/ndbm.h> instead of
 * <ndbm.h> and linking with -ltsumiki (`pkg-config --cflags --libs tsumiki`).
 *
 * Differences from a classic ndbm, all within what POSIX allows:
 * - dbm_open's `file` names a database DIRECTORY (ndbm makes file.dir and file.pag).
 *   With O_CREAT a missing directory is created with `mode` plus an x bit wherever `mode`
 *   has an r bit, minus the umask (0644 gives 0755 under umask 022); the files inside are
 *   created 0600. The parent directory must exist.
 * - Every call outside a transaction is its own durable, serializable transaction: when it
 *   returns, its effect survives a crash (the log is synced at every commit).
 * - Keys are at most 4096 bytes and values at most 16 MiB; longer ones fail with
 *   TSUMIKI_DBM_TOO_LONG (errno EINVAL). There is no limit on key plus value size.
 * - dbm_firstkey/dbm_nextkey return keys in ascending byte order (memcmp, shorter first).
 *   dbm_nextkey returns the first key strictly after the one it or dbm_firstkey last
 *   returned on this handle, so stores and deletes during an iteration are allowed: a key
 *   deleted after it was returned does not stop the iteration.
 *
 * Memory: the datum returned by dbm_fetch, dbm_firstkey and dbm_nextkey points into memory
 * owned by the handle. It stays valid until the next call on the same handle (in fact a
 * key until the next dbm_firstkey/dbm_nextkey and a value until the next dbm_fetch, but
 * portable ndbm code assumes only the former) and must not be freed. Copy it to keep it.
 * A found empty value or key has a non-NULL dptr and dsize 0; dptr is NULL only when
 * nothing was found.
 *
 * Threads: a handle (DBM *) may be used by one thread at a time. Several handles may have
 * the same database open, in one thread or in many: dbm_open of a directory that this
 * process already has open shares the open database (another process is refused with
 * TSUMIKI_DBM_LOCKED). The database is closed when its last handle is.
 *
 * Read-only: a process whose first handle on a database is O_RDONLY opens it read-only,
 * which writes nothing at all (not after a crash either: its logs are replayed in memory),
 * so it works on a read-only file system or without write permission. Processes that open
 * a database O_RDONLY share it; one that writes excludes them and they exclude it
 * (TSUMIKI_DBM_LOCKED), and so, in this process, does a database opened read-only exclude
 * a later handle that writes, until its handles are closed. An O_RDONLY handle on a
 * database this process opened to write shares it and refuses its own writes.
 *
 * Protocols: the environment variable TSUMIKI_CC, read when the process opens a database
 * that none of its handles has open, names the concurrency-control protocol: tictoc (the
 * default), silo, 2pl (no-wait), 2pl-waitdie or mvcc-si (snapshot isolation, not
 * serializable). Under 2pl a transaction holds locks from its first read or write (and under
 * mvcc-si its writes are pending until it commits): a call outside a transaction, on another
 * handle of the same thread, that needs such a record retries for 10 seconds, then fails
 * with TSUMIKI_DBM_CONFLICT.
 *
 * Errors: every function sets the handle's code and message, read with tsumiki_dbm_errcode
 * and tsumiki_dbm_errmsg, to describe the outcome of the LAST call on the handle
 * (TSUMIKI_DBM_OK after a success). dbm_error is sticky as POSIX says: it is nonzero after
 * any failed call until dbm_clearerr, not counting a missing key or DBM_INSERT meeting an
 * existing key, which are outcomes rather than errors. Failing calls set errno, as the
 * Python module's exceptions do (both map from the engine's ErrorKind):
 *
 *   code                          errno                          engine's ErrorKind
 *   TSUMIKI_DBM_NOT_FOUND         ENOENT                         NotFound
 *   TSUMIKI_DBM_EXISTS            EEXIST                         AlreadyExists
 *   TSUMIKI_DBM_READ_ONLY         EPERM                          ReadOnly
 *   TSUMIKI_DBM_CONFLICT          EAGAIN                         Conflict, TxnFinished
 *   TSUMIKI_DBM_TOO_LONG          EINVAL                         KeyTooLong, ValueTooLong
 *   TSUMIKI_DBM_TXN_TOO_LARGE     EFBIG                          TxnTooLarge
 *   TSUMIKI_DBM_IO                the OS's (ENOSPC, EACCES...)   Io
 *                                 or EIO
 *   TSUMIKI_DBM_POISONED          the first failure's (ENOSPC    Poisoned
 *                                 for a full disk) or EIO
 *   TSUMIKI_DBM_CORRUPT           EIO                            Corrupt
 *   TSUMIKI_DBM_LOCKED            EAGAIN                         Locked
 *   TSUMIKI_DBM_BAD_ARGUMENT      EINVAL                         InvalidArgument
 *   TSUMIKI_DBM_NO_TXN, _IN_TXN   EINVAL                         (this library's)
 *   TSUMIKI_DBM_INTERNAL          EIO                            (a caught panic)
 *
 * A full disk thus reaches the caller as errno ENOSPC: from the commit that met it (code
 * TSUMIKI_DBM_POISONED: close the database and reopen it once space is freed; every
 * acknowledged commit survives), and from every later write. A NULL handle makes every
 * function fail with errno EINVAL.
 */
#ifndef TSUMIKI_NDBM_H
#define TSUMIKI_NDBM_H

#include <stddef.h>    /* size_t */
#include <sys/types.h> /* mode_t */
#include <fcntl.h>     /* O_RDONLY, O_RDWR, O_CREAT, O_TRUNC, O_EXCL for dbm_open */

#ifdef __cplusplus
extern "C" {
#endif

/* An open database handle (opaque). */
typedef struct tsumiki_dbm DBM;

/* A key or a value: dsize bytes at dptr. (gdbm's ndbm declares `char *dptr; int dsize`;
 * code that casts, `(char *)d.dptr` and `(int)d.dsize`, compiles against both.) */
typedef struct {
    void *dptr;
    size_t dsize;
} datum;

/* dbm_store modes. */
#define DBM_INSERT 0  /* store only if the key is absent; otherwise return 1 */
#define DBM_REPLACE 1 /* store, replacing any value */

/* Opens (flags & O_ACCMODE: O_RDONLY, or O_WRONLY/O_RDWR to write) the database in
 * directory `file`. O_CREAT creates it if missing (see above for `mode`), O_EXCL with
 * O_CREAT fails with EEXIST if anything exists at `file`, O_TRUNC (not with O_RDONLY:
 * EINVAL) empties an existing database, a batch of keys per transaction. Without O_CREAT
 * a missing database fails with ENOENT. Other flags are ignored. By what is at `file`
 * (the same rules as the Python module's flags 'r', 'w', 'c', 'n'):
 *
 *   flags                   a database      an empty file   an empty dir    nothing
 *   O_RDONLY, O_RDWR        opened          ENOENT          ENOENT          ENOENT
 *   O_RDWR|O_CREAT          opened          new database    new database    new database
 *   O_RDWR|O_CREAT|O_TRUNC  emptied         new database    new database    new database
 *   O_RDWR|O_CREAT|O_EXCL   EEXIST          EEXIST          EEXIST          new database
 *   O_RDWR|O_TRUNC          emptied         ENOENT          ENOENT          ENOENT
 *
 * (An empty file is replaced by the database's directory; a non-empty file, or a
 * non-empty directory without a database, is never emptied or replaced: EEXIST with
 * O_CREAT|O_TRUNC, ENOENT without O_CREAT.) Returns NULL on failure, with errno set; the
 * code and message are then tsumiki_dbm_errcode(NULL) and tsumiki_dbm_errmsg(NULL). */
DBM *dbm_open(const char *file, int flags, mode_t mode);

/* Closes the handle, rolling back its open transaction if any. NULL is ignored. */
void dbm_close(DBM *db);

/* Stores content under key. Returns 0 when stored, 1 when mode is DBM_INSERT and the key
 * exists (nothing changed), -1 on error (read-only handle, too long, conflict inside a
 * transaction, bad mode, I/O...). */
int dbm_store(DBM *db, datum key, datum content, int mode);

/* The value of key; dptr is NULL if it is missing (code TSUMIKI_DBM_NOT_FOUND) or on
 * error. */
datum dbm_fetch(DBM *db, datum key);

/* Deletes key. Returns 0 when deleted, -1 when it was missing (TSUMIKI_DBM_NOT_FOUND) or
 * on error. */
int dbm_delete(DBM *db, datum key);

/* The smallest key; dptr is NULL when the database is empty or on error. Starts the
 * handle's iteration. */
datum dbm_firstkey(DBM *db);

/* The smallest key after the last one dbm_firstkey/dbm_nextkey returned on this handle;
 * dptr is NULL at the end, on error, or if dbm_firstkey was not called first. */
datum dbm_nextkey(DBM *db);

/* Nonzero if an error occurred on the handle since it was opened or dbm_clearerr. */
int dbm_error(DBM *db);

/* Clears dbm_error's condition (and the last code and message). Returns 0. */
int dbm_clearerr(DBM *db);

/* A file descriptor a caller may lock (flock, or fcntl/lockf) to coordinate with other
 * callers: that of the file dbm.lock in the database directory (created 0600 on first
 * use; an O_RDONLY handle never creates it: -1 with errno ENOENT while it does not
 * exist), which tsumiki itself never locks, so a caller's lock never blocks or releases
 * tsumiki's own (the database is locked against other processes anyway: see Threads).
 * Locks follow their API's rules: two handles of one process have two descriptors, so
 * flock on one excludes flock on the other. Owned by the handle, valid until dbm_close:
 * do not close it, read or write it. dbm_pagfno returns the same descriptor (a tsumiki
 * database has no separate .dir and .pag files). Returns -1 on error, with errno set. */
int dbm_dirfno(DBM *db);
int dbm_pagfno(DBM *db);

/* ---- tsumiki's extension: transactions and error codes ---- */

/* Outcome codes (tsumiki_dbm_errcode). */
#define TSUMIKI_DBM_OK 0
#define TSUMIKI_DBM_NOT_FOUND 1     /* missing key, or no database (dbm_open) */
#define TSUMIKI_DBM_EXISTS 2        /* DBM_INSERT met the key, or O_EXCL met the path */
#define TSUMIKI_DBM_READ_ONLY 3     /* a write through a handle opened O_RDONLY */
#define TSUMIKI_DBM_CONFLICT 4      /* the transaction conflicted and was rolled back */
#define TSUMIKI_DBM_TOO_LONG 5      /* a key over 4096 bytes or a value over 16 MiB */
#define TSUMIKI_DBM_IO 6            /* an operating-system I/O error */
#define TSUMIKI_DBM_CORRUPT 7       /* a damaged database file, or not a tsumiki one */
#define TSUMIKI_DBM_LOCKED 8        /* the database is open in another process */
#define TSUMIKI_DBM_POISONED 9      /* an earlier log failure: close and reopen */
#define TSUMIKI_DBM_BAD_ARGUMENT 10 /* NULL pointer, bad flags or mode, nextkey first */
#define TSUMIKI_DBM_NO_TXN 11       /* commit or abort without a transaction */
#define TSUMIKI_DBM_IN_TXN 12       /* begin inside a transaction (none nest) */
#define TSUMIKI_DBM_INTERNAL 13     /* a bug in tsumiki (caught; please report it) */
#define TSUMIKI_DBM_TXN_TOO_LARGE 14 /* the transaction's writes exceed 1 GiB: rolled back */

/* Starts a transaction on the handle: the ndbm calls that follow, until commit or abort,
 * belong to it; they see its own writes, and others see none of them before the commit.
 * Returns 0, or -1 (TSUMIKI_DBM_IN_TXN if one is open already).
 *
 * A conflict with another transaction rolls the transaction back at once: the call that
 * met it fails with TSUMIKI_DBM_CONFLICT (errno EAGAIN), and so does every later call on
 * the handle, tsumiki_dbm_commit included, until tsumiki_dbm_commit or tsumiki_dbm_abort
 * ends it; then run it again:
 *
 *     do {
 *         tsumiki_dbm_begin(db);
 *         ... dbm_fetch / dbm_store / dbm_delete ...
 *     } while (tsumiki_dbm_commit(db) != 0 && tsumiki_dbm_errcode(db) == TSUMIKI_DBM_CONFLICT);
 */
int tsumiki_dbm_begin(DBM *db);

/* Commits the transaction, durably. Returns 0, or -1 (TSUMIKI_DBM_CONFLICT: rolled back;
 * TSUMIKI_DBM_TXN_TOO_LARGE: rolled back, split it; TSUMIKI_DBM_NO_TXN;
 * TSUMIKI_DBM_POISONED or TSUMIKI_DBM_IO: the outcome is unknown). The transaction has
 * ended either way. */
int tsumiki_dbm_commit(DBM *db);

/* Rolls the transaction back. Returns 0, or -1 (TSUMIKI_DBM_NO_TXN). */
int tsumiki_dbm_abort(DBM *db);

/* What the handle's commits promise from now on (dbm_store and dbm_delete outside a
 * transaction, tsumiki_dbm_commit, and a transaction already open):
 *   TSUMIKI_DBM_SYNC      on the device when the call returns (the default);
 *   TSUMIKI_DBM_BUFFERED  handed to the operating system: survives the process, not a
 *                         power loss;
 *   TSUMIKI_DBM_NOSYNC    kept in memory until a later synced commit, a checkpoint or
 *                         dbm_close.
 * A synced commit makes every earlier commit durable too, and a crash never keeps a
 * commit while losing an earlier one. Returns 0, or -1 (TSUMIKI_DBM_BAD_ARGUMENT). */
#define TSUMIKI_DBM_SYNC 0
#define TSUMIKI_DBM_BUFFERED 1
#define TSUMIKI_DBM_NOSYNC 2
int tsumiki_dbm_set_durability(DBM *db, int level);

/* The code of the last call on the handle (TSUMIKI_DBM_OK after a success). With NULL:
 * the code of the last dbm_open that failed in the calling thread. */
int tsumiki_dbm_errcode(DBM *db);

/* A message for that code, naming what happened (never NULL; "" after a success). Valid
 * until the next call on the handle (with NULL: the next dbm_open in the thread). */
const char *tsumiki_dbm_errmsg(DBM *db);

#ifdef __cplusplus
}
#endif

#endif /* TSUMIKI_NDBM_H */
