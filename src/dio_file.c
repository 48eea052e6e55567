/*
** dio_file.c — direct-I/O file primitives for the log (see dio_file.h).
**
** Why each step exists:
**   - O_DIRECT is given to open(), never added later with fcntl (MariaDB
**     MDEV-33379 corrupted data that way on some file systems).
**   - statx(STATX_DIOALIGN) says whether and how this file can do direct
**     I/O. ext4 reports 0 for data=journal, tmpfs reports nothing: both mean
**     "no O_DIRECT" even where open(O_DIRECT) succeeds. Without the statx
**     field, a block-device file system falls back to the device's logical
**     block size, as the kernel's own DIO checks do.
**   - The block size is at least the file system block (st_blksize): a
**     sub-block direct write makes ext4/xfs zero the rest of the block and
**     take an exclusive lock; whole-block overwrites take the fast path.
**   - Zero-fill, not fallocate: fallocate leaves unwritten extents whose
**     first write is a journaled conversion, the very cost waldio removes.
*/
#include "dio_file.h"
#include "errors.h"
#include "sqlite_api.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#ifndef FALLOC_FL_WRITE_ZEROES
# define FALLOC_FL_WRITE_ZEROES 0x80
#endif
#ifndef STATX_DIOALIGN
# define STATX_DIOALIGN 0x2000U
#endif
#ifndef RWF_DSYNC
# define RWF_DSYNC 0x2
#endif
#define ZERO_CHUNK (1u << 20)

static const struct { long magic; const char *zName; } aFs[] = {
  { EXT4_SUPER_MAGIC, "ext4" }, { XFS_SUPER_MAGIC, "xfs" },
  { BTRFS_SUPER_MAGIC, "btrfs" }, { TMPFS_MAGIC, "tmpfs" },
  { RAMFS_MAGIC, "ramfs" }, { F2FS_SUPER_MAGIC, "f2fs" },
  { OVERLAYFS_SUPER_MAGIC, "overlay" }, { NFS_SUPER_MAGIC, "nfs" },
  { FUSE_SUPER_MAGIC, "fuse" },
};

static void fs_name(dio_file *f, const struct statfs *st){
  size_t i;
  snprintf(f->zFs, sizeof(f->zFs), "0x%lx", (unsigned long)st->f_type);
  for(i=0; i<sizeof(aFs)/sizeof(aFs[0]); i++){
    if( (long)st->f_type==aFs[i].magic ){
      snprintf(f->zFs, sizeof(f->zFs), "%s", aFs[i].zName);
    }
  }
}

/* The logical block size of the device behind st_dev, or 0 if unknown. */
static u32 device_logical_block(dev_t dev){
  char zPath[128];
  const char *azFmt[] = { "/sys/dev/block/%u:%u/queue/logical_block_size",
                          "/sys/dev/block/%u:%u/../queue/logical_block_size" };
  size_t i;
  for(i=0; i<2; i++){
    FILE *p;
    unsigned v = 0;
    snprintf(zPath, sizeof(zPath), azFmt[i], major(dev), minor(dev));
    p = fopen(zPath, "r");
    if( !p ) continue;
    if( fscanf(p, "%u", &v)!=1 ) v = 0;
    fclose(p);
    if( v ) return v;
  }
  return 0;
}

/* Decide whether the open file can do direct I/O, and its alignment.
** Returns 1 with f->offAlign/memAlign set, or 0 with *pzWhy set. */
static int probe_dio(dio_file *f, const struct stat *st, const struct statfs *sf,
                     const char **pzWhy){
  struct statx sx;
  memset(&sx, 0, sizeof(sx));
  if( f->sys->xStatx(f->fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx)==0
   && (sx.stx_mask & STATX_DIOALIGN) ){
    if( sx.stx_dio_offset_align==0 ){
      *pzWhy = "statx reports no direct I/O support for this file"
               " (ext4 data=journal, inline data, verity or encryption?)";
      return 0;
    }
    f->offAlign = sx.stx_dio_offset_align;
    f->memAlign = sx.stx_dio_mem_align;
    f->zDioSource = "statx(STATX_DIOALIGN)";
    return 1;
  }
  if( sf->f_type==TMPFS_MAGIC || sf->f_type==RAMFS_MAGIC ){
    *pzWhy = "the file system is memory-backed (tmpfs/ramfs): O_DIRECT would"
             " be buffered I/O in disguise";
    return 0;
  }
  f->offAlign = device_logical_block(st->st_dev);
  f->zDioSource = "device logical block size";
  if( f->offAlign==0 ){
    f->offAlign = 4096;
    f->zDioSource = "assumed 4096 (no statx alignment, no block device)";
  }
  f->memAlign = f->offAlign;
  return 1;
}

