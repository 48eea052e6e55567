/*
** stock_guard.h — is SQLite without waldio using this database right now?
**
** waldio keeps its wal-index in "<db>-wal-shm" (db_file.c), so a stock
** SQLite process or connection never shares it: stock SQLite maps
** "<db>-shm" and holds a read lock on its dead-man-switch byte (offset 128,
** os_unix.c UNIX_SHM_DMS) for as long as it has the database open. waldio
** never locks that file. So any lock on that byte, seen in /proc/locks
** (which needs no file descriptor, and so cannot disturb anyone's POSIX
** locks), means a live stock SQLite: waldio must not touch the -wal then.
**
** The standard layout shares SQLite's own "<db>-shm" with stock processes
** (db_file.c): there a stock process is a holder of the DMS byte that holds
** no USE lock on the log (stock_sqlite_shares).
*/
#ifndef WALDIO_STOCK_GUARD_H
#define WALDIO_STOCK_GUARD_H

/* 1 if some process holds a lock on the DMS byte of zShmPath, 0 if not or
** if the file does not exist. */
int stock_sqlite_active(const char *zShmPath);

/* The byte of "<db>-shm" that every process with the wal-index mapped holds
** a lock on (os_unix.c UNIX_SHM_DMS: (22 + SQLITE_SHM_NLOCK) * 4 +
** SQLITE_SHM_NLOCK). */
#define STOCK_SHM_DMS 128

/* How many granted locks in /proc/locks cover byte off of zPath: one per
** process for POSIX locks (SQLite's), one per open file description for
** OFD locks (waldio's); 0 if the file does not exist, -1 if /proc/locks
** cannot be read. */
int lock_holders(const char *zPath, long long off);

/* 1 if a process without waldio has the database open in WAL mode: more
** holders of zShmPath's DMS byte (every process with the wal-index mapped)
** than of the USE lock (log_lock.h) of the log at zWalPath (every waldio
** process with the log open), in every one of a few counts a few
** milliseconds apart (stock_guard.c); 0 if not, -1 if /proc/locks cannot be
** read. */
int stock_sqlite_shares(const char *zShmPath, const char *zWalPath);

/* The refusal when it is: SQLITE_BUSY (contention: it ends when the other
** process closes the database), its reason recorded (errors.h). */
int waldio_stock_refusal(const char *zShmPath);

#endif
