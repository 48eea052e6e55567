/*
** recorder.c — the crash recorder: a SQLite loadable extension that records
** every write, direct write, sync, FUA write, truncate, create, rename and
** delete a database makes, with its bytes, for `waldio crash`
** (python/waldio/crash/ replays the log into crash states; docs/crash.md).
**
** Two recording points, so that nothing reaches the disk unseen:
**
**   1. A VFS shim "recorder" stacked on "unix" and registered as the default
**      VFS when the extension loads. Load it BEFORE waldio.so: waldio stacks
**      on whatever is the default VFS when it registers, so its database
**      file, and stock SQLite's database, WAL and rollback journal, all pass
**      through here. Recorded per file: xOpen (path, created?), xWrite
**      (buffered: page cache), xSync, xTruncate, xDelete, xClose. The -shm
**      file is transient (rebuilt by recovery) and not recorded.
**      SQLite's directory fsyncs are not visible at the file level; they are
**      seen through the unix VFS's replaceable "openDirectory" system call,
**      which os_unix.c uses only to fsync a directory.
**
**   2. recorder_hook_waldio('waldio') replaces waldio's own system calls
**      (sqlite3_vfs.xSetSystemCall, names "waldio_*", src/syscalls.h) with
**      wrappers that record pwrite / pwritev2 (RWF_DSYNC = FUA write),
**      fdatasync / fsync (a directory fd: directory sync), fallocate,
**      ftruncate, rename, unlink, open (O_DIRECT: this fd's writes go to the
**      device cache, not the page cache) and close.
**
** Control, from SQL on any connection (registered as an auto-extension):
**   recorder_start(path)            create the event log at path and record
**   recorder_join(path)             record into the log another process
**                                   started (several processes, one log:
**                                   "the log" below explains the order)
**   recorder_stop()                 stop; returns this process's events
**   recorder_mark(name, value)      a MARK event ("ack", transaction number)
**   recorder_hook_waldio(vfs)       hook that waldio VFS's system calls
**                                   ('lsmvbt': the LS-MVBT engine's, lsmvbt.so)
**   recorder_fault(call, skip, errno [, count, kind, minlen, maxlen, partial])
**                                   fail matching calls (fault injection; up
**                                   to 4 armed at once, first match wins):
**                                   call: write | fallocate | fdatasync | fsync
**                                   | xwrite | xsync; skip: matching calls to
**                                   let through first; count: failures (-1:
**                                   until cleared); kind: any | data | zeros;
**                                   partial: write the first half, then fail
**   recorder_fault_clear()          disarm all; returns faults injected
**   recorder_fault_count()          faults injected so far
**   recorder_config('no_write_zeroes', 1)
**                                   fallocate(FALLOC_FL_WRITE_ZEROES) fails
**                                   with EOPNOTSUPP, as on kernels before 6.17
**   recorder_config('no_sync', 1)   waldio's fdatasync/fsync return at once
**                                   (a checker process whose files are thrown
**                                   away: faster, and never used to record)
** A child created by fork() keeps recording into the same log; its first
** event is FORK (the parent's pid).
** With WALDIO_RECORDER_SEED set in the environment, xRandomness is a seeded
** PRNG, so WAL salts (and the whole recording of a single-threaded
** workload) are reproducible.
**
** recorder.h documents the event format.
*/
#include <sqlite3ext.h>
SQLITE_EXTENSION_INIT1

#include "recorder.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#ifndef RWF_DSYNC
# define RWF_DSYNC 0x2
#endif

typedef int64_t i64;
typedef uint64_t u64;
typedef uint32_t u32;

/* ------------------------------------------------------------ the log
**
** One event log may be shared by several processes (two writers, a writer
** and a checkpointer, a parent and the children it forks): recorder_start()
** creates it, recorder_join() opens it in another process, and a forked
** child inherits the descriptor. The log is opened O_APPEND and every event
** is ONE writev() (header and payload), with nothing buffered in user space:
** the kernel appends each call atomically at the end of the file (ext4,
** xfs and tmpfs hold the inode lock for the whole write and take the end of
** file under it). So the order of events in the file is a real-time order
** that every process agrees on, and it is what the crash model relies on:
**
**   - a write is logged after its system call returned, and a sync's BEGIN
**     before its system call is made; so a write that precedes a sync's
**     BEGIN in the file completed before that sync began, whichever
**     processes made them (the append of the write's event returned before
**     the append of the BEGIN took the inode lock);
**   - an "ack" mark is logged after the commit returned, so a crash point
**     after it is a moment at which that commit had been acknowledged.
**
** Each event carries the pid of the process that logged it (recorder.h);
** the sequence number counts that process's events only. Nothing is lost
** when a process dies: what it logged is already in the file.
*/

static pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
static int g_out = -1;               /* the event log (O_APPEND), or -1 */
static int g_broken = 0;             /* a log write failed: stop recording */
static u64 g_seq = 0;
static int g_nextFid = 1;
static i64 g_nextSync = 1;

static u64 now_ns(void){
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (u64)ts.tv_sec * 1000000000u + (u64)ts.tv_nsec;
}

static void put64(unsigned char *p, u64 v){
  int i;
  for(i=0; i<8; i++) p[i] = (unsigned char)(v >> (8*i));
}
static void put32(unsigned char *p, u32 v){
  int i;
  for(i=0; i<4; i++) p[i] = (unsigned char)(v >> (8*i));
}

