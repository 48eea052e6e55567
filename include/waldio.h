/*
** waldio.h — public API of libwaldio.
**
** libwaldio is a SQLite VFS shim. Stacked on the default ("unix") VFS, it
** stores each database's write-ahead log in a preallocated, zero-filled file
** written with direct I/O, one aligned block-sized slot per frame, so that a
** log commit is one block overwrite that never makes the file system journal
** its own metadata. The database file itself passes through unchanged.
**
** Two ways to use it:
**   1. Link libwaldio and call waldio_register() once, before opening
**      databases. Open databases with the VFS name you registered (or make it
**      the default VFS).
**   2. Load the extension waldio.so into any SQLite >= 3.32:
**        .load ./waldio                         (sqlite3 shell)
**        sqlite3_load_extension(db, "waldio.so", 0, &err)
**      Its entry point sqlite3_waldio_init registers the VFS "waldio" as the
**      default VFS for the whole process and stays loaded.
**
** Per-database options are URI parameters (file:x.db?waldio_layout=pad4k):
**   waldio_layout    auto | standard | embed | pad4k | pad8k (log layout)
**   waldio_sync      auto | persistent | ns     (see below)
**   waldio_io        direct | auto | buffered   (O_DIRECT policy)
**   waldio_prealloc  bytes (K/M/G suffix ok)    (initial log size)
**   waldio_cache     bytes                      (recent-frame cache)
**   waldio_flush_ms  milliseconds               (normal-mode flush bound)
**   waldio_group     off | async | durable | strict | auto (group commit;
**                    auto, the default: docs/durability.md)
**   waldio_group_bytes, waldio_group_ms         (group buffer and interval)
** and, at run time, PRAGMA waldio; PRAGMA waldio_sync; PRAGMA waldio_stats;
** PRAGMA waldio_flush_ms; PRAGMA waldio_group (and _bytes, _ms).
** docs/usage.md describes each; docs/format.md the
** on-disk format; docs/durability.md what each mode promises.
**
** Every failure is also described in words: through sqlite3_log() and
** waldio_last_error() (and the SQL function waldio_last_error()).
*/
#ifndef WALDIO_H
#define WALDIO_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef WALDIO_API
# define WALDIO_API
#endif

#define WALDIO_VERSION       "0.1.0"
#define WALDIO_VFS_NAME      "waldio"

/* Physical layouts of the log (docs/format.md §3). */
#define WALDIO_LAYOUT_AUTO   0   /* an existing log keeps its layout; a new
                                 ** log is standard: never refuses a database */
#define WALDIO_LAYOUT_EMBED  1   /* frame header in the page's reserved tail:
                                 ** one frame = one page = whole blocks.
                                 ** Needs >= 24 reserved bytes per page. */
#define WALDIO_LAYOUT_PAD4K  2   /* header in its own 4 KiB block + page */
#define WALDIO_LAYOUT_PAD8K  3   /* the same, frames aligned to 8 KiB */
#define WALDIO_LAYOUT_STANDARD 4 /* SQLite's own -wal and -shm bytes: stock
                                 ** SQLite, the sqlite3 shell and Litestream
                                 ** share the database; waldio changes only
                                 ** how the bytes reach the disk */

/* How commits reach stable storage (docs/durability.md). */
#define WALDIO_SYNC_AUTO       0 /* follow PRAGMA synchronous: FULL => direct
                                 ** write + fdatasync per commit; NORMAL =>
                                 ** write through the page cache, flushed
                                 ** within flush_ms; OFF => page cache only */
#define WALDIO_SYNC_PERSISTENT 1 /* every log write is O_DSYNC (FUA where the
                                 ** device has it): durable when it returns */
#define WALDIO_SYNC_NS         2 /* as AUTO, but synchronous=NORMAL commits are
                                 ** direct writes (the paper's NS): they also
                                 ** survive an OS crash; flushed within flush_ms */

/* Group commit (docs/durability.md). */
#define WALDIO_GROUP_OFF     0   /* every commit written on its own */
#define WALDIO_GROUP_ASYNC   1   /* commits return once buffered; the buffer
                                 ** is written (and flushed as the sync mode
                                 ** asks) when full or after group_ms: may
                                 ** lose the last group_ms of commits */
#define WALDIO_GROUP_DURABLE 2   /* a commit returns once durable; concurrent
                                 ** committers, in any process, share one
                                 ** flush (others may read it before) */
#define WALDIO_GROUP_STRICT  3   /* durable, and this process's readers never
                                 ** see a commit before it is durable */
#define WALDIO_GROUP_AUTO    4   /* the default: in the standard layout,
                                 ** strict for synchronous=FULL and EXTRA
                                 ** commits, while NORMAL and OFF commits
                                 ** are made as with group commit off; off
                                 ** in the slotted layouts */

/* Direct I/O policy. */
#define WALDIO_IO_DIRECT     0   /* O_DIRECT or a clear error at open */
#define WALDIO_IO_AUTO       1   /* O_DIRECT where supported, else buffered */
#define WALDIO_IO_BUFFERED   2   /* never O_DIRECT (comparison, tmpfs) */

/* Custom file-control opcode (above SQLite's reserved range) with which a
** shim stacked above waldio finds waldio's database file object. */
#define WALDIO_FCNTL_SELF    0x57414c01

typedef struct waldio_options {
  int layout;                 /* WALDIO_LAYOUT_*, default AUTO */
  int sync;                   /* WALDIO_SYNC_*, default AUTO */
  int io;                     /* WALDIO_IO_*, default DIRECT */
  long long prealloc_bytes;   /* initial log preallocation, default 4 MiB */
  long long cache_bytes;      /* recent-frame cache per log, default 4 MiB */
  int flush_ms;               /* normal-mode flush bound, default 100 ms */
  int group;                  /* WALDIO_GROUP_*, default OFF */
  long long group_bytes;      /* group buffer, default 16 KiB */
  int group_ms;               /* async group interval, default 2 ms */
} waldio_options;

/* Fill *o with the defaults. */
WALDIO_API void waldio_options_default(waldio_options *o);

/*
** Register a waldio VFS named zName (NULL: "waldio") on top of the current
** default VFS. With makeDefault, it becomes the default VFS. pOpts may be
** NULL for the defaults; URI parameters override them per database.
** Returns SQLITE_OK, or an SQLite error code (see waldio_last_error()).
** Requires SQLite >= 3.32.0.
*/
WALDIO_API int waldio_register(const char *zName, int makeDefault,
                    const waldio_options *pOpts);

/* Unregister a VFS registered with waldio_register(). Databases using it
** must be closed first; SQLITE_BUSY otherwise. */
WALDIO_API int waldio_unregister(const char *zName);

/*
** Copy the most recent error message of libwaldio in this process into
** buf (always NUL-terminated when n > 0). Returns the SQLite result code of
** that error, or 0 (SQLITE_OK) if none has occurred.
*/
WALDIO_API int waldio_last_error(char *buf, size_t n);

/*
** Detach a database from waldio so that stock SQLite can open it: open it
** through the waldio VFS zVfs (NULL: "waldio"), checkpoint the whole log
** into the database and leave WAL mode (PRAGMA journal_mode=DELETE), which
** deletes the log. Fails with SQLITE_BUSY while other connections are open.
*/
WALDIO_API int waldio_detach(const char *zDbPath, const char *zVfs);

#ifdef __cplusplus
}
#endif
#endif
