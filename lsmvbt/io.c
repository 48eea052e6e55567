/*
** io.c — the system-call table (lsmvbt_io) and the few file helpers built
** on it: whole-buffer pread/pwrite, zero-fill, directory sync.
**
** Invariant: no other file of the engine calls open/pread/pwrite/fdatasync/
** fallocate/flock/rename/unlink directly; everything goes through an
** lsmvbt_io table, so a test or a crash recorder sees (and can fail) every
** system call, as with SQLite's os_unix.c aSyscall[].
*/
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

static int sys_open(const char *path, int flags, mode_t mode){
  return open(path, flags | O_CLOEXEC, mode);
}

static const lsmvbt_io real_io = {
  sys_open, close, pread, pwrite, fdatasync, fsync, fallocate, fstat, flock,
  rename, unlink
};
static lsmvbt_io g_default_io = {
  sys_open, close, pread, pwrite, fdatasync, fsync, fallocate, fstat, flock,
  rename, unlink
};

lsmvbt_io *lsmvbt_io_default(void){ return &g_default_io; }

static const struct { const char *zName; size_t off; } aIoName[] = {
  { "open",      offsetof(lsmvbt_io, xOpen) },
  { "close",     offsetof(lsmvbt_io, xClose) },
  { "pread",     offsetof(lsmvbt_io, xPread) },
  { "pwrite",    offsetof(lsmvbt_io, xPwrite) },
  { "fdatasync", offsetof(lsmvbt_io, xFdatasync) },
  { "fsync",     offsetof(lsmvbt_io, xFsync) },
  { "fallocate", offsetof(lsmvbt_io, xFallocate) },
  { "fstat",     offsetof(lsmvbt_io, xFstat) },
  { "flock",     offsetof(lsmvbt_io, xFlock) },
  { "rename",    offsetof(lsmvbt_io, xRename) },
  { "unlink",    offsetof(lsmvbt_io, xUnlink) },
};
#define N_IO_NAME (int)(sizeof(aIoName)/sizeof(aIoName[0]))

static int io_find(const char *zName){
  int i;
  if( zName==0 ) return -1;
  for(i=0; i<N_IO_NAME; i++) if( strcmp(aIoName[i].zName, zName)==0 ) return i;
  return -1;
}

int lsmvbt_io_set(lsmvbt_io *t, const char *zName, lsmvbt_io_fn fn){
  int i = io_find(zName);
  if( i<0 ) return LSMVBT_NOTFOUND;
  if( fn==0 ){
    memcpy((char*)t + aIoName[i].off, (const char*)&real_io + aIoName[i].off,
           sizeof(lsmvbt_io_fn));
  }else{
    memcpy((char*)t + aIoName[i].off, &fn, sizeof(fn));
  }
  return LSMVBT_OK;
}

lsmvbt_io_fn lsmvbt_io_get(const lsmvbt_io *t, const char *zName){
  lsmvbt_io_fn fn;
  int i = io_find(zName);
  if( i<0 ) return 0;
  memcpy(&fn, (const char*)t + aIoName[i].off, sizeof(fn));
  return fn;
}

const char *lsmvbt_io_next(const char *zName){
  int i;
  if( zName==0 ) return aIoName[0].zName;
  i = io_find(zName);
  if( i<0 || i+1>=N_IO_NAME ) return 0;
  return aIoName[i+1].zName;
}

/* Read exactly n bytes at off; bytes past the end of the file read as zero
** (a preallocated or never-written page is all zero). */
int lsm_read_full(lsmvbt_io *io, int fd, void *buf, size_t n, off_t off){
  size_t done = 0;
  while( done<n ){
    ssize_t r = io->xPread(fd, (char*)buf + done, n - done, off + (off_t)done);
    if( r<0 ){
      if( errno==EINTR ) continue;
      return LSMVBT_IOERR;
    }
    if( r==0 ){
      memset((char*)buf + done, 0, n - done);
      break;
    }
    done += (size_t)r;
  }
  return LSMVBT_OK;
}

int lsm_write_full(lsmvbt_io *io, int fd, const void *buf, size_t n, off_t off){
  size_t done = 0;
  while( done<n ){
    ssize_t r = io->xPwrite(fd, (const char*)buf + done, n - done, off + (off_t)done);
    if( r<0 ){
      if( errno==EINTR ) continue;
      return LSMVBT_IOERR;
    }
    if( r==0 ){ errno = EIO; return LSMVBT_IOERR; }
    done += (size_t)r;
  }
  return LSMVBT_OK;
}

/* Write zeros over [off, off+n). Used to preallocate: ext4 allocates the
** blocks now, and the fdatasync that follows journals that allocation once,
** so that later page writes are non-allocating overwrites (plain fallocate()
** would leave unwritten extents whose first write is itself journaled). */
int lsm_zero_fill(lsmvbt_io *io, int fd, off_t off, uint64_t n){
  static const uint8_t zeros[65536];
  while( n>0 ){
    size_t k = n>sizeof(zeros) ? sizeof(zeros) : (size_t)n;
    int rc = lsm_write_full(io, fd, zeros, k, off);
    if( rc ) return rc;
    off += (off_t)k;
    n -= k;
  }
  return LSMVBT_OK;
}

int lsm_sync_data(lsmvbt_io *io, int fd){
  for(;;){
    if( io->xFdatasync(fd)==0 ) return LSMVBT_OK;
    if( errno!=EINTR ) return LSMVBT_IOERR;
  }
}

/* fsync the directory holding zPath, so that a create or rename survives a
** power loss (the new name is in the directory's blocks). */
int lsm_sync_dir(lsmvbt_io *io, const char *zPath){
  char zDir[4096];
  const char *slash = strrchr(zPath, '/');
  int fd, rc = LSMVBT_OK;
  if( slash==0 ){
    strcpy(zDir, ".");
  }else if( slash==zPath ){
    strcpy(zDir, "/");
  }else{
    size_t n = (size_t)(slash - zPath);
    if( n>=sizeof(zDir) ) return LSMVBT_CANTOPEN;
    memcpy(zDir, zPath, n);
    zDir[n] = 0;
  }
  fd = io->xOpen(zDir, O_RDONLY|O_DIRECTORY, 0);
  if( fd<0 ) return LSMVBT_IOERR;
  if( io->xFsync(fd)!=0 ) rc = LSMVBT_IOERR;
  io->xClose(fd);
  return rc;
}