/* Append one event (mutex held): one writev, so it lands whole and in
** order with every other process's events. Two payload pieces, either may
** be empty. A short write (a full disk) would tear the log: recording stops
** and the reader ignores the torn tail. */
static void emit_locked(int type, int cls, int fid, i64 a, i64 b,
                        const void *p1, u32 n1, const void *p2, u32 n2){
  unsigned char h[REC_HDR_BYTES];
  struct iovec iov[3];
  int n = 1;
  ssize_t want = REC_HDR_BYTES + (ssize_t)n1 + (ssize_t)n2, got;
  if( g_out<0 || g_broken ) return;
  memset(h, 0, sizeof(h));
  h[0] = (unsigned char)type;
  h[1] = (unsigned char)cls;
  put32(h+4, (u32)fid);
  put64(h+8, (u64)a);
  put64(h+16, (u64)b);
  put64(h+24, now_ns());
  put64(h+32, g_seq++);
  put32(h+40, n1 + n2);
  put32(h+44, (u32)getpid());
  iov[0].iov_base = h;
  iov[0].iov_len = sizeof(h);
  if( n1 ){ iov[n].iov_base = (void*)p1; iov[n].iov_len = n1; n++; }
  if( n2 ){ iov[n].iov_base = (void*)p2; iov[n].iov_len = n2; n++; }
  do{
    got = writev(g_out, iov, n);
  }while( got<0 && errno==EINTR );
  if( got!=want ){
    g_broken = 1;
    fprintf(stderr, "recorder: writing the event log failed (%s): recording stopped\n",
            got<0 ? strerror(errno) : "short write");
  }
}

static void emit(int type, int cls, int fid, i64 a, i64 b,
                 const void *p1, u32 n1, const void *p2, u32 n2){
  int e = errno;
  pthread_mutex_lock(&g_mutex);
  emit_locked(type, cls, fid, a, b, p1, n1, p2, n2);
  pthread_mutex_unlock(&g_mutex);
  errno = e;
}

/* fork(): the child inherits the log descriptor (and so appends to the same
** file) and this process's file ids. Its first event, FORK, names the
** parent, so the reader resolves the ids the child inherited. No thread
** may hold the mutex across the fork, or the child would deadlock on it. */
static void fork_prepare(void){ pthread_mutex_lock(&g_mutex); }
static void fork_parent(void){ pthread_mutex_unlock(&g_mutex); }
static void fork_child(void){
  g_seq = 0;
  emit_locked(REC_FORK, 0, -1, (i64)getppid(), 0, 0, 0, 0, 0);
  pthread_mutex_unlock(&g_mutex);
}

static int recording(void){
  int r;
  pthread_mutex_lock(&g_mutex);
  r = g_out>=0 && !g_broken;
  pthread_mutex_unlock(&g_mutex);
  return r;
}

static int all_zero(const void *p, size_t n){
  const unsigned char *z = p;
  size_t i;
  for(i=0; i<n; i++) if( z[i] ) return 0;
  return 1;
}

/* A write event: all-zero data of a page or more is logged as ZERO. */
static void emit_write(int cls, int fid, i64 off, const void *p, size_t n){
  if( n>=512 && all_zero(p, n) ){
    emit(REC_ZERO, cls, fid, off, (i64)n, 0, 0, 0, 0);
  }else{
    emit(REC_WRITE, cls, fid, off, (i64)n, p, (u32)n, 0, 0);
  }
}

static int new_fid(void){
  int f;
  pthread_mutex_lock(&g_mutex);
  f = g_nextFid++;
  pthread_mutex_unlock(&g_mutex);
  return f;
}

static i64 new_sync_id(void){
  i64 s;
  pthread_mutex_lock(&g_mutex);
  s = g_nextSync++;
  pthread_mutex_unlock(&g_mutex);
  return s;
}

static int path_exists(const char *z){
  struct stat st;
  return z && stat(z, &st)==0;
}

/* Directory syncs seen inside a recorded VFS call are emitted after the
** call's own event (os_unix.c fsyncs the file, then its directory). */
static __thread int tl_inCall = 0;
static __thread int tl_nDir = 0;
static __thread char tl_azDir[2][PATH_MAX];

static void dirsync_seen(const char *zDir){
  if( tl_inCall && tl_nDir<2 ){
    snprintf(tl_azDir[tl_nDir++], PATH_MAX, "%s", zDir);
  }else{
    emit(REC_DIRSYNC, 0, -1, 0, 0, zDir, (u32)strlen(zDir), 0, 0);
  }
}

static void call_begin(void){ tl_inCall = 1; tl_nDir = 0; }
static void call_end(void){
  int i;
  tl_inCall = 0;
  for(i=0; i<tl_nDir; i++){
    emit(REC_DIRSYNC, 0, -1, 0, 0, tl_azDir[i], (u32)strlen(tl_azDir[i]), 0, 0);
  }
  tl_nDir = 0;
}

/* ----------------------------------------------------- fault injection */

enum { FC_NONE, FC_WRITE, FC_FALLOCATE, FC_FDATASYNC, FC_FSYNC, FC_XWRITE, FC_XSYNC };
enum { FK_ANY, FK_DATA, FK_ZEROS };

#define N_FAULT 4
typedef struct Fault {
  int call, kind, err, partial;
  i64 minLen, maxLen;
  int skip, count, injected;
} Fault;
static Fault g_fault[N_FAULT];     /* call==FC_NONE: free slot */
static int g_injected = 0;

/* Should this call fail? 0: no; else the errno. *pPartial: write half.
** The first armed slot that matches decides. */
static int fault_check(int call, const void *p, size_t n, int *pPartial){
  int err = 0, i, z = -1;
  *pPartial = 0;
  pthread_mutex_lock(&g_mutex);
  for(i=0; i<N_FAULT && !err; i++){
    Fault *f = &g_fault[i];
    if( f->call!=call || f->count==0 || (i64)n<f->minLen
     || (f->maxLen>=0 && (i64)n>f->maxLen) ) continue;
    if( p && f->kind!=FK_ANY ){
      if( z<0 ) z = all_zero(p, n);
      if( f->kind==FK_ZEROS ? !z : z ) continue;
    }
    if( f->skip>0 ){
      f->skip--;
      continue;
    }
    err = f->err;
    *pPartial = f->partial;
    f->injected++;
    g_injected++;
    if( f->count>0 ) f->count--;
  }
  pthread_mutex_unlock(&g_mutex);
  return err;
}

