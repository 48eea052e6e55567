/*
** syscalls.h — every system call libwaldio makes on a log, in one table.
**
** As in SQLite's os_unix.c, the log code never calls open/pwrite/fdatasync
** directly: it calls through a waldio_syscalls table owned by the registered
** VFS. Tests and the crash recorder replace entries with
** sqlite3_vfs.xSetSystemCall(vfs, "waldio_pwrite", fn) and see every write,
** flush and preallocation the log makes. Names not in this table are passed
** on to the VFS below (so "pwrite" still reaches the unix VFS).
*/
#ifndef WALDIO_SYSCALLS_H
#define WALDIO_SYSCALLS_H

#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <fcntl.h>

typedef struct waldio_syscalls {
  int (*xOpen)(const char *path, int flags, mode_t mode);
  int (*xClose)(int fd);
  ssize_t (*xPread)(int fd, void *buf, size_t n, off_t off);
  ssize_t (*xPreadv2)(int fd, const struct iovec *iov, int n, off_t off,
                      int flags);             /* RWF_NOWAIT: cached or not */
  int (*xFadvise)(int fd, off_t off, off_t len, int advice);
  ssize_t (*xPwrite)(int fd, const void *buf, size_t n, off_t off);
  ssize_t (*xPwritev2)(int fd, const struct iovec *iov, int n, off_t off,
                       int flags);
  int (*xFdatasync)(int fd);
  int (*xFsync)(int fd);
  int (*xFallocate)(int fd, int mode, off_t off, off_t len);
  int (*xFtruncate)(int fd, off_t len);
  int (*xFstat)(int fd, struct stat *st);
  int (*xFstatfs)(int fd, struct statfs *st);
  int (*xStatx)(int dirfd, const char *path, int flags, unsigned mask,
                struct statx *st);
  int (*xLock)(int fd, int cmd, struct flock *fl);   /* fcntl(F_OFD_*) */
  int (*xStat)(const char *path, struct stat *st);
  int (*xIoctl)(int fd, unsigned long req, void *arg);
  int (*xRename)(const char *from, const char *to);
  int (*xUnlink)(const char *path);
  int (*xFchmod)(int fd, mode_t mode);
  int (*xFchown)(int fd, uid_t uid, gid_t gid);
} waldio_syscalls;

/* One entry per replaceable call: its public name and where it lives. */
typedef void (*waldio_syscall_ptr)(void);

/* Fill t with the real system calls. */
void waldio_syscalls_default(waldio_syscalls *t);

/* Named access for xSetSystemCall/xGetSystemCall/xNextSystemCall.
** Return 0 if zName is not one of ours. */
int waldio_syscall_set(waldio_syscalls *t, const char *zName,
                       waldio_syscall_ptr p);
waldio_syscall_ptr waldio_syscall_get(const waldio_syscalls *t,
                                      const char *zName, int *pFound);
/* The name after zName (NULL: the first), or NULL after the last. */
const char *waldio_syscall_next(const char *zName);

#endif
