/*
** wal_layout.h — how a log keeps SQLite's logical WAL in its file: one
** interface, one file per layout, in the manner of sqlite3_io_methods.
**
**   layout_standard.c  SQLite's own WAL bytes at SQLite's offsets, and
**                      SQLite's own -shm: stock SQLite, the sqlite3 shell
**                      and Litestream share the database at any time
**   layout_embed.c     one frame = one page = whole blocks; the frame
**                      header in the page's last 24 reserved bytes
**   layout_pad.c       pad4k / pad8k: the header in a block of its own
**   log_superblock.c   block 0 of the two slotted layouts (embed, pad):
**                      guard header + superblock, shared by both
**
** Everything else is the same for every layout and knows nothing of them:
** wal_file.c assembles SQLite's writes into frame images and batches a
** transaction's frames; wal_log.c writes, reads, caches, preallocates and
** flushes them; log_open.c opens and closes the log. They reach a layout
** only through the methods below (pLog->pLayout), and its geometry
** (wal_geometry: where frame i lives, how big its image is), which every
** layout describes in the same terms:
**
**   frame i occupies [area + (i-1)*slot, area + i*slot) of the file, and
**   wf_frame_runs() says where each logical byte of it lies in that slot.
**
** For the slotted layouts area and slot are multiples of the block, so a
** batch of whole slots is one aligned direct write. The standard layout has
** area 32 and slot P+24: its frames straddle blocks, and its xWriteDirect
** completes the partial blocks at either end (layout_standard.c).
**
** Recovering and converting. SQLite recovers a log itself, through these
** methods (xReadHeader, frame reads mapped by the geometry); a log its layout
** cannot vouch for (a damaged block 0 or header in front of frames) is
** refused by xAttach, naming the way out, `waldio recover`
** (python/waldio/recover.py), which works offline. Converting between
** layouts goes through SQLite and an empty log (`waldio convert`,
** python/waldio/admin.py); a standard WAL met by an opener that asked for a
** slotted layout is re-laid at open (wal_convert.c).
*/
#ifndef WALDIO_WAL_LAYOUT_H
#define WALDIO_WAL_LAYOUT_H

#include "wal_format.h"

typedef struct waldio_log waldio_log;
typedef struct log_request log_request;

/* Properties (wal_layout.flags). */
#define LAYOUT_NATIVE_SHM 0x1   /* the wal-index is SQLite's own "<db>-shm"
                                ** (db_file.c), stock processes may share
                                ** the database: the flush region lives in a
                                ** side file (flush_side.c), commits are
                                ** never buffered in one process's memory
                                ** (no solo group mode), and a stock commit
                                ** carries no flush ticket */
#define LAYOUT_NEEDS_RESERVE 0x2  /* pages need 24 reserved bytes (embed) */
#define LAYOUT_PARTIAL_PAGES 0x4  /* frames straddle blocks: a commit through
                                  ** the page cache writes parts of pages,
                                  ** which must then be in the cache or be
                                  ** read first: the log's zero-fill goes
                                  ** through the page cache (wal_log.c) */

typedef struct wal_layout {
  int id;                       /* WALDIO_LAYOUT_* */
  const char *zName;
  unsigned flags;               /* LAYOUT_* */

  /* Map a logical offset: fill *g for pages of `page` bytes (0: not known
  ** yet) on blocks of `block` bytes. 0, or why this cannot work. Pure. */
  const char *(*xGeometry)(wal_geometry *g, u32 block, u32 page);

  /* A new frame (its 24-byte header and page) can be stored: SQLITE_OK, or
  ** an error naming zPath (embed: the reserved tail must be zero). */
  int (*xCheckFrame)(const wal_geometry *g, const u8 *aHdr, const u8 *aPage,
                     const char *zPath);

  /* Open: the file as found (pFound: its superblock, or NULL for an empty
  ** or standard-format file) becomes this layout's log. LOG_LOCK_INIT held
  ** (log_open.c). */
  int (*xAttach)(waldio_log *pLog, const log_request *req,
                 const wal_superblock *pFound, i64 size);

  /* SQLite wrote its 32-byte WAL header: a new generation. */
  int (*xWriteHeader)(waldio_log *pLog, const u8 *aHdr, int flags);

  /* The 32 bytes SQLite reads at offset 0 (another process may have
  ** written them); *pHas = 0 if the file SQLite sees holds none. Adopts the
  ** page size of a valid header. */
  int (*xReadHeader)(waldio_log *pLog, u8 *aOut, int *pHas);

  /* The file size SQLite should see. */
  int (*xLogicalSize)(waldio_log *pLog, i64 *pSize);

  /* Write a commit: one direct write of n bytes of frame images at file
  ** offset off (slot-aligned), below the log's durable end (wal_log.h L1),
  ** as whole blocks. dioFlags: DIO_DSYNC, and DIO_BUFFERED for the same
  ** whole blocks through the page cache (LOG_WHOLE_BLOCKS). */
  int (*xWriteDirect)(waldio_log *pLog, i64 off, const u8 *buf, size_t n,
                      int dioFlags);

  /* SQLite truncated the logical file to `size`; keep at least keepAtLeast
  ** bytes (wal_file.c decides). */
  int (*xTruncate)(waldio_log *pLog, i64 size, i64 keepAtLeast);

  /* The last connection anywhere closed after SQLite checkpointed every
  ** frame: leave at most idleKeep bytes that recovery would never replay.
  ** alone: no other process has the log open (log_lock.h USE). */
  int (*xCloseClean)(waldio_log *pLog, i64 idleKeep, int alone);
} wal_layout;

/* The layout with this id (WALDIO_LAYOUT_*, never AUTO), or NULL. */
const wal_layout *wal_layout_find(int id);

/* A standard WAL whose first n bytes are a: does it hold no generation --
** shorter than a header, or a whole header that frame 1's salts do not
** match (a clean close left it so, layout_standard.c)? A header that is
** damaged or zero with data after it holds something (T1). */
int wal_standard_holds_nothing(const u8 *a, size_t n);

extern const wal_layout wal_layout_standard;
extern const wal_layout wal_layout_embed;
extern const wal_layout wal_layout_pad4k;
extern const wal_layout wal_layout_pad8k;

#endif
