/*
** wal_index.h — reading SQLite's wal-index (the shared-memory regions SQLite
** maps through xShmMap) for advice only: which frames hold the newest copy
** of their page, so that a reader can ask the kernel for exactly those; how
** far the log is checkpointed, for restart_assist.c.
**
** The layout is SQLite's WAL-index format (src/wal.c, "WAL-INDEX FORMAT",
** unchanged since 3.7.0): 32 KiB regions; region 0 begins with two copies of
** the 48-byte header and the 40-byte checkpoint information (136 bytes),
** then lists the page number of frames 1..4062; every later region lists
** the page numbers of the next 4096 frames (and a hash table after them).
**
** Nothing here is trusted for correctness: another process may change the
** regions while they are read, and a wrong answer only prefetches the wrong
** blocks. Regions this connection never mapped end the walk.
*/
#ifndef WALDIO_WAL_INDEX_H
#define WALDIO_WAL_INDEX_H

#include "waldio.h"
#include "wal_format.h"

#define WAL_INDEX_REGION_BYTES 32768
#define WAL_INDEX_REGIONS      64     /* remembered: 262,206 frames */

/* The regions a database connection has mapped (db_file.c). */
typedef struct wal_index_view {
  const volatile void *apRegion[WAL_INDEX_REGIONS];
} wal_index_view;

/* Up to nMax frames of [1, mxFrame] that hold the newest copy of their
** page, in ascending order, into aFrame. Returns how many (0 if the view
** lacks a region, or memory is short: the caller falls back). */
/* mxFrame of the first header copy in region 0 (shm0), native order. */
u32 wal_index_mx_frame(const volatile void *shm0);

/* Where the published frames end, as one value: salt-1 of the generation
** (high 32 bits) and mxFrame (low), read from both header copies as SQLite
** reads them (walIndexTryHdr); 0 if they differ (a publication under way)
** or the wal-index is not initialized. This one is relied on: every frame
** up to mxFrame of that generation was in the log file when SQLite
** published it (wal.c writes frames before the header). */
u64 wal_index_end_mark(const volatile void *shm0);
/* The mark of frame (<= mxFrame) of the generation the wal-index shows now,
** comparable with wal_index_end_mark()'s; 0 if it cannot tell. */
u64 wal_index_frame_mark(const volatile void *shm0, u32 frame);

/* nBackfill, and aReadMark[i] (0 <= i < 5), of the checkpoint information. */
u32 wal_index_backfilled(const volatile void *shm0);
u32 wal_index_read_mark(const volatile void *shm0, int i);

int wal_index_newest_frames(const wal_index_view *v, u32 mxFrame,
                            u32 *aFrame, int nMax);

/* The page number frame iFrame (>= 1) holds, or 0 if its region is not
** mapped. */
u32 wal_index_frame_page(const wal_index_view *v, u32 iFrame);

#endif
