/*
** dio_file.h — one log file opened twice: once for direct I/O, once through
** the page cache. Opening and probing (alignment, file system, O_DIRECT
** support), aligned buffers, reads and writes, flushes, and durable
** zero-fill preallocation.
**
** Why two descriptors: a small durable commit is one aligned direct write
** (no page-cache copy, no writeback, never a journaled allocation), but
** everything else a database does to its log -- spilling a large
** transaction, rewriting an uncommitted frame, commits that need no flush
** (synchronous=NORMAL/OFF), and every read -- is cheapest through the page
** cache, exactly as stock SQLite does it. Linux keeps the two coherent: a
** direct write first writes back and afterwards drops the cached pages it
** covers, so a buffered read never sees stale bytes.
**
** Invariants:
**   D1  When `direct` is set, every direct write is `block`-aligned in
**       offset and length and uses a buffer from dio_alloc(). Reads and
**       buffered writes have no alignment rule.
**   D2  dio_zero_fill() leaves the range allocated as *written* zeros
**       (FALLOC_FL_WRITE_ZEROES or real zero writes, never plain
**       fallocate): a later overwrite is a pure overwrite that needs no
**       file-system journaling. It does not flush; callers do.
*/
#ifndef WALDIO_DIO_FILE_H
#define WALDIO_DIO_FILE_H

#include "syscalls.h"
#include "wal_format.h"
#include "waldio.h"

typedef struct dio_file {
  const waldio_syscalls *sys;
  const char *zPath;        /* borrowed: lives as long as the owner */
  int fd;                   /* O_DIRECT (when direct); holds the locks */
  int fdBuf;                /* the same file through the page cache (== fd
                            ** when !direct): reads and buffered writes */
  int direct;               /* O_DIRECT in effect */
  int readonly;
  u32 memAlign;             /* buffer alignment */
  u32 offAlign;             /* O_DIRECT offset/length alignment (statx) */
  u32 block;                /* the log's block size: >= offAlign, fs block */
  char zFs[16];             /* file system type name */
  const char *zDioSource;   /* where offAlign came from */
  int writeZeroes;          /* FALLOC_FL_WRITE_ZEROES: 1 ok, 0 untried, -1 no */
  int rwfDsync;             /* RWF_DSYNC: 1 ok, 0 untried, -1 no */
  int rwfNowait;            /* RWF_NOWAIT reads: 0 ok or untried, -1 no */
} dio_file;

/* Open (creating with mode if absent) and probe. *pCreated is set when the
** file did not exist. io is a WALDIO_IO_* policy. */
int dio_open(dio_file *f, const waldio_syscalls *sys, const char *zPath,
             int io, mode_t mode, int *pCreated);
void dio_close(dio_file *f);

/* Whether a log beside the file at zPath could use direct I/O (1), or why
** not (0, *pzWhy: FUSE, tmpfs, statx says none). Opens nothing. */
int dio_supported_at(const waldio_syscalls *sys, const char *zPath,
                     const char **pzWhy);

void *dio_alloc(const dio_file *f, size_t n);
void dio_free(void *p);

/* Read up to n bytes at off through the page cache; *pGot receives the
** count (short at EOF). */
int dio_read(dio_file *f, void *buf, size_t n, i64 off, size_t *pGot);

/* Read n bytes at off only if the page cache holds all of them: 1 (buf
** filled) or 0 (not cached, or the kernel cannot tell: read normally). */
int dio_read_cached(dio_file *f, void *buf, size_t n, i64 off);

/* Ask the kernel to read [off, off+len) into the page cache, in the
** background (POSIX_FADV_WILLNEED). Advisory: errors are ignored. */
void dio_prefetch(dio_file *f, i64 off, i64 len);

/* Write n bytes at off. Flags: DIO_DSYNC, the write is durable when this
** returns (RWF_DSYNC, or write + fdatasync where RWF_DSYNC is unavailable);
** DIO_BUFFERED, through the page cache (else direct, D1, when direct). */
#define DIO_DSYNC    0x1
#define DIO_BUFFERED 0x2
int dio_write(dio_file *f, const void *buf, size_t n, i64 off, int flags);

int dio_fdatasync(dio_file *f);
int dio_file_size(dio_file *f, i64 *pSize);
int dio_truncate(dio_file *f, i64 size);

/* Allocate [off, off+len) as written zeros (D2). cached: through the page
** cache (its blocks reserved first: ENOSPC comes from here), so that the
** zeros stay there: a later buffered write of part of a
** page then needs no read of it from the device. */
int dio_zero_fill(dio_file *f, i64 off, i64 len, int cached);

/* fsync the directory that holds zPath (after creating or renaming). */
int dio_sync_dir(const waldio_syscalls *sys, const char *zPath);

/* btrfs: mark an empty file NOCOW so direct writes stay direct. */
void dio_set_nocow(dio_file *f);

#endif
