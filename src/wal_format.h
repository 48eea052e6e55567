/*
** wal_format.h — the physical waldio log format, as pure functions.
**
** Nothing here does I/O. This module owns:
**   - the geometry of a log (where frame i lives, how big a slot is), as
**     each layout describes it (wal_layout.h), and the rules that decide
**     which layout a database gets;
**   - the byte layout of block 0 (guard header + superblock);
**   - SQLite's WAL checksum, needed to build the guard header and to
**     validate a standard-format WAL before converting it;
**   - the translation between one physical slot and the bytes of the
**     logical frame SQLite believes it wrote.
** docs/format.md is the specification; section names in comments refer to it.
*/
#ifndef WALDIO_WAL_FORMAT_H
#define WALDIO_WAL_FORMAT_H

#include <stddef.h>
#include <stdint.h>

typedef uint8_t u8;
typedef uint32_t u32;
typedef int64_t i64;
typedef uint64_t u64;

/* SQLite's logical WAL (src/wal.c). */
#define WAL_HDR_BYTES        32
#define WAL_FRAME_HDR_BYTES  24
#define WAL_MAGIC_LE         0x377f0682u
#define WAL_MAGIC_BE         0x377f0683u
#define WAL_FORMAT_VERSION   3007000u

/* The guard header's version field: any value but 3007000 makes stock SQLite
** refuse the log with SQLITE_CANTOPEN instead of ignoring it (format.md §2). */
#define WALDIO_GUARD_VERSION 0x57414c44u       /* "WALD" */

#define WALDIO_SB_MAGIC      "WALDIOSB"
#define WALDIO_FORMAT        1u                /* superblock format version */
#define WALDIO_META_BYTES    512               /* block 0 metadata: one sector */

/* Offsets inside block 0 (format.md §2). */
#define SB_OFF_GUARD     0
#define SB_OFF_MAGIC     32
#define SB_OFF_FORMAT    40
#define SB_OFF_LAYOUT    44
#define SB_OFF_BLOCK     48
#define SB_OFF_AREA      52
#define SB_OFF_PAGE      56
#define SB_OFF_SLOT      60
#define SB_OFF_FLAGS     64
#define SB_OFF_SQLHDR    72
#define SB_OFF_CKSUM     104
#define SB_END           112

#define SB_FLAG_HAS_HEADER 0x1u   /* the log holds a generation of frames */
#define SB_FLAG_GUARD      0x2u   /* a waldio process may be using the log:
                                  ** keep stock SQLite out even when empty */

enum {
  WALDIO_LAYOUT_AUTO_ = 0,
  WALDIO_LAYOUT_EMBED_ = 1,   /* mirrors WALDIO_LAYOUT_* in waldio.h */
  WALDIO_LAYOUT_PAD4K_ = 2,
  WALDIO_LAYOUT_PAD8K_ = 3,
  WALDIO_LAYOUT_STANDARD_ = 4
};

/* Where things are in a log with a known page size. */
typedef struct wal_geometry {
  u32 layout;      /* WALDIO_LAYOUT_* */
  u32 block;       /* block size B: every write is B-aligned, B-sized */
  u32 area;        /* header area A: frame 1 starts here */
  u32 page;        /* SQLite page size P (0 = not known yet) */
  u32 slot;        /* physical bytes per frame S (0 while P unknown) */
  u32 hdr_in_slot; /* offset of the 24-byte frame header inside a slot */
  u32 page_in_slot;/* offset of the page inside a slot */
  u32 page_stored; /* bytes of the page the slot stores: P, or P-24 where
                   ** the header takes the page's last 24 bytes (embed),
                   ** which are logically always zero */
} wal_geometry;

/* The decoded superblock. */
typedef struct wal_superblock {
  wal_geometry geo;
  u32 format;
  u32 flags;
  u8 sqlite_hdr[WAL_HDR_BYTES];  /* valid iff flags & SB_FLAG_HAS_HEADER */
} wal_superblock;

/* Big-endian helpers, as SQLite stores WAL integers. */
u32 wf_get32(const u8 *p);
void wf_put32(u8 *p, u32 v);

/* SQLite's WAL checksum over n bytes (n a multiple of 8), continuing from
** in[2] (NULL: start at zero). bigEndian selects how words are read; SQLite
** uses big-endian words iff the header magic's low bit is set. */
void wf_checksum(int bigEndian, const u8 *a, size_t n, const u32 *in, u32 *out);

