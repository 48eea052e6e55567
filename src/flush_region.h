/*
** flush_region.h — durable group commit across processes: the log's flush
** state in memory that every process shares, and the protocol by which one
** flush makes the commits of many processes durable.
**
** Where it lives. In the slotted layouts (the standard layout: flush_side.h),
** waldio's wal-index file ("<db>-wal-shm", db_file.c) is
** mapped through the unix VFS's shared-memory methods, and waldio shifts
** SQLite's regions up by one: region 0 of the file is waldio's own and
** begins with a flush_region. The unix VFS's rules apply to it unchanged:
** every process maps it MAP_SHARED, and the first process to open the
** wal-index (no other holds it) truncates the file (to 3 bytes), so the
** region starts zeroed -- a valid state -- after a reboot or once every
** process closed.
**
** The protocol is PostgreSQL's XLogFlush, with an OFD lock byte on the log
** (LOG_LOCK_LEADER, log_lock.h) for its WALWriteLock:
**   commit  A connection in shared group mode writes its commit's frames
**           into the log (wal_file.c), then takes a ticket: written + 1.
**           SQLite publishes the commit and releases its WAL write lock
**           without a flush: its xSync is skipped (early lock release).
**   wait    At SQLITE_FCNTL_COMMIT_PHASETWO the connection returns once
**           durable >= its ticket. Otherwise it tries the leader lock
**           (never waits for it; if a flush is under way that does not
**           cover its ticket, a second lock byte lets one more flush start
**           at once); the leader re-checks, reads written,
**           fdatasyncs the log, raises durable to what it read, and wakes
**           the waiters it made durable, and the holder of the next ticket
**           to lead the next flush. The others sleep on a futex for at most
**           WAIT_SLICE_MS and look again.
**
** Invariants:
**   F1  written is raised only after the write it counts has completed,
**       and under SQLite's WAL write lock: ticket order is log order.
**   F2  durable <= written, and durable is raised only to a value of
**       written read before an fdatasync that then succeeded: every write
**       counted up to it had completed when that flush began, and
**       fdatasync flushes the inode's dirty pages and the device cache,
**       whichever process or descriptor wrote them. With F1, a durable
**       ticket's commit and every commit before it in the log are durable:
**       what survives a power loss is a prefix.
**   F3  A failed flush sets poison: no ticket is acknowledged afterwards;
**       the failure reaches every waiter, in every process, until every
**       process has closed the database (the region is then recreated).
**   F5  Every commit takes a ticket, in every mode and process that has
**       a wal-index in shared memory (group commit or not). So durable >=
**       written means every published frame is durable, and a checkpoint's
**       sync (SQLite's sync before backfill, wal_file.c) is a wait for
**       the group's flush, not a flush of its own: without that, each
**       process's autocheckpoint would flush again what a group flush
**       just made durable. Not in the standard layout, whose region lives
**       in a side file (flush_side.h): only group-mode processes take
**       tickets there, stock processes never, so a checkpoint's sync
**       flushes (wal_file.c sync_and_share).
**   F6  framesDurable is raised only to a wal_index_end_mark() read before
**       an fdatasync that then succeeded: the frames it names were in the
**       file when that flush began, whoever wrote them (a stock process
**       too). A checkpoint's sync in the standard layout, where F5 does not
**       hold, is skipped only when this process's own writes are flushed and
**       framesDurable covers what the wal-index publishes now.
**   F4  Nobody waits forever. A dead leader's OFD lock is released by the
**       kernel. While a leader has held the lock for more than STUCK_MS
**       (stopped, or in a flush that never returns), or a waiter has
**       waited that long without leading (no descriptor it could lock),
**       waiters flush for themselves without it (the lock only spares
**       redundant flushes).
**       The leader lock is taken on a descriptor of its own that a
**       forked child closes, and fork() waits out a flush in progress
**       (log_open.c), so no child shares the description a leader locks.
**
** The region also publishes that a connection holds SQLite's checkpoint
** lock (ckptMs), for the writers of every process (restart_assist.c).
*/
#ifndef WALDIO_FLUSH_REGION_H
#define WALDIO_FLUSH_REGION_H

#include "wal_format.h"

typedef struct waldio_log waldio_log;

#define FLUSH_REGION_MAGIC 0x57444652u      /* "WDFR" */
#define FLUSH_WAKE_SLOTS   64               /* futex words, see flush_region.c */

