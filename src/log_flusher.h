/*
** log_flusher.h — the background thread of a log: it bounds how long a log
** write can sit in the device's volatile cache without a flush, and writes
** the async group buffer on time.
**
** Under PRAGMA synchronous=NORMAL SQLite never syncs a commit; stock SQLite
** then relies on the kernel writing dirty pages back within ~30 s. waldio's
** direct writes are already on the device, in its write cache: the flusher
** issues one fdatasync no later than flush_ms after the first unflushed
** write, so power loss can cost at most flush_ms (+ one flush) of commits.
** In group async mode it also writes the group buffer (or, shared, flushes)
** at its deadline, and in solo group mode it looks every few milliseconds
** for another process knocking (log_group.h G5).
**
** One thread per log, started by the first event that needs it and joined
** when the log closes (or as the close of its last connection here begins,
** log_close_begins). It never runs SQLite code; a failed write or flush
** poisons the log (wal_log.h, L4) and is reported to the next write or sync.
*/
#ifndef WALDIO_LOG_FLUSHER_H
#define WALDIO_LOG_FLUSHER_H

#include "wal_log.h"

/* Arm the flush timer if it is not armed. Call with pLog->mutex held. */
void flusher_arm(waldio_log *pLog);

/* Make the thread look at its deadlines again (a group deadline changed).
** Call with pLog->mutex held. */
void flusher_wake(waldio_log *pLog);

/* Stop and join the thread (mutex NOT held). A later arm or wake starts
** another. */
void flusher_stop(waldio_log *pLog);

#endif