int dio_supported_at(const waldio_syscalls *sys, const char *zPath,
                     const char **pzWhy){
  struct statfs sf;
  struct statx sx;
  if( statfs(zPath, &sf) ) return 1;      /* dio_open will say what is wrong */
  if( sf.f_type==FUSE_SUPER_MAGIC ){
    *pzWhy = "a FUSE file system (LiteFS and others check every write to"
             " -wal and cannot take direct or preallocating writes)";
    return 0;
  }
  if( sf.f_type==TMPFS_MAGIC || sf.f_type==RAMFS_MAGIC ){
    *pzWhy = "a memory-backed file system (tmpfs/ramfs) has no direct I/O";
    return 0;
  }
  memset(&sx, 0, sizeof(sx));
  if( sys->xStatx(AT_FDCWD, zPath, 0, STATX_DIOALIGN, &sx)==0
   && (sx.stx_mask & STATX_DIOALIGN) && sx.stx_dio_offset_align==0 ){
    *pzWhy = "statx reports no direct I/O support for this file system"
             " (ext4 data=journal, inline data, verity or encryption?)";
    return 0;
  }
  return 1;
}

static int open_fd(dio_file *f, int flags, mode_t mode, int *pCreated){
  int fd;
  *pCreated = 0;
  fd = f->sys->xOpen(f->zPath, flags|O_EXCL|O_CREAT, mode);
  if( fd>=0 ){
    *pCreated = 1;
  }else if( errno==EEXIST ){
    fd = f->sys->xOpen(f->zPath, flags, 0);
  }
  if( fd<0 && (errno==EACCES || errno==EROFS || errno==EPERM) ){
    fd = f->sys->xOpen(f->zPath, (flags & ~O_RDWR) | O_RDONLY, 0);
    if( fd>=0 ) f->readonly = 1;
  }
  return fd;
}

/* The page-cache descriptor of a direct file: opened by path (so that a
** recorder of system calls sees one file) and checked to be the same inode,
** which it is unless the path was replaced in between. */
static int open_buffered(dio_file *f){
  struct stat a, b;
  int fd = f->sys->xOpen(f->zPath, (f->readonly ? O_RDONLY : O_RDWR)|O_CLOEXEC|O_NOFOLLOW, 0);
  if( fd<0 ) return waldio_errno(SQLITE_CANTOPEN, errno, "cannot open log", f->zPath);
  if( f->sys->xFstat(fd, &a) || f->sys->xFstat(f->fd, &b)
   || a.st_dev!=b.st_dev || a.st_ino!=b.st_ino ){
    f->sys->xClose(fd);
    return waldio_error(SQLITE_BUSY, "%s: the log was replaced (by another"
                        " process) while it was being opened", f->zPath);
  }
  f->fdBuf = fd;
  return SQLITE_OK;
}

int dio_open(dio_file *f, const waldio_syscalls *sys, const char *zPath,
             int io, mode_t mode, int *pCreated){
  struct stat st;
  struct statfs sf;
  const char *zWhy = 0;
  int base = O_RDWR|O_CLOEXEC|O_NOFOLLOW;    /* as os_unix.c: never a link's target */
  int canDio;

  memset(f, 0, sizeof(*f));
  f->sys = sys;
  f->zPath = zPath;
  f->fdBuf = -1;
  f->fd = open_fd(f, base | (io==WALDIO_IO_BUFFERED ? 0 : O_DIRECT), mode,
                  pCreated);
  if( f->fd<0 && errno==EINVAL && io!=WALDIO_IO_BUFFERED ){
    zWhy = "open(O_DIRECT) failed with EINVAL";
    f->fd = open_fd(f, base, mode, pCreated);
  }
  if( f->fd<0 ) return waldio_errno(SQLITE_CANTOPEN, errno, "cannot open log", zPath);
  if( sys->xFstat(f->fd, &st) || sys->xFstatfs(f->fd, &sf) ){
    int rc = waldio_errno(SQLITE_CANTOPEN, errno, "cannot stat log", zPath);
    dio_close(f);
    return rc;
  }
  fs_name(f, &sf);
  canDio = zWhy==0 && io!=WALDIO_IO_BUFFERED && probe_dio(f, &st, &sf, &zWhy);
  if( !canDio && io==WALDIO_IO_DIRECT ){
    dio_close(f);
    if( *pCreated ) sys->xUnlink(zPath);
    return waldio_error(SQLITE_CANTOPEN,
        "%s: direct I/O is not available on this %s file system: %s. Put the"
        " database on a block-device file system (ext4, xfs), or open it with"
        " waldio_io=auto (use buffered writes where O_DIRECT is unavailable)"
        " or waldio_io=buffered", zPath, f->zFs, zWhy);
  }
  if( !canDio && io!=WALDIO_IO_BUFFERED ){
    /* auto: drop O_DIRECT by reopening; the file exists now. */
    int created;
    sys->xClose(f->fd);
    f->fd = open_fd(f, base, mode, &created);
    if( f->fd<0 ) return waldio_errno(SQLITE_CANTOPEN, errno, "cannot open log", zPath);
  }
  f->direct = canDio;
  f->fdBuf = f->fd;
  if( canDio ){
    int rc = open_buffered(f);
    if( rc ){ dio_close(f); return rc; }
  }
  if( !canDio ){
    f->offAlign = 1;
    f->memAlign = 8;
    f->zDioSource = zWhy ? zWhy : "buffered I/O requested";
  }
  f->block = (u32)st.st_blksize;
  if( f->block<f->offAlign ) f->block = f->offAlign;
  if( f->block<512 ) f->block = 512;
  if( f->block>65536 ) f->block = 65536;
  if( f->memAlign<64 ) f->memAlign = 64;
  return SQLITE_OK;
}

