/*
** frame_cache.h — a bounded cache of recently written log slots.
**
** Direct writes bypass (and drop) the page cache, so without this every
** WAL read after a direct commit (page lookups, checkpoint backfill) would
** go to the device. The cache is direct-mapped on the frame number: slot
** (frame-1) % nSlot. Frames are written in ascending order, so it always
** holds the most recent nSlot frames written by this process.
**
** Invariants:
**   C1  An entry holds the exact physical slot image last written for that
**       frame by this process (frame 0 marks an empty entry). Only commits
**       written as whole blocks are cached, directly or (a commit beside
**       the standard layout's header, wal_log.h LOG_WHOLE_BLOCKS) through
**       the page cache; what else goes through the page cache is read back
**       from there, and forgets the frame's entry.
**   C2  The cache knows nothing about other processes: wal_log.c decides
**       when entries may be trusted (the wal-index epoch check) and clears
**       the cache otherwise.
** Not thread-safe: the owning log's mutex guards it.
*/
#ifndef WALDIO_FRAME_CACHE_H
#define WALDIO_FRAME_CACHE_H

#include "wal_format.h"
#include <stddef.h>

typedef struct frame_cache {
  u32 nSlot;        /* 0: cache disabled */
  u32 slotBytes;
  u32 *aFrame;      /* frame number held by each entry, 0 = empty */
  u8 *aData;        /* nSlot * slotBytes, block-aligned */
} frame_cache;

/* (Re)size for slots of slotBytes within budget bytes. Returns 0 or -1 on
** out of memory (the cache is then disabled, which is safe). */
int frame_cache_init(frame_cache *c, long long budget, u32 slotBytes, size_t align);
void frame_cache_free(frame_cache *c);
void frame_cache_clear(frame_cache *c);

/* The image of frame, or NULL. */
const u8 *frame_cache_get(const frame_cache *c, u32 frame);
void frame_cache_put(frame_cache *c, u32 frame, const u8 *img);
/* Drop frame's entry, if any (its slot was written some other way). */
void frame_cache_forget(frame_cache *c, u32 frame);

#endif
