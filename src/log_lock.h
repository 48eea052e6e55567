/*
** log_lock.h — the locks processes take on a waldio log file.
**
** They are open-file-description locks (fcntl F_OFD_SETLK), chosen over
** flock(2) and classic POSIX record locks for three properties:
**   - converting a shared lock to an exclusive one is atomic: a refused
**     upgrade keeps the shared lock (flock(2) drops it first, and a failed
**     LOCK_SH -> LOCK_EX|LOCK_NB leaves the process holding nothing);
**   - they belong to the open file, not the process: closing some other
**     descriptor of the same file (a conversion reading it, `waldio info`)
**     never drops them, as it would drop POSIX record locks;
**   - a child created by fork() shares its parent's open file and so its
**     locks: the child neither gains nor loses anything by exiting.
**
** Two bytes far beyond any data (advisory locks do not restrict I/O):
**
**   LOG_LOCK_INIT  exclusive while a process reads block 0 to open the log
**                  and writes it to initialize, convert, re-lay-out or guard
**                  it, and while the last user clears the guard at close.
**                  A read-only opener (which can hold no exclusive lock on
**                  its read-only descriptor) takes it shared to read block 0.
**   LOG_LOCK_USE   shared by every process that has the log open, from the
**                  end of its open to its close. Exclusive means "alone":
**                  taken, never waited for, while INIT is held (formatting,
**                  converting, the last close) or to switch on group commit.
**
**   LOG_LOCK_KNOCK shared by an opener that found USE held exclusively (a
**                  process in single-process group mode, log_group.h) while
**                  it waits: that process sees the knock (a probe, never a
**                  wait), writes what it buffers and downgrades USE.
**   LOG_LOCK_LEADER exclusive while a process flushes the log for every
**                  process's durable group commits (flush_region.h); only
**                  ever tried, on the log's leader descriptor (a forked
**                  child closes its copy: flush_region.c), and released
**                  before the flusher returns.
**   LOG_LOCK_LEADER2 the same, for a second flush that starts while the
**                  first is under way, for commits the first does not cover.
**   LOG_LOCK_ACTIVE shared by every process that has the log open and is not
**                  closing it: taken with USE, given up when SQLite's close of
**                  the process's last connection is refused the database
**                  lock it checkpoints under (log_open.c, the last close).
**   LOG_LOCK_CLOSER exclusive while one such refused closer waits for the
**                  other closers to leave; only ever tried.
**
** Lock order: INIT, then USE. USE is only ever *tried* (no wait) while INIT
** is held, so no two processes can wait for each other. KNOCK, LEADER,
** ACTIVE and CLOSER are never waited for.
*/
#ifndef WALDIO_LOG_LOCK_H
#define WALDIO_LOG_LOCK_H

#include "syscalls.h"

enum { LOG_LOCK_INIT = 0, LOG_LOCK_USE = 1, LOG_LOCK_KNOCK = 2,
       LOG_LOCK_LEADER = 3, LOG_LOCK_LEADER2 = 4, LOG_LOCK_ACTIVE = 5,
       LOG_LOCK_CLOSER = 6 };
enum { LOG_UNLOCKED = 0, LOG_SHARED = 1, LOG_EXCLUSIVE = 2 };

/* The file offset of lock byte `which` (as /proc/locks shows it). */
long long log_lock_offset(int which);

/* Set lock `which` to `mode` without waiting. Returns 0, EAGAIN if another
** open file holds a conflicting lock, or another errno. */
int log_lock(const waldio_syscalls *sys, int fd, int which, int mode);

/* The same, retrying for up to ms milliseconds while the answer is EAGAIN. */
int log_lock_wait(const waldio_syscalls *sys, int fd, int which, int mode,
                  int ms);

/* Non-zero if another open file holds lock `which` in a mode that
** conflicts with `mode` (F_OFD_GETLK: nothing is taken). */
int log_lock_held_elsewhere(const waldio_syscalls *sys, int fd, int which,
                            int mode);

#endif