void dio_close(dio_file *f){
  if( f->fdBuf>=0 && f->fdBuf!=f->fd ) f->sys->xClose(f->fdBuf);
  if( f->fd>=0 ) f->sys->xClose(f->fd);
  f->fd = f->fdBuf = -1;
}

void *dio_alloc(const dio_file *f, size_t n){
  void *p = 0;
  size_t align = f->memAlign > 4096 ? f->memAlign : 4096;
  if( posix_memalign(&p, align, n ? n : align) ) return 0;
  memset(p, 0, n);
  return p;
}

void dio_free(void *p){ free(p); }

int dio_read(dio_file *f, void *buf, size_t n, i64 off, size_t *pGot){
  size_t got = 0;
  while( got<n ){
    ssize_t r = f->sys->xPread(f->fdBuf, (char*)buf + got, n - got, off + (i64)got);
    if( r<0 && errno==EINTR ) continue;
    if( r<0 ){
      return waldio_error(SQLITE_IOERR_READ, "read of %zu bytes at offset %lld"
                          " of %s failed: %s", n, (long long)off, f->zPath,
                          strerror(errno));
    }
    if( r==0 ) break;
    got += (size_t)r;
  }
  *pGot = got;
  return SQLITE_OK;
}

int dio_read_cached(dio_file *f, void *buf, size_t n, i64 off){
  struct iovec iov;
  ssize_t r;
  if( f->rwfNowait<0 ) return 0;
  iov.iov_base = buf;
  iov.iov_len = n;
  do{
    r = f->sys->xPreadv2(f->fdBuf, &iov, 1, off, RWF_NOWAIT);
  }while( r<0 && errno==EINTR );
  if( r<0 && (errno==EOPNOTSUPP || errno==EINVAL || errno==ENOSYS) ){
    f->rwfNowait = -1;        /* this kernel or file system cannot tell */
  }
  return r==(ssize_t)n;
}

void dio_prefetch(dio_file *f, i64 off, i64 len){
  if( len>0 ) (void)f->sys->xFadvise(f->fdBuf, off, len, POSIX_FADV_WILLNEED);
}

static int write_failed(dio_file *f, int err, size_t n, i64 off){
  int rc = (err==ENOSPC || err==EDQUOT) ? SQLITE_FULL : SQLITE_IOERR_WRITE;
  return waldio_error(rc, "write of %zu bytes at offset %lld of %s failed: %s",
                      n, (long long)off, f->zPath, strerror(err));
}

static int write_all(dio_file *f, int fd, const void *buf, size_t n, i64 off,
                     int flags){
  size_t done = 0;
  while( done<n ){
    ssize_t r;
    if( flags ){
      struct iovec iov;
      iov.iov_base = (char*)buf + done;
      iov.iov_len = n - done;
      r = f->sys->xPwritev2(fd, &iov, 1, off + (i64)done, flags);
    }else{
      r = f->sys->xPwrite(fd, (const char*)buf + done, n - done, off + (i64)done);
    }
    if( r<0 && errno==EINTR ) continue;
    if( r<0 ) return -errno;
    if( r==0 ) return -EIO;
    done += (size_t)r;
  }
  return 0;
}

