/*
** log_group.h — group commit: the commits of several transactions made
** durable together (PRAGMA waldio_group, one mode per log and process).
**
**   async    the commit returns at once; its frames are written and
**            flushed (as the sync mode asks) within group_ms. A crash can
**            lose the commits of the last group_ms (+ one write).
**   durable  the commit returns only once it is durable; concurrent
**            committers share the flush (PostgreSQL's group commit: a lone
**            committer never waits for a timer). Other connections may
**            read a commit before it is durable (early lock release).
**   strict   durable, and a read transaction of this process begins only
**            once every commit it can see is durable.
**   auto     the default (issue 27): in the standard layout, strict for
**            the commits of synchronous=FULL and EXTRA connections, which
**            alone take tickets; a NORMAL or OFF commit is made as with
**            group commit off, and no reader waits for it (stock SQLite's
**            FULL and NORMAL, exactly: no reader sees a FULL commit before
**            it is durable). Off in the slotted layouts, where every commit
**            must take a ticket (flush_region.h F5), so readers would wait
**            for NORMAL commits too. It is stored as strict (or off) with
**            autoMode set.
**
** A mode runs one of two ways:
**   solo     while no other process has the log open, this process holds
**            LOG_LOCK_USE exclusively (wal_log.h L5) and a commit's frames
**            are appended to the log's group buffer instead of being
**            written by the committing connection. The buffer is written
**            with one aligned direct write (plus the flush the sync mode
**            asks for): async, when it holds group_bytes or group_ms after
**            its first commit, by the flusher thread (log_flusher.c);
**            durable, when SQLite has released the WAL write lock
**            (SQLITE_FCNTL_COMMIT_PHASETWO): the committer waits until a
**            group write covering its commit has finished, and if none is
**            under way, does one itself for everything buffered so far.
**   shared   once another process has the log open (when the mode was
**            switched on, or an opener knocked, LOG_LOCK_KNOCK), each
**            commit writes its own frames into the log under SQLite's write
**            lock, visible to every process, and only the flush is shared:
**            durable and strict wait in COMMIT_PHASETWO for a flush that
**            any process makes (flush_region.h); async arms a flush within
**            group_ms. A log stays shared until the mode is switched off.
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
**       close, a shared commit) writes the buffer first (group_write_all).
**   G5  solo is set only while this process holds USE exclusively. Leaving
**       solo clears it, writes the buffer (G4), and only then downgrades
**       USE: an opener never reads a published frame that only a buffer
**       of another process holds.
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
  i64 deadlineNs;           /* async: write (solo) or flush (shared) by
                            ** then; 0: nothing owed */
  int solo;                 /* G5 */
  i64 knockNs;              /* solo: when the flusher looks for a knock */
  const char *zWhy;         /* who set the mode (PRAGMA waldio), static;
                            ** 0: never set */
  int autoMode;             /* auto is in force (mode: strict, or off in a
                            ** slotted layout) */
  int byDefault;            /* the mode is the default's, chosen by no one:
                            ** an explicit setting of any opener replaces it */
} log_group;

void group_init(log_group *g);
void group_free(log_group *g);

/* What a commit needs from the group write that carries it. */
#define GROUP_FLUSH 0x1   /* fdatasync after the write (synchronous=FULL) */
#define GROUP_DSYNC 0x2   /* an O_DSYNC write (persistent) */
#define GROUP_ARM   0x4   /* the normal-mode flush timer (synchronous=NORMAL) */

/* Append the images of n consecutive new frames starting at first, the
** last of which is a commit frame. *pSeq receives the commit's number.
** Returns GROUP_NOT_SOLO, appending nothing, once the log is shared (G5):
** the caller commits the shared way. */
#define GROUP_NOT_SOLO 0x4e534f4c   /* not an SQLite result code */
int group_append(waldio_log *pLog, u32 first, u32 n, const u8 *img, int needs,
                 u64 *pSeq);

/* Durable mode: return once commit seq is durable (sharing writes). */
int group_wait(waldio_log *pLog, u64 seq);

/* G4: write everything buffered now (waits for a write under way). */
int group_write_all(waldio_log *pLog);

/* The flusher thread's part: write the buffer (solo) or flush (shared
** async) when the deadline passed; look for a knock (solo). Call with the
** log mutex held; they return with it held. */
void group_on_deadline(waldio_log *pLog);
void group_on_knock_poll(waldio_log *pLog);

/* A buffered or in-flight frame's image, copied into out; 1 if found.
** Mutex held. */
int group_lookup(const waldio_log *pLog, u32 frame, u8 *out);

/* Switch group commit for every connection of this process on this log
** (WALDIO_GROUP_*): solo if no other process has the log open, else
** shared (auto: never solo). Switching off writes and flushes what is
** owed. zWhy (static) says who asked, for PRAGMA waldio; 0: the default
** (auto), which leaves a mode that someone chose in force. */
int log_set_group(waldio_log *pLog, int mode, long long bytes, int ms,
                  const char *zWhy);
/* The mode in force: auto runs as WALDIO_GROUP_STRICT. */
int log_group_mode(waldio_log *pLog);
/* The mode as it was set: WALDIO_GROUP_AUTO where auto is in force. */
int log_group_setting(waldio_log *pLog);
/* Auto is in force and runs as strict: a commit not made at
** synchronous=FULL or EXTRA takes no ticket (wal_file.c). */
int log_group_auto(waldio_log *pLog);
/* The mode in force is the default's: no opener, URI, VFS option or PRAGMA
** chose one. */
int log_group_by_default(waldio_log *pLog);
/* Why the mode in force is in force (static text). */
#define GROUP_WHY_DEFAULT "the default (auto), before the log is open"
#define GROUP_WHY_AUTO "auto, the default: in the standard layout, commits" \
  " of synchronous=FULL and EXTRA connections share flushes across" \
  " processes, and no reader sees one before it is durable (strict);" \
  " NORMAL and OFF commits are made as with group commit off" \
  " (docs/durability.md, \"Group commit by default\")"
#define GROUP_WHY_AUTO_SLOTTED "auto, the default, is off in the slotted" \
  " layouts (embed, pad4k, pad8k): every commit takes a ticket there," \
  " so readers would wait for synchronous=NORMAL commits too" \
  " (docs/durability.md, \"Group commit by default\")"
#define GROUP_WHY_PRAGMA "PRAGMA waldio_group on a connection of this process"
#define GROUP_WHY_URI "the URI parameter waldio_group"
#define GROUP_WHY_VFS "the VFS's options (WALDIO_GROUP, waldio env --group" \
  " or waldio_register())"
const char *log_group_why(waldio_log *pLog);
int log_group_solo(waldio_log *pLog);

/* G5: another process knocked: write the buffer, go shared. */
int group_leave_solo(waldio_log *pLog);

/* Shared async: a commit was written; flush it within group_ms. */
void group_arm_async(waldio_log *pLog);

/* Strict, solo: return once every commit appended so far is durable. */
int group_wait_all(waldio_log *pLog);

#endif
