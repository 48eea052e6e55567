/*
** shm_watch.h — when to count who shares SQLite's "<db>-shm" again.
**
** A standard-layout group commit gives its wal-index read lock back while it
** waits for its flush, but only while every process that has the database
** open runs waldio (db_file.c release_read_lock_early: a stock checkpointer
** with synchronous=OFF would copy a commit that is not durable yet). The
** count that tells (flush_side.c: holders of SQLite's -shm dead-man switch
** against holders of the side file's, in /proc/locks) is costly beyond its
** own process: the kernel lists /proc/locks under file_rwsem taken for
** writing, so every fcntl() lock on the machine waits for it. Counted every
** 50 ms by each process, it stalled commits for 3 to 22 ms, 90 times in two
** seconds of 8 processes (p99.9 16 ms against 4 ms in the embed layout).
**
** The count compares the holders of two locks, each taken right after its
** file is opened and held until it is closed (a process that dies has its
** files closed): SQLite's -shm dead-man switch (os_unix.c
** unixOpenSharedMemory) and the side file's (flush_side.c). So the count is
** taken again only after an open or close of either file, seen through
** inotify. (A waldio process opens the side file at its first group commit,
** after SQLite opened -shm: counted in between, it looks like a stock
** process until its side file's open is seen.)
**
**   W1  A count stands while no open of either file was noticed after
**       SETTLE_MS before it began: a close cannot add a stock process. A
**       count that found one stands only while no close was noticed either,
**       so that its leaving is seen. The settle covers an opener between
**       its open() and its lock; one stopped between them for longer is
**       counted at its next open or close.
**   W2  Without a usable watch (no inotify instance or watch left, or the
**       watch was removed: the file was deleted), the count is current for
**       POLL_MS, as it was before the watch.
**   W3  Counts are at least POLL_MS apart, however often files open.
**
** The caller holds the mutex that guards the struct (flush_side.mutex). A
** forked child closes its inherited copy (flush_side_close).
*/
#ifndef WALDIO_SHM_WATCH_H
#define WALDIO_SHM_WATCH_H

typedef struct shm_watch {
  int fd;                    /* inotify instance, or -1 (W2) */
  int wd[2];                 /* its watches of -shm and the side file */
  int pid;                   /* the process that made or took fd */
  int started;               /* a watch was attempted */
  long long openNs;          /* an open last noticed, or the watch began or
                             ** was lost (W1, W2) */
  long long closeNs;         /* a close last noticed (W1) */
  long long countNs;         /* the last count began */
  int sole;                  /* it found only waldio processes */
} shm_watch;

void shm_watch_init(shm_watch *w);

/* Notice the opens and closes of zShm and zSide since the last call; 1 if a
** count is due now (its start recorded: the caller counts at once and
** gives the result to shm_watch_counted), else 0. */
int shm_watch_count_due(shm_watch *w, const char *zShm, const char *zSide,
                        long long nowNs);
void shm_watch_counted(shm_watch *w, int sole);

/* Non-zero if the last count found only waldio processes and stands (W1,
** W2). */
int shm_watch_sole(const shm_watch *w);

/* End the watch: its instance is parked for this process's next watch, or
** closed (shm_watch.c: never a close that waits while SQLite holds its
** lock on the database, where it can be helped). */
void shm_watch_close(shm_watch *w);

#endif