static const char *azCall[] = { "", "write", "fallocate", "fdatasync",
                                "fsync", "xwrite", "xsync" };

/* ------------------------------------------------------ the VFS shim */

typedef struct RecFile {
  sqlite3_file base;
  sqlite3_file *pReal;       /* the lower file, right after this struct */
  int fid;                   /* 0: not recorded (temp files, shm hosts) */
} RecFile;

static sqlite3_vfs *g_lower = 0;
static sqlite3_vfs g_vfs;

#define REAL(f) (((RecFile*)(f))->pReal)

static int rClose(sqlite3_file *f){
  RecFile *p = (RecFile*)f;
  int rc = p->pReal->pMethods ? p->pReal->pMethods->xClose(p->pReal) : SQLITE_OK;
  if( p->fid && recording() ) emit(REC_CLOSE, 0, p->fid, 0, 0, 0, 0, 0, 0);
  return rc;
}
static int rRead(sqlite3_file *f, void *z, int n, sqlite3_int64 off){
  return REAL(f)->pMethods->xRead(REAL(f), z, n, off);
}
static int rWrite(sqlite3_file *f, const void *z, int n, sqlite3_int64 off){
  RecFile *p = (RecFile*)f;
  int partial, err, rc;
  if( p->fid && (err = fault_check(FC_XWRITE, z, (size_t)n, &partial))!=0 ){
    if( partial && n>1 ){
      rc = p->pReal->pMethods->xWrite(p->pReal, z, n/2, off);
      if( rc==SQLITE_OK && recording() ) emit_write(REC_PAGE, p->fid, off, z, (size_t)(n/2));
    }
    if( recording() ) emit(REC_FAULT, 0, p->fid, err, n, "xwrite", 6, 0, 0);
    return err==28 ? SQLITE_FULL : SQLITE_IOERR_WRITE;
  }
  rc = p->pReal->pMethods->xWrite(p->pReal, z, n, off);
  if( rc==SQLITE_OK && p->fid && recording() ){
    emit_write(REC_PAGE, p->fid, off, z, (size_t)n);
  }
  return rc;
}
static int rTruncate(sqlite3_file *f, sqlite3_int64 size){
  RecFile *p = (RecFile*)f;
  int rc = p->pReal->pMethods->xTruncate(p->pReal, size);
  if( rc==SQLITE_OK && p->fid && recording() ){
    emit(REC_TRUNC, 0, p->fid, size, 0, 0, 0, 0, 0);
  }
  return rc;
}
static int rSync(sqlite3_file *f, int flags){
  RecFile *p = (RecFile*)f;
  i64 id = 0;
  int rc, partial, err;
  if( p->fid && (err = fault_check(FC_XSYNC, 0, 0, &partial))!=0 ){
    if( recording() ) emit(REC_FAULT, 0, p->fid, err, 0, "xsync", 5, 0, 0);
    return SQLITE_IOERR_FSYNC;
  }
  if( p->fid && recording() ){
    id = new_sync_id();
    emit(REC_SYNC_BEGIN, 0, p->fid, id, REC_SYNC_XSYNC, 0, 0, 0, 0);
  }
  call_begin();
  rc = p->pReal->pMethods->xSync(p->pReal, flags);
  if( id ) emit(REC_SYNC_END, 0, p->fid, id, rc, 0, 0, 0, 0);
  call_end();
  return rc;
}
static int rFileSize(sqlite3_file *f, sqlite3_int64 *pSize){
  return REAL(f)->pMethods->xFileSize(REAL(f), pSize);
}
static int rLock(sqlite3_file *f, int l){ return REAL(f)->pMethods->xLock(REAL(f), l); }
static int rUnlock(sqlite3_file *f, int l){ return REAL(f)->pMethods->xUnlock(REAL(f), l); }
static int rCheckReserved(sqlite3_file *f, int *pOut){
  return REAL(f)->pMethods->xCheckReservedLock(REAL(f), pOut);
}
static int rFileControl(sqlite3_file *f, int op, void *pArg){
  RecFile *p = (RecFile*)f;
  sqlite3_int64 before = -1, after = -1;
  int rc;
  if( op==SQLITE_FCNTL_SIZE_HINT && p->fid ){
    p->pReal->pMethods->xFileSize(p->pReal, &before);
  }
  rc = p->pReal->pMethods->xFileControl(p->pReal, op, pArg);
  if( op==SQLITE_FCNTL_SIZE_HINT && p->fid && recording()
   && p->pReal->pMethods->xFileSize(p->pReal, &after)==SQLITE_OK && after>before ){
    /* The unix VFS grew the file (chunk size): record the new size. */
    emit(REC_TRUNC, 0, p->fid, after, 0, 0, 0, 0, 0);
  }
  if( op==SQLITE_FCNTL_VFSNAME && rc==SQLITE_OK ){
    char **pz = pArg;
    *pz = sqlite3_mprintf("recorder/%z", *pz);
  }
  return rc;
}
static int rSectorSize(sqlite3_file *f){ return REAL(f)->pMethods->xSectorSize(REAL(f)); }
static int rDeviceCharacteristics(sqlite3_file *f){
  return REAL(f)->pMethods->xDeviceCharacteristics(REAL(f));
}
static int rShmMap(sqlite3_file *f, int i, int n, int ext, void volatile **pp){
  return REAL(f)->pMethods->xShmMap(REAL(f), i, n, ext, pp);
}
static int rShmLock(sqlite3_file *f, int o, int n, int fl){
  return REAL(f)->pMethods->xShmLock(REAL(f), o, n, fl);
}
static void rShmBarrier(sqlite3_file *f){ REAL(f)->pMethods->xShmBarrier(REAL(f)); }
static int rShmUnmap(sqlite3_file *f, int del){
  return REAL(f)->pMethods->xShmUnmap(REAL(f), del);
}
static int rFetch(sqlite3_file *f, sqlite3_int64 off, int n, void **pp){
  if( REAL(f)->pMethods->iVersion<3 ){ *pp = 0; return SQLITE_OK; }
  return REAL(f)->pMethods->xFetch(REAL(f), off, n, pp);
}
static int rUnfetch(sqlite3_file *f, sqlite3_int64 off, void *pPage){
  if( REAL(f)->pMethods->iVersion<3 ) return SQLITE_OK;
  return REAL(f)->pMethods->xUnfetch(REAL(f), off, pPage);
}