/* In shared memory: every field is read and written with atomics. */
typedef struct flush_region {
  u32 unused;          /* the unix VFS truncates a wal-index it opens first
                       ** to 3 bytes, not 0: bytes 0-2 may hold anything */
  u32 magic;           /* FLUSH_REGION_MAGIC once a process has used it */
  u32 poison;          /* F3 */
  u32 writing;         /* a shared-group connection holds SQLite's WAL write
                       ** lock: a ticket is on its way */
  u32 unlocks;         /* futex word: bumped when a waldio connection
                       ** releases SQLite's WAL write lock */
  u32 lockWaiters;     /* connections waiting on `unlocks` */
  u32 flushUs;         /* a moving average of the flushes' durations */
  u32 gathering;       /* a leader waits on `unlocks` too */
  u32 ckptMs;          /* CLOCK_MONOTONIC ms (never 0) since a connection
                       ** took SQLite's checkpoint lock; 0 when none holds
                       ** it (restart_assist.c) */
  u64 leaderSince;     /* CLOCK_MONOTONIC us when the leader took its lock;
                       ** 0 while nobody leads (F4) */
  u64 written;         /* tickets handed out (F1) */
  u64 durable;         /* F2 */
  u64 flushes;         /* flushes made for waiters, all processes */
  u32 aWake[FLUSH_WAKE_SLOTS];   /* ticket t sleeps on aWake[t % SLOTS] */
  u64 flushing;        /* the largest `written` a flush began with */
  u32 waiters;         /* connections inside flush_region_wait: a flush
                       ** wakes nobody while it is 0 (flush_region.c) */
  u64 framesDurable;   /* wal_index_end_mark() read before a flush that
                       ** then succeeded: every frame up to it is durable
                       ** (the standard layout's checkpoint syncs, F6) */
  u32 lockMissMs;      /* CLOCK_MONOTONIC ms (never 0) when a connection
                       ** last gave up waiting for SQLite's WAL write lock
                       ** and went to SQLite's busy handler; 0: never */
} flush_region;

/* Check (and claim, when zeroed) a region this connection just mapped,
** taking a ticket for the frames already in the log (durable at once if
** the region was claimed already, or trustLog). SQLITE_OK, or an error if
** it holds something else (a libwaldio without shared group commit uses
** the region for SQLite's wal-index). */
int flush_region_attach(volatile flush_region *r, const char *zPath,
                        int trustLog);

/* F1: count a write that has completed. Returns its ticket. */
u64 flush_region_ticket(volatile flush_region *r);

/* A shared-group connection took (1) or releases (0) SQLite's WAL write
** lock: a leader waits a little for the commit it is making. */
void flush_region_writing(volatile flush_region *r, int on);

/* SQLite's WAL write lock, as a group-mode connection waits for it: the
** caller tries it with try(arg) (an SQLite result code); while busy, it
** sleeps until a waldio connection releases the lock (at most ms in all),
** instead of SQLite's busy handler's first sleeps of 1, 2 and 5 ms, each
** longer than a flush. Giving up, it marks the miss (lockMissMs).
** flush_region_released() is the other half. */
int flush_region_lock_write(volatile flush_region *r, int (*xTry)(void*),
                            void *arg, int ms);
void flush_region_released(volatile flush_region *r);
/* Return at once if nobody holds the WAL write lock, else when a waldio
** connection releases it, or after us microseconds. */
void flush_region_await_writer(volatile flush_region *r, int us);

/* A connection took (1) or released (0) SQLite's checkpoint lock. */
void flush_region_checkpointing(volatile flush_region *r, int on);
/* Whether a checkpoint holds that lock, and began less than STUCK_MS ago
** (one killed in its checkpoint left the mark behind: it is stale then). */
int flush_region_checkpoint_running(volatile flush_region *r);
/* Return once no checkpoint runs, or after ms. */
void flush_region_await_checkpoint(volatile flush_region *r, int ms);

/* A ticket whose commit is durable by how it was written (O_DSYNC): it
** counts as durable if every ticket before it is. */
void flush_region_self_durable(volatile flush_region *r, u64 ticket);

/* No commit is near: no connection waits for SQLite's WAL write lock (in
** flush_region_lock_write, or in SQLite's busy handler after it gave up
** there, as lately as its longest sleep) or for a flush, and every ticket
** handed out is durable. Advice, read without a lock (wal_file.c
** commit_shared). */
int flush_region_idle(volatile flush_region *r);

/* The last ticket handed out (what a reader's snapshot may contain). */
u64 flush_region_written(volatile flush_region *r);

/* Return once ticket is durable, leading a flush when nobody else does.
** An error if a flush failed (F3): the commit may not be durable. shm0:
** the caller's wal-index region 0 (NULL: none), for F6. */
int flush_region_wait(waldio_log *pLog, volatile flush_region *r, u64 ticket,
                      const volatile void *shm0);

/* F6: a flush that began after wal_index_end_mark() returned mark has
** succeeded; and whether every frame the mark names is known durable. */
void flush_region_frames_durable(volatile flush_region *r, u64 mark);
int flush_region_frames_cover(volatile flush_region *r, u64 mark);

/* A flush this process made for another reason (a commit's own, outside
** group mode) covered every ticket up to upto, read before it began. */
void flush_region_covered(volatile flush_region *r, u64 upto);

#endif
