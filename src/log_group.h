/*
** log_group.h — group commit: the frames of several transactions written to
** the log (and flushed) together.
**
** In group modes a commit's frames are appended to the log's group buffer
** instead of being written by the committing connection:
**
**   async    the commit returns at once. The buffer is written with one
**            aligned direct write (plus the flush the sync mode asks for)
**            when it holds group_bytes or group_ms after its first commit,
**            by the flusher thread (log_flusher.c). A crash can lose the
**            commits of the last group_ms (+ one write).
**   durable  the commit returns only after its frames are durable: when
**            SQLite has released the WAL write lock (SQLITE_FCNTL_COMMIT_
**            PHASETWO), the committer waits until a group write covering
**            its commit has finished, and if none is under way, does one
**            itself for everything buffered so far (PostgreSQL's group
**            commit: concurrent committers share one write and one flush;
**            a lone committer never waits for a timer).
**
** Invariants:
**   G1  Buffered frames are contiguous: a frame that does not extend the
**       buffer makes the buffer written first.
**   G2  At most one group write is under way (busy); frames being written
**       stay readable from aFlight until they are in the cache.
**   G3  nDone counts the commits whose frames were written and flushed as
**       they asked; commit seq s is durable iff nDone >= s.
**   G4  Every path that needs the file to hold all frames (a read of a
**       non-published frame, a rewrite, a new generation, a checkpoint,
**       close) writes the buffer first (group_write_all).
** All functions take the log's mutex themselves unless noted.
*/
#ifndef WALDIO_LOG_GROUP_H
#define WALDIO_LOG_GROUP_H

#include "wal_format.h"
#include <pthread.h>

typedef struct waldio_log waldio_log;

typedef struct log_group {
  int mode;                 /* WALDIO_GROUP_* */
  long long capBytes;       /* write the buffer once it holds this much */
  int intervalMs;           /* async: ... or this long after its first commit */
  u8 *aBuf;                 /* frames [first, first+n), appended */
  u32 first, n, nAlloc;     /* nAlloc: capacity of aBuf in slots */
  int needs;                /* GROUP_* asked for by the buffered commits */
  u8 *aFlight;              /* frames [flFirst, flFirst+flN) being written */
  u32 flFirst, flN, flAlloc;
  u64 nAppended;            /* commits appended so far */
  u64 nDone;                /* G3 */
  int busy;                 /* G2 */
  pthread_cond_t cond;      /* broadcast when a group write ends */
  i64 deadlineNs;           /* async: write by then (0: nothing buffered) */
} log_group;

void group_init(log_group *g);
void group_free(log_group *g);

/* What a commit needs from the group write that carries it. */
#define GROUP_FLUSH 0x1   /* fdatasync after the write (synchronous=FULL) */
#define GROUP_DSYNC 0x2   /* an O_DSYNC write (persistent) */
#define GROUP_ARM   0x4   /* the normal-mode flush timer (synchronous=NORMAL) */

/* Append the images of n consecutive new frames starting at first, the
** last of which is a commit frame. *pSeq receives the commit's number. */
int group_append(waldio_log *pLog, u32 first, u32 n, const u8 *img, int needs,
                 u64 *pSeq);

/* Durable mode: return once commit seq is durable (sharing writes). */
int group_wait(waldio_log *pLog, u64 seq);

/* G4: write everything buffered now (waits for a write under way). */
int group_write_all(waldio_log *pLog);

/* The flusher thread's part: write the buffer if its deadline passed.
** Call with the log mutex held; returns with it held. */
void group_on_deadline(waldio_log *pLog);

/* A buffered or in-flight frame's image, copied into out; 1 if found.
** Mutex held. */
int group_lookup(const waldio_log *pLog, u32 frame, u8 *out);

#endif