static const sqlite3_io_methods g_methods = {
  3, rClose, rRead, rWrite, rTruncate, rSync, rFileSize, rLock, rUnlock,
  rCheckReserved, rFileControl, rSectorSize, rDeviceCharacteristics,
  rShmMap, rShmLock, rShmBarrier, rShmUnmap, rFetch, rUnfetch
};

static int vOpen(sqlite3_vfs *pVfs, const char *zName, sqlite3_file *pFile,
                 int flags, int *pOutFlags){
  RecFile *p = (RecFile*)pFile;
  char zFull[PATH_MAX+1];
  int existed, rc, kind = flags & (SQLITE_OPEN_MAIN_DB|SQLITE_OPEN_MAIN_JOURNAL
                                   |SQLITE_OPEN_WAL|SQLITE_OPEN_SUPER_JOURNAL);
  (void)pVfs;
  memset(p, 0, sizeof(*p));
  p->pReal = (sqlite3_file*)&p[1];
  existed = zName ? path_exists(zName) : 0;
  rc = g_lower->xOpen(g_lower, zName, p->pReal, flags, pOutFlags);
  if( rc!=SQLITE_OK ) return rc;
  p->base.pMethods = &g_methods;
  if( zName && kind && (flags & SQLITE_OPEN_READWRITE) ){
    p->fid = new_fid();
    if( recording() ){
      if( g_lower->xFullPathname(g_lower, zName, sizeof(zFull), zFull)!=SQLITE_OK ){
        snprintf(zFull, sizeof(zFull), "%s", zName);
      }
      emit(REC_OPEN, REC_SRC_VFS, p->fid, flags, !existed, zFull,
           (u32)strlen(zFull), 0, 0);
    }
  }
  return rc;
}

static int vDelete(sqlite3_vfs *pVfs, const char *zName, int syncDir){
  char zFull[PATH_MAX+1];
  int rc;
  (void)pVfs;
  if( g_lower->xFullPathname(g_lower, zName, sizeof(zFull), zFull)!=SQLITE_OK ){
    snprintf(zFull, sizeof(zFull), "%s", zName);
  }
  call_begin();
  rc = g_lower->xDelete(g_lower, zName, syncDir);
  if( rc==SQLITE_OK && recording() ){
    emit(REC_UNLINK, 0, -1, 0, 0, zFull, (u32)strlen(zFull), 0, 0);
  }
  call_end();
  return rc;
}

static int vAccess(sqlite3_vfs *p, const char *z, int f, int *pOut){
  (void)p; return g_lower->xAccess(g_lower, z, f, pOut);
}
static int vFullPathname(sqlite3_vfs *p, const char *z, int n, char *zOut){
  (void)p; return g_lower->xFullPathname(g_lower, z, n, zOut);
}
static void *vDlOpen(sqlite3_vfs *p, const char *z){
  (void)p; return g_lower->xDlOpen(g_lower, z);
}
static void vDlError(sqlite3_vfs *p, int n, char *z){
  (void)p; g_lower->xDlError(g_lower, n, z);
}
static void (*vDlSym(sqlite3_vfs *p, void *h, const char *z))(void){
  (void)p; return g_lower->xDlSym(g_lower, h, z);
}
static void vDlClose(sqlite3_vfs *p, void *h){ (void)p; g_lower->xDlClose(g_lower, h); }