int dio_write(dio_file *f, const void *buf, size_t n, i64 off, int flags){
  int fd = (flags & DIO_BUFFERED) ? f->fdBuf : f->fd;
  int r;
  if( (flags & DIO_DSYNC) && f->rwfDsync>=0 ){
    r = write_all(f, fd, buf, n, off, RWF_DSYNC);
    if( r==0 ){ f->rwfDsync = 1; return SQLITE_OK; }
    if( r!=-EOPNOTSUPP && r!=-EINVAL && r!=-ENOSYS ) return write_failed(f, -r, n, off);
    f->rwfDsync = -1;
  }
  r = write_all(f, fd, buf, n, off, 0);
  if( r ) return write_failed(f, -r, n, off);
  return (flags & DIO_DSYNC) ? dio_fdatasync(f) : SQLITE_OK;
}

int dio_fdatasync(dio_file *f){
  int r;
  do{ r = f->sys->xFdatasync(f->fd); }while( r<0 && errno==EINTR );
  if( r<0 ){
    return waldio_error(SQLITE_IOERR_FSYNC, "fdatasync of %s failed: %s",
                        f->zPath, strerror(errno));
  }
  return SQLITE_OK;
}

int dio_file_size(dio_file *f, i64 *pSize){
  struct stat st;
  if( f->sys->xFstat(f->fd, &st) ){
    return waldio_errno(SQLITE_IOERR_FSTAT, errno, "cannot stat", f->zPath);
  }
  *pSize = st.st_size;
  return SQLITE_OK;
}

int dio_truncate(dio_file *f, i64 size){
  if( f->sys->xFtruncate(f->fd, size) ){
    return waldio_errno(SQLITE_IOERR_TRUNCATE, errno, "cannot truncate", f->zPath);
  }
  return SQLITE_OK;
}

int dio_zero_fill(dio_file *f, i64 off, i64 len, int cached){
  void *zero;
  i64 done = 0;
  int rc = SQLITE_OK;
  if( len<=0 ) return SQLITE_OK;
  if( cached && f->sys->xFallocate(f->fd, 0, off, len)!=0
   && (errno==ENOSPC || errno==EDQUOT) ){
    /* Through the page cache, the blocks are reserved first: a full disk
    ** is this call's error, never a write-back's. */
    return write_failed(f, errno, (size_t)len, off);
  }
  if( !cached && f->writeZeroes>=0 ){
    if( f->sys->xFallocate(f->fd, FALLOC_FL_WRITE_ZEROES, off, len)==0 ){
      f->writeZeroes = 1;
      return SQLITE_OK;
    }
    if( errno==ENOSPC || errno==EDQUOT ) return write_failed(f, errno, (size_t)len, off);
    f->writeZeroes = -1;   /* EOPNOTSUPP, EINVAL (old kernel), ...: write them */
  }
  zero = dio_alloc(f, ZERO_CHUNK);
  if( !zero ) return SQLITE_NOMEM;
  while( done<len && rc==SQLITE_OK ){
    size_t n = (size_t)(len - done < ZERO_CHUNK ? len - done : ZERO_CHUNK);
    int r = write_all(f, cached ? f->fdBuf : f->fd, zero, n, off + done, 0);
    if( r ) rc = write_failed(f, -r, n, off + done);
    done += (i64)n;
  }
  dio_free(zero);
  return rc;
}

int dio_sync_dir(const waldio_syscalls *sys, const char *zPath){
  char zDir[4096];
  const char *zSlash = strrchr(zPath, '/');
  int fd, r;
  if( !zSlash ){
    snprintf(zDir, sizeof(zDir), ".");
  }else{
    snprintf(zDir, sizeof(zDir), "%.*s", (int)(zSlash==zPath ? 1 : zSlash - zPath), zPath);
  }
  fd = sys->xOpen(zDir, O_RDONLY|O_DIRECTORY|O_CLOEXEC, 0);
  if( fd<0 ) return waldio_errno(SQLITE_IOERR_DIR_FSYNC, errno, "cannot open directory", zDir);
  r = sys->xFsync(fd);
  if( r ) r = errno;
  sys->xClose(fd);
  if( r && r!=EINVAL ){
    return waldio_errno(SQLITE_IOERR_DIR_FSYNC, r, "fsync of directory", zDir);
  }
  return SQLITE_OK;
}

void dio_set_nocow(dio_file *f){
  int flags = 0;
  if( strcmp(f->zFs, "btrfs")!=0 ) return;
  if( f->sys->xIoctl(f->fd, FS_IOC_GETFLAGS, &flags)==0 ){
    flags |= FS_NOCOW_FL;
    f->sys->xIoctl(f->fd, FS_IOC_SETFLAGS, &flags);
  }
}
