/*
** flush_side.h — the side file "<db>-waldio" that holds the flush region
** (flush_region.h) of a log whose wal-index is SQLite's own "<db>-shm"
** (the standard layout, wal_layout.h LAYOUT_NATIVE_SHM).
**
** Stock SQLite owns "<db>-shm": it truncates and re-initializes it, and
** maps its regions as the WAL grows, so waldio's shared flush state cannot
** live there. The side file follows the same rules the unix VFS gives
** "-shm" (os_unix.c unixOpenSharedMemory), with an OFD lock byte as its
** dead-man switch:
**   - every process that maps it holds SIDE_LOCK_DMS shared, for as long
**     as its log is open;
**   - the first (DMS granted exclusively, so no other process maps it)
**     zeroes it -- a valid empty region -- then downgrades to shared; so
**     a region poisoned by a failed flush (F3) or left behind by a crash
**     lives exactly as long as some process still has it mapped.
** Only processes in group commit map it: waldio's other processes, and
** stock ones, take no ticket and need none (a stock commit is durable or
** not by its own sync; flush_region.h F5 does not hold in this layout).
**
** It may be missing, unreadable, or owned by another user. Then this
** process has no flush region: its group-mode commits make themselves
** durable as group commit off does, and PRAGMA waldio says why. A region
** owned by another user is refused: whoever can write it can mark a commit
** durable that is not.
*/
#ifndef WALDIO_FLUSH_SIDE_H
#define WALDIO_FLUSH_SIDE_H

#include "flush_region.h"
#include "shm_watch.h"
#include "syscalls.h"

#include <pthread.h>
#include <sys/types.h>

typedef struct flush_side {
  pthread_mutex_t mutex;     /* the first open */
  int tried;                 /* an open was attempted */
  int fd;                    /* -1: none */
  volatile flush_region *pRegion;   /* mapped, or NULL */
  size_t nMap;
  mode_t mode;               /* the database file's mode and owner */
  uid_t uid;
  gid_t gid;
  char zWhy[600];            /* why there is no region, or "" */
  shm_watch watch;           /* flush_side_sole_users: when to count again,
                             ** and what the last count found */
  char *zShm, *zSide;        /*   the files it counts ("<db>-shm", the side
                             ** file), set with the region */
} flush_side;

void flush_side_init(flush_side *s, mode_t mode, uid_t uid, gid_t gid);

/* The region of the log at zWalPath ("<db>-wal"), mapped at the first call
** (the side file created if absent; trustLog: flush_region_attach); NULL
** if there is none (s->zWhy says why; *pRc is SQLITE_OK) or on an error
** (*pRc). */
volatile flush_region *flush_side_region(flush_side *s,
                                         const waldio_syscalls *sys,
                                         const char *zWalPath, int trustLog,
                                         int *pRc);

/* Non-zero if every process that has the database open maps the region
** (is in group commit): no process holds SQLite's -shm dead-man switch
** that does not hold the side file's (both counted in /proc/locks, which
** needs no descriptor), as last counted: again only after "-shm" or the
** side file was opened or closed (shm_watch.h W1). *pCounted: whether this
** call counted. */
int flush_side_sole_users(flush_side *s, int *pCounted);

/* Unmap and close (a forked child's inherited copy too). */
void flush_side_close(flush_side *s, const waldio_syscalls *sys);

#endif
