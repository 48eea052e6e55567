/*
** syscalls.c — the default system calls behind waldio_syscalls and the
** name table through which xSetSystemCall replaces them (see syscalls.h).
*/
#include "syscalls.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <stdio.h>
#include <unistd.h>

static int sys_open(const char *path, int flags, mode_t mode){
  return open(path, flags, mode);
}
static int sys_ioctl(int fd, unsigned long req, void *arg){
  return ioctl(fd, req, arg);
}
static int sys_lock(int fd, int cmd, struct flock *fl){
  return fcntl(fd, cmd, fl);
}

/* fchmod and fchown that also take an O_PATH descriptor (log_owner.c opens
** the wal-index that way: closing such a descriptor releases none of this
** process's POSIX locks on the file, which the unix VFS holds on it). */
static int sys_fchmod(int fd, mode_t mode){
  char zProc[32];
  if( fchmod(fd, mode)==0 ) return 0;
  if( errno!=EBADF ) return -1;
  snprintf(zProc, sizeof(zProc), "/proc/self/fd/%d", fd);
  return chmod(zProc, mode);
}

static int sys_fchown(int fd, uid_t uid, gid_t gid){
  return fchownat(fd, "", uid, gid, AT_EMPTY_PATH);
}

void waldio_syscalls_default(waldio_syscalls *t){
  t->xOpen = sys_open;
  t->xClose = close;
  t->xPread = pread;
  t->xPreadv2 = preadv2;
  t->xFadvise = posix_fadvise;
  t->xPwrite = pwrite;
  t->xPwritev2 = pwritev2;
  t->xFdatasync = fdatasync;
  t->xFsync = fsync;
  t->xFallocate = fallocate;
  t->xFtruncate = ftruncate;
  t->xFstat = fstat;
  t->xFstatfs = fstatfs;
  t->xStatx = statx;
  t->xLock = sys_lock;
  t->xStat = stat;
  t->xIoctl = sys_ioctl;
  t->xRename = rename;
  t->xUnlink = unlink;
  t->xFchmod = sys_fchmod;
  t->xFchown = sys_fchown;
}

static const struct { const char *zName; size_t off; } aName[] = {
  { "waldio_open",      offsetof(waldio_syscalls, xOpen) },
  { "waldio_close",     offsetof(waldio_syscalls, xClose) },
  { "waldio_pread",     offsetof(waldio_syscalls, xPread) },
  { "waldio_preadv2",   offsetof(waldio_syscalls, xPreadv2) },
  { "waldio_fadvise",   offsetof(waldio_syscalls, xFadvise) },
  { "waldio_pwrite",    offsetof(waldio_syscalls, xPwrite) },
  { "waldio_pwritev2",  offsetof(waldio_syscalls, xPwritev2) },
  { "waldio_fdatasync", offsetof(waldio_syscalls, xFdatasync) },
  { "waldio_fsync",     offsetof(waldio_syscalls, xFsync) },
  { "waldio_fallocate", offsetof(waldio_syscalls, xFallocate) },
  { "waldio_ftruncate", offsetof(waldio_syscalls, xFtruncate) },
  { "waldio_fstat",     offsetof(waldio_syscalls, xFstat) },
  { "waldio_fstatfs",   offsetof(waldio_syscalls, xFstatfs) },
  { "waldio_statx",     offsetof(waldio_syscalls, xStatx) },
  { "waldio_lock",      offsetof(waldio_syscalls, xLock) },
  { "waldio_stat",      offsetof(waldio_syscalls, xStat) },
  { "waldio_ioctl",     offsetof(waldio_syscalls, xIoctl) },
  { "waldio_rename",    offsetof(waldio_syscalls, xRename) },
  { "waldio_unlink",    offsetof(waldio_syscalls, xUnlink) },
  { "waldio_fchmod",    offsetof(waldio_syscalls, xFchmod) },
  { "waldio_fchown",    offsetof(waldio_syscalls, xFchown) },
};
#define N_NAME (int)(sizeof(aName)/sizeof(aName[0]))

static int find_name(const char *zName){
  int i;
  for(i=0; i<N_NAME; i++){
    if( strcmp(aName[i].zName, zName)==0 ) return i;
  }
  return -1;
}

static waldio_syscall_ptr *slot_of(waldio_syscalls *t, int i){
  return (waldio_syscall_ptr*)((char*)t + aName[i].off);
}

int waldio_syscall_set(waldio_syscalls *t, const char *zName,
                       waldio_syscall_ptr p){
  waldio_syscalls dflt;
  int i = find_name(zName);
  if( i<0 ) return 0;
  memset(&dflt, 0, sizeof(dflt));
  waldio_syscalls_default(&dflt);
  *slot_of(t, i) = p ? p : *slot_of(&dflt, i);
  return 1;
}

waldio_syscall_ptr waldio_syscall_get(const waldio_syscalls *t,
                                      const char *zName, int *pFound){
  int i = find_name(zName);
  *pFound = i>=0;
  return i<0 ? 0 : *slot_of((waldio_syscalls*)t, i);
}

const char *waldio_syscall_next(const char *zName){
  int i = zName ? find_name(zName) : -1;
  if( zName && i<0 ) return 0;
  return i+1<N_NAME ? aName[i+1].zName : 0;
}