/* Seeded randomness (WALDIO_RECORDER_SEED): reproducible WAL salts. */
static int g_seeded = 0;
static u64 g_rand = 0;
static u64 splitmix(void){
  u64 z = (g_rand += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
static int vRandomness(sqlite3_vfs *p, int n, char *z){
  int i;
  (void)p;
  if( !g_seeded ) return g_lower->xRandomness(g_lower, n, z);
  pthread_mutex_lock(&g_mutex);
  for(i=0; i<n; i++) z[i] = (char)(splitmix() & 0xff);
  pthread_mutex_unlock(&g_mutex);
  return n;
}
static int vSleep(sqlite3_vfs *p, int us){ (void)p; return g_lower->xSleep(g_lower, us); }
static int vCurrentTime(sqlite3_vfs *p, double *pOut){
  (void)p; return g_lower->xCurrentTime(g_lower, pOut);
}
static int vGetLastError(sqlite3_vfs *p, int n, char *z){
  (void)p; return g_lower->xGetLastError ? g_lower->xGetLastError(g_lower, n, z) : 0;
}
static int vCurrentTimeInt64(sqlite3_vfs *p, sqlite3_int64 *pOut){
  (void)p; return g_lower->xCurrentTimeInt64(g_lower, pOut);
}
static int vSetSystemCall(sqlite3_vfs *p, const char *z, sqlite3_syscall_ptr f){
  (void)p; return g_lower->xSetSystemCall(g_lower, z, f);
}
static sqlite3_syscall_ptr vGetSystemCall(sqlite3_vfs *p, const char *z){
  (void)p; return g_lower->xGetSystemCall(g_lower, z);
}
static const char *vNextSystemCall(sqlite3_vfs *p, const char *z){
  (void)p; return g_lower->xNextSystemCall(g_lower, z);
}

/* The unix VFS's "openDirectory" (os_unix.c): opens a file's directory,
** only ever to fsync it right after. */
typedef int (*open_directory_fn)(const char*, int*);
static open_directory_fn g_openDirectory = 0;

static int hook_openDirectory(const char *zFile, int *pFd){
  int rc = g_openDirectory(zFile, pFd);
  if( rc==SQLITE_OK && recording() ){
    char zDir[PATH_MAX];
    const char *zSlash = strrchr(zFile, '/');
    if( zSlash ){
      snprintf(zDir, sizeof(zDir), "%.*s", (int)(zSlash==zFile ? 1 : zSlash - zFile), zFile);
    }else{
      snprintf(zDir, sizeof(zDir), ".");
    }
    dirsync_seen(zDir);
  }
  return rc;
}

/* ---------------------------------------------- waldio's system calls */

typedef struct FdInfo { int fid; int direct; int dir; char *zPath; } FdInfo;
#define MAX_FD 65536
static FdInfo *g_fd = 0;     /* indexed by fd */

static struct {
  int (*xOpen)(const char*, int, mode_t);
  int (*xClose)(int);
  ssize_t (*xPwrite)(int, const void*, size_t, off_t);
  ssize_t (*xPwritev2)(int, const struct iovec*, int, off_t, int);
  int (*xFdatasync)(int);
  int (*xFsync)(int);
  int (*xFallocate)(int, int, off_t, off_t);
  int (*xFtruncate)(int, off_t);
  int (*xRename)(const char*, const char*);
  int (*xUnlink)(const char*);
} g_sys;

static void abs_path(const char *z, char *zOut, size_t n){
  char zCwd[PATH_MAX/2];
  if( z[0]=='/' || !getcwd(zCwd, sizeof(zCwd)) ){
    snprintf(zOut, n, "%s", z);
  }else{
    snprintf(zOut, n, "%s/%s", zCwd, z);
  }
}

/* The info for fd, creating it from /proc if the open was not seen. */
static FdInfo *fd_info(int fd){
  FdInfo *p;
  if( fd<0 || fd>=MAX_FD || !g_fd ) return 0;
  p = &g_fd[fd];
  if( p->fid==0 ){
    char zLink[64], zPath[PATH_MAX];
    ssize_t n;
    int fl;
    snprintf(zLink, sizeof(zLink), "/proc/self/fd/%d", fd);
    n = readlink(zLink, zPath, sizeof(zPath)-1);
    if( n<=0 ) return 0;
    zPath[n] = 0;
    fl = fcntl(fd, F_GETFL);
    p->fid = new_fid();
    p->direct = fl>=0 && (fl & O_DIRECT);
    p->dir = 0;
    p->zPath = strdup(zPath);
    if( recording() ){
      emit(REC_OPEN, REC_SRC_SYS, p->fid, fl, 0, zPath, (u32)strlen(zPath), 0, 0);
    }
  }
  return p;
}

static int s_open(const char *zPath, int flags, mode_t mode){
  char zFull[PATH_MAX];
  int existed = path_exists(zPath);
  int fd = g_sys.xOpen(zPath, flags, mode);
  if( fd>=0 && fd<MAX_FD && g_fd ){
    FdInfo *p = &g_fd[fd];
    free(p->zPath);
    abs_path(zPath, zFull, sizeof(zFull));
    p->fid = new_fid();
    p->direct = (flags & O_DIRECT)!=0;
    p->dir = (flags & O_DIRECTORY)!=0;
    p->zPath = strdup(zFull);
    if( recording() && !p->dir ){
      emit(REC_OPEN, REC_SRC_SYS, p->fid, flags,
           !existed && (flags & O_CREAT), zFull, (u32)strlen(zFull), 0, 0);
    }
  }
  return fd;
}

static int s_close(int fd){
  int fid = 0, dir = 0;
  if( fd>=0 && fd<MAX_FD && g_fd ){
    fid = g_fd[fd].fid;
    dir = g_fd[fd].dir;
    free(g_fd[fd].zPath);
    memset(&g_fd[fd], 0, sizeof(FdInfo));
  }
  if( fid && !dir && recording() ) emit(REC_CLOSE, 0, fid, 0, 0, 0, 0, 0, 0);
  return g_sys.xClose(fd);
}

static ssize_t fail_write(int fd, FdInfo *p, int err, int partial,
                          const void *buf, size_t n, off_t off, int dsync){
  if( partial && n>=2 ){
    size_t half = n/2;
    ssize_t r;
    if( p && p->direct ) half = half / 512 * 512;
    if( half ){
      r = g_sys.xPwrite(fd, buf, half, off);
      if( r>0 && p && recording() ){
        emit_write(dsync ? REC_FUA : (p->direct ? REC_DEV : REC_PAGE), p->fid,
                   off, buf, (size_t)r);
      }
    }
  }
  if( recording() ) emit(REC_FAULT, 0, p ? p->fid : -1, err, (i64)n, "write", 5, 0, 0);
  errno = err;
  return -1;
}

static ssize_t s_pwrite(int fd, const void *buf, size_t n, off_t off){
  FdInfo *p = fd_info(fd);
  int partial, err = fault_check(FC_WRITE, buf, n, &partial);
  ssize_t r;
  if( err ) return fail_write(fd, p, err, partial, buf, n, off, 0);
  r = g_sys.xPwrite(fd, buf, n, off);
  if( r>0 && p && recording() ){
    emit_write(p->direct ? REC_DEV : REC_PAGE, p->fid, off, buf, (size_t)r);
  }
  return r;
}

static ssize_t s_pwritev2(int fd, const struct iovec *iov, int cnt, off_t off,
                          int flags){
  FdInfo *p = fd_info(fd);
  size_t total = 0, done = 0;
  unsigned char *buf;
  ssize_t r;
  int i, partial, err;
  for(i=0; i<cnt; i++) total += iov[i].iov_len;
  buf = malloc(total ? total : 1);
  if( !buf ){ errno = ENOMEM; return -1; }
  for(i=0; i<cnt; i++){
    memcpy(buf + done, iov[i].iov_base, iov[i].iov_len);
    done += iov[i].iov_len;
  }
  err = fault_check(FC_WRITE, buf, total, &partial);
  if( err ){
    r = fail_write(fd, p, err, partial, buf, total, off, (flags & RWF_DSYNC)!=0);
    free(buf);
    return r;
  }
  r = g_sys.xPwritev2(fd, iov, cnt, off, flags);
  if( r>0 && p && recording() ){
    int cls = (flags & RWF_DSYNC) ? REC_FUA : (p->direct ? REC_DEV : REC_PAGE);
    emit_write(cls, p->fid, off, buf, (size_t)r);
  }
  free(buf);
  return r;
}

static int do_sync(int fd, int kind, int (*xReal)(int)){
  FdInfo *p = fd_info(fd);
  int partial, err, r, e;
  i64 id = 0;
  err = fault_check(kind==REC_SYNC_FSYNC ? FC_FSYNC : FC_FDATASYNC, 0, 0, &partial);
  if( err ){
    if( recording() ){
      emit(REC_FAULT, 0, p ? p->fid : -1, err, 0,
           kind==REC_SYNC_FSYNC ? "fsync" : "fdatasync",
           kind==REC_SYNC_FSYNC ? 5 : 9, 0, 0);
    }
    errno = err;
    return -1;
  }
  if( p && p->dir ){
    r = xReal(fd);
    e = errno;
    if( r==0 && recording() ) dirsync_seen(p->zPath);
    errno = e;
    return r;
  }
  if( p && recording() ){
    id = new_sync_id();
    emit(REC_SYNC_BEGIN, 0, p->fid, id, kind, 0, 0, 0, 0);
  }
  r = xReal(fd);
  e = errno;
  if( id ) emit(REC_SYNC_END, 0, p->fid, id, r==0 ? 0 : e, 0, 0, 0, 0);
  errno = e;
  return r;
}
static int g_noSync = 0;          /* recorder_config('no_sync', 1) */

static int s_fdatasync(int fd){
  if( g_noSync ) return 0;
  return do_sync(fd, REC_SYNC_FDATASYNC, g_sys.xFdatasync);
}
static int s_fsync(int fd){
  if( g_noSync ) return 0;
  return do_sync(fd, REC_SYNC_FSYNC, g_sys.xFsync);
}

static int g_noWriteZeroes = 0;   /* recorder_config('no_write_zeroes', 1) */

static int s_fallocate(int fd, int mode, off_t off, off_t len){
  FdInfo *p = fd_info(fd);
  int partial, err = fault_check(FC_FALLOCATE, 0, (size_t)len, &partial);
  int r, e;
  if( !err && g_noWriteZeroes && (mode & 0x80) ){
    errno = EOPNOTSUPP;        /* as a kernel without FALLOC_FL_WRITE_ZEROES */
    return -1;
  }
  if( err ){
    if( recording() ) emit(REC_FAULT, 0, p ? p->fid : -1, err, len, "fallocate", 9, 0, 0);
    errno = err;
    return -1;
  }
  r = g_sys.xFallocate(fd, mode, off, len);
  e = errno;
  if( r==0 && p && recording() ){
    unsigned char m[4];
    put32(m, (u32)mode);
    emit(REC_FALLOC, 0, p->fid, off, len, m, 4, 0, 0);
  }
  errno = e;
  return r;
}

static int s_ftruncate(int fd, off_t len){
  FdInfo *p = fd_info(fd);
  int r = g_sys.xFtruncate(fd, len), e = errno;
  if( r==0 && p && recording() ) emit(REC_TRUNC, 0, p->fid, len, 0, 0, 0, 0, 0);
  errno = e;
  return r;
}

static int s_rename(const char *zFrom, const char *zTo){
  char a[PATH_MAX], b[PATH_MAX];
  int r = g_sys.xRename(zFrom, zTo), e = errno;
  if( r==0 && recording() ){
    abs_path(zFrom, a, sizeof(a));
    abs_path(zTo, b, sizeof(b));
    emit(REC_RENAME, 0, -1, 0, 0, a, (u32)strlen(a) + 1, b, (u32)strlen(b));
  }
  errno = e;
  return r;
}

static int s_unlink(const char *zPath){
  char a[PATH_MAX];
  int r = g_sys.xUnlink(zPath), e = errno;
  if( r==0 && recording() ){
    abs_path(zPath, a, sizeof(a));
    emit(REC_UNLINK, 0, -1, 0, 0, a, (u32)strlen(a), 0, 0);
  }
  errno = e;
  return r;
}

/* Replace the system calls of VFS zVfs: "waldio_*" (libwaldio, src/syscalls.h),
** or "lsmvbt_*" when zVfs is "lsmvbt" (the LS-MVBT engine's table,
** lsmvbt/io.c: open, close, pwrite, fdatasync, fsync, fallocate, rename,
** unlink; it has no pwritev2 or ftruncate). Both engines' originals are the
** libc calls, so the wrappers share one table of originals. Returns how many. */
static int hook_waldio(const char *zVfs){
  static const struct { const char *zName; void **ppOrig; sqlite3_syscall_ptr x; } a[] = {
    { "open",      (void**)&g_sys.xOpen,      (sqlite3_syscall_ptr)s_open },
    { "close",     (void**)&g_sys.xClose,     (sqlite3_syscall_ptr)s_close },
    { "pwrite",    (void**)&g_sys.xPwrite,    (sqlite3_syscall_ptr)s_pwrite },
    { "pwritev2",  (void**)&g_sys.xPwritev2,  (sqlite3_syscall_ptr)s_pwritev2 },
    { "fdatasync", (void**)&g_sys.xFdatasync, (sqlite3_syscall_ptr)s_fdatasync },
    { "fsync",     (void**)&g_sys.xFsync,     (sqlite3_syscall_ptr)s_fsync },
    { "fallocate", (void**)&g_sys.xFallocate, (sqlite3_syscall_ptr)s_fallocate },
    { "ftruncate", (void**)&g_sys.xFtruncate, (sqlite3_syscall_ptr)s_ftruncate },
    { "rename",    (void**)&g_sys.xRename,    (sqlite3_syscall_ptr)s_rename },
    { "unlink",    (void**)&g_sys.xUnlink,    (sqlite3_syscall_ptr)s_unlink },
  };
  const char *zPrefix = strcmp(zVfs, "lsmvbt")==0 ? "lsmvbt_" : "waldio_";
  sqlite3_vfs *v = sqlite3_vfs_find(zVfs);
  char zName[32];
  size_t i;
  int n = 0;
  if( !v || v->iVersion<3 || !v->xGetSystemCall ) return -1;
  if( !g_fd ){
    g_fd = calloc(MAX_FD, sizeof(FdInfo));
    if( !g_fd ) return -1;
  }
  for(i=0; i<sizeof(a)/sizeof(a[0]); i++){
    sqlite3_syscall_ptr cur;
    snprintf(zName, sizeof(zName), "%s%s", zPrefix, a[i].zName);
    cur = v->xGetSystemCall(v, zName);
    if( !cur ) continue;
    if( cur!=a[i].x ) *a[i].ppOrig = (void*)cur;   /* hooking twice is harmless */
    if( v->xSetSystemCall(v, zName, a[i].x)==SQLITE_OK ) n++;
  }
  return n;
}

/* ------------------------------------------------------ SQL control */

/* Open the log for appending: created and truncated (recorder_start), or
** an existing one another process started (recorder_join). */
static void open_log(sqlite3_context *ctx, sqlite3_value **argv, int create){
  const char *zPath = (const char*)sqlite3_value_text(argv[0]);
  int fd;
  if( !zPath ){ sqlite3_result_error(ctx, "recorder_start(path) / recorder_join(path)", -1); return; }
  fd = open(zPath, O_WRONLY|O_APPEND|O_CLOEXEC|(create ? O_CREAT|O_TRUNC : 0), 0644);
  if( fd<0 ){ sqlite3_result_error(ctx, "recorder: cannot open the event log", -1); return; }
  if( create && write(fd, REC_MAGIC, REC_MAGIC_BYTES)!=REC_MAGIC_BYTES ){
    close(fd);
    sqlite3_result_error(ctx, "recorder: cannot write the event log", -1);
    return;
  }
  pthread_mutex_lock(&g_mutex);
  if( g_out>=0 ) close(g_out);
  g_out = fd;
  g_broken = 0;
  g_seq = 0;
  pthread_mutex_unlock(&g_mutex);
  sqlite3_result_text(ctx, "ok", -1, SQLITE_STATIC);
}

static void fn_start(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  (void)argc;
  open_log(ctx, argv, 1);
}

static void fn_join(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  (void)argc;
  open_log(ctx, argv, 0);
}

static void fn_stop(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  i64 n;
  (void)argc; (void)argv;
  pthread_mutex_lock(&g_mutex);
  n = (i64)g_seq;
  if( g_out>=0 ){ close(g_out); g_out = -1; }
  pthread_mutex_unlock(&g_mutex);
  sqlite3_result_int64(ctx, n);
}

static void fn_mark(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  const char *z = (const char*)sqlite3_value_text(argv[0]);
  i64 v = argc>1 ? sqlite3_value_int64(argv[1]) : 0;
  if( !z ) z = "";
  emit(REC_MARK, 0, -1, v, 0, z, (u32)strlen(z), 0, 0);
  sqlite3_result_int64(ctx, v);
}

static void fn_hook(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  const char *z = argc>0 ? (const char*)sqlite3_value_text(argv[0]) : "waldio";
  sqlite3_result_int(ctx, hook_waldio(z ? z : "waldio"));
}

static void fn_fault(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  const char *zCall = (const char*)sqlite3_value_text(argv[0]);
  const char *zKind = argc>4 ? (const char*)sqlite3_value_text(argv[4]) : 0;
  int call = FC_NONE, kind = FK_ANY, i;
  for(i=1; i<(int)(sizeof(azCall)/sizeof(azCall[0])); i++){
    if( zCall && strcmp(zCall, azCall[i])==0 ) call = i;
  }
  if( zKind && strcmp(zKind, "data")==0 ) kind = FK_DATA;
  else if( zKind && strcmp(zKind, "zeros")==0 ) kind = FK_ZEROS;
  else if( zKind && strcmp(zKind, "any")!=0 ){
    sqlite3_result_error(ctx, "recorder_fault: kind is any, data or zeros", -1);
    return;
  }
  if( call==FC_NONE ){
    sqlite3_result_error(ctx, "recorder_fault: call is write, fallocate,"
                         " fdatasync, fsync, xwrite or xsync", -1);
    return;
  }
  pthread_mutex_lock(&g_mutex);
  for(i=0; i<N_FAULT && g_fault[i].call!=FC_NONE; i++){}
  if( i<N_FAULT ){
    Fault *f = &g_fault[i];
    f->call = call;
    f->skip = sqlite3_value_int(argv[1]);
    f->err = sqlite3_value_int(argv[2]);
    f->count = argc>3 ? sqlite3_value_int(argv[3]) : 1;
    f->kind = kind;
    f->minLen = argc>5 ? sqlite3_value_int64(argv[5]) : 0;
    f->maxLen = argc>6 ? sqlite3_value_int64(argv[6]) : -1;
    f->partial = argc>7 ? sqlite3_value_int(argv[7]) : 0;
    f->injected = 0;
  }
  pthread_mutex_unlock(&g_mutex);
  if( i>=N_FAULT ){
    sqlite3_result_error(ctx, "recorder_fault: all fault slots are in use", -1);
    return;
  }
  sqlite3_result_text(ctx, "armed", -1, SQLITE_STATIC);
}

static void fn_fault_clear(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  int n;
  (void)argc; (void)argv;
  pthread_mutex_lock(&g_mutex);
  n = g_injected;
  memset(g_fault, 0, sizeof(g_fault));
  g_injected = 0;
  pthread_mutex_unlock(&g_mutex);
  sqlite3_result_int(ctx, n);
}

static void fn_fault_count(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  int n;
  (void)argc; (void)argv;
  pthread_mutex_lock(&g_mutex);
  n = g_injected;
  pthread_mutex_unlock(&g_mutex);
  sqlite3_result_int(ctx, n);
}

static void fn_config(sqlite3_context *ctx, int argc, sqlite3_value **argv){
  const char *z = (const char*)sqlite3_value_text(argv[0]);
  (void)argc;
  if( z && strcmp(z, "no_write_zeroes")==0 ){
    g_noWriteZeroes = sqlite3_value_int(argv[1]);
    sqlite3_result_int(ctx, g_noWriteZeroes);
    return;
  }
  if( z && strcmp(z, "no_sync")==0 ){
    g_noSync = sqlite3_value_int(argv[1]);
    sqlite3_result_int(ctx, g_noSync);
    return;
  }
  sqlite3_result_error(ctx, "recorder_config: unknown setting", -1);
}

static int register_functions(sqlite3 *db, char **pzErr,
                              const sqlite3_api_routines *pApi){
  static const struct { const char *z; int n; void (*x)(sqlite3_context*,int,sqlite3_value**); } a[] = {
    { "recorder_start", 1, fn_start }, { "recorder_join", 1, fn_join },
    { "recorder_stop", 0, fn_stop },
    { "recorder_mark", 2, fn_mark }, { "recorder_mark", 1, fn_mark },
    { "recorder_hook_waldio", 1, fn_hook }, { "recorder_hook_waldio", 0, fn_hook },
    { "recorder_fault", -1, fn_fault }, { "recorder_fault_clear", 0, fn_fault_clear },
    { "recorder_fault_count", 0, fn_fault_count }, { "recorder_config", 2, fn_config },
  };
  size_t i;
  int rc = SQLITE_OK;
  (void)pzErr; (void)pApi;
  for(i=0; i<sizeof(a)/sizeof(a[0]) && rc==SQLITE_OK; i++){
    rc = sqlite3_create_function(db, a[i].z, a[i].n, SQLITE_UTF8, 0, a[i].x, 0, 0);
  }
  return rc;
}

/* ------------------------------------------------------------ entry */

__attribute__((visibility("default")))
int sqlite3_recorder_init(sqlite3 *db, char **pzErrMsg,
                          const sqlite3_api_routines *pApi){
  int rc;
  SQLITE_EXTENSION_INIT2(pApi);
  if( !sqlite3_vfs_find("recorder") ){
    const char *zSeed = getenv("WALDIO_RECORDER_SEED");
    g_lower = sqlite3_vfs_find("unix");
    if( !g_lower || g_lower->iVersion<3 ){
      *pzErrMsg = sqlite3_mprintf("recorder: needs the unix VFS (version 3)");
      return SQLITE_ERROR;
    }
    if( zSeed && *zSeed ){
      g_seeded = 1;
      g_rand = (u64)strtoull(zSeed, 0, 10) * 0x2545F4914F6CDD1Dull + 1;
    }
    memset(&g_vfs, 0, sizeof(g_vfs));
    g_vfs.iVersion = 3;
    g_vfs.szOsFile = (int)sizeof(RecFile) + g_lower->szOsFile;
    g_vfs.mxPathname = g_lower->mxPathname;
    g_vfs.zName = "recorder";
    g_vfs.xOpen = vOpen;
    g_vfs.xDelete = vDelete;
    g_vfs.xAccess = vAccess;
    g_vfs.xFullPathname = vFullPathname;
    g_vfs.xDlOpen = vDlOpen;
    g_vfs.xDlError = vDlError;
    g_vfs.xDlSym = vDlSym;
    g_vfs.xDlClose = vDlClose;
    g_vfs.xRandomness = vRandomness;
    g_vfs.xSleep = vSleep;
    g_vfs.xCurrentTime = vCurrentTime;
    g_vfs.xGetLastError = vGetLastError;
    g_vfs.xCurrentTimeInt64 = vCurrentTimeInt64;
    g_vfs.xSetSystemCall = vSetSystemCall;
    g_vfs.xGetSystemCall = vGetSystemCall;
    g_vfs.xNextSystemCall = vNextSystemCall;
    g_openDirectory = (open_directory_fn)g_lower->xGetSystemCall(g_lower, "openDirectory");
    if( g_openDirectory ){
      g_lower->xSetSystemCall(g_lower, "openDirectory",
                              (sqlite3_syscall_ptr)hook_openDirectory);
    }
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    rc = sqlite3_vfs_register(&g_vfs, 1);
    /* Reseed SQLite's PRNG from the (now default) recorder VFS. */
    if( rc==SQLITE_OK && g_seeded ) sqlite3_randomness(0, 0);
    if( rc==SQLITE_OK ) rc = sqlite3_auto_extension((void(*)(void))register_functions);
    if( rc ){
      *pzErrMsg = sqlite3_mprintf("recorder: cannot register the VFS");
      return rc;
    }
  }
  rc = register_functions(db, pzErrMsg, pApi);
  return rc==SQLITE_OK ? SQLITE_OK_LOAD_PERMANENTLY : rc;
}