/* Fill *g for layout/block/page; page may be 0 (geometry without slots):
** checks block and page, then asks the layout (wal_layout.h xGeometry).
** Returns 0, or a static string saying why this combination cannot work. */
const char *wf_geometry(wal_geometry *g, u32 layout, u32 block, u32 page);

/* The layout a new log gets for a database of `page`-byte pages with
** `reserve` reserved bytes per page (page 0: not known yet) on blocks of
** `block` bytes, when `asked` was requested (WALDIO_LAYOUT_*; 0 = auto:
** standard). *pzWhy says why, for PRAGMA waldio. Returns the layout, or 0
** if an explicitly asked layout cannot hold these pages (*pzWhy: why). */
u32 wf_choose_layout(u32 asked, u32 block, u32 page, u32 reserve,
                     const char **pzWhy);

/* Physical offset of frame i (1-based) and of the byte just past it. */
i64 wf_slot_offset(const wal_geometry *g, u32 frame);

/* Logical offsets (SQLite's view). */
i64 wf_logical_frame_offset(u32 page, u32 frame);

/* Logical size SQLite should see for a physical file of phys bytes (the
** slotted layouts: whole slots only). */
i64 wf_logical_size(const wal_geometry *g, i64 phys, int hasHeader);

/* Physical bytes needed so that the logical file can hold `logical` bytes. */
i64 wf_physical_for_logical(const wal_geometry *g, i64 logical);

/* Parse a 32-byte SQLite WAL header. Returns 1 if magic, page size and
** checksum are valid; *version and *page receive the fields. */
int wf_parse_sqlite_header(const u8 *h, u32 *version, u32 *page);

/* Build the guard header from SQLite's own header (same magic, page size,
** salts; version WALDIO_GUARD_VERSION; checksum recomputed), or, with
** sqliteHdr NULL, from nothing but a page size. */
void wf_make_guard(const u8 *sqliteHdr, u32 page, u8 *guard);

/* Encode block 0 metadata into meta[WALDIO_META_BYTES] (zeroed first). */
void wf_encode_block0(const wal_superblock *sb, u8 *meta);

/* Decode block 0. Returns 1 if a valid superblock is present, 0 if there is
** none, -1 if one is present but damaged. */
int wf_decode_block0(const u8 *meta, wal_superblock *sb);

/* A block 0 that wf_decode_block0() finds damaged, read as the write that
** tore it left it (F3 assumed sectors whole; a power loss may garble the
** bytes a write changes): 1, with *sb, if its SQLite header copy is whole
** by SQLite's own checksum (or all zero) and every other field agrees, the
** flags recomputed from the copy; else 0. */
int wf_decode_block0_torn(const u8 *meta, wal_superblock *sb);

/* Which check of a damaged block 0 failed, in words (a static string), or
** NULL if wf_decode_block0() accepts it or it is no waldio log at all. A
** missing magic counts as damage only next to a guard header (F4). */
const char *wf_block0_damage(const u8 *meta);

/* Logical frame bytes [lo, hi) (0 <= lo < hi <= P+24) of a slot image. */
void wf_slot_to_logical(const wal_geometry *g, const u8 *slot, u32 lo, u32 hi,
                        u8 *out);

/* Apply logical frame bytes [lo, hi) to a slot image. Returns 0, or 1 if
** the result would leave non-zero bytes in the embedding tail (the page's
** last 24 bytes), which header embedding cannot store. */
int wf_logical_to_slot(const wal_geometry *g, u8 *slot, u32 lo, u32 hi,
                       const u8 *in);

/* Where logical frame bytes [lo,hi) live in a slot: up to three runs, in
** logical order. A run with inSlot < 0 is the embed layout's page tail,
** logically always zero and not stored (the header is there). */
typedef struct wf_run {
  u32 lo;          /* logical offset within the frame */
  u32 n;           /* bytes */
  i64 inSlot;      /* offset within the slot, or -1 */
} wf_run;
int wf_frame_runs(const wal_geometry *g, u32 lo, u32 hi, wf_run *aRun);

/* Non-zero if the last 24 bytes of a page are all zero. */
int wf_tail_is_zero(const u8 *page, u32 pageSize);

#endif
