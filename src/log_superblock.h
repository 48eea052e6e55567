/*
** log_superblock.h — block 0 of the slotted layouts (embed, pad4k, pad8k):
** waldio's guard header and superblock (docs/format.md §2), and the
** layout methods that read and write it, shared by layout_embed.c and
** layout_pad.c (wal_layout.h).
**
** Invariants (with wal_format.c F3, F4):
**   S1  Block 0 is written only under LOG_LOCK_INIT (open, convert,
**       re-lay-out, guard) or by the writer holding SQLite's WAL write lock
**       (a new generation): one writer at a time (wal_log.h L5).
**   S2  The file shrinks only after the block 0 that stops recovery from
**       reading past the cut is durable: a crash never leaves the prefix of
**       a generation whose frames the database already holds newer copies
**       of (older page images over newer ones).
*/
#ifndef WALDIO_LOG_SUPERBLOCK_H
#define WALDIO_LOG_SUPERBLOCK_H

#include "wal_log.h"

int sb_attach(waldio_log *pLog, const log_request *req,
              const wal_superblock *pFound, i64 size);
int sb_write_header(waldio_log *pLog, const u8 *aHdr, int flags);
int sb_read_header(waldio_log *pLog, u8 *aOut, int *pHas);
int sb_logical_size(waldio_log *pLog, i64 *pSize);
int sb_write_direct(waldio_log *pLog, i64 off, const u8 *buf, size_t n,
                    int dioFlags);
int sb_truncate(waldio_log *pLog, i64 size, i64 keepAtLeast);
int sb_close_clean(waldio_log *pLog, i64 idleKeep, int alone);

#endif
