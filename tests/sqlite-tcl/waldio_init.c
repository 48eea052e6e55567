/*
** waldio_init.c — registers libwaldio as the default VFS inside SQLite's
** own test harness (testfixture), so that SQLite's TCL test suite runs every
** database through waldio, and makes the harness's simulated I/O errors
** reach waldio's log.
**
** build.sh compiles it into testfixture with -DSQLITE_EXTRA_INIT=
** waldio_test_init: sqlite3_initialize() then calls waldio_test_init() each
** time it initializes (tester.tcl runs sqlite3_shutdown + sqlite3_initialize
** at start-up, so registration happens again after every re-initialization).
**
** Environment variables (read at every call):
**   WALDIO_TEST_VFS     waldio (default) | stock | stock-reserve |
**                       stock-persist-wal. The stock values never register
**                       waldio, so the same binary is stock SQLite;
**                       stock-reserve gives every new main database 24
**                       reserved bytes per page (as waldio's auto and embed
**                       layouts do) and stock-persist-wal sets
**                       SQLITE_FCNTL_PERSIST_WAL on every connection (as
**                       waldio keeps its log): the stock references that
**                       prove the "reserve" and "wal-kept" differences
**                       (tests/sqlite-tcl/prove.py).
**   WALDIO_TEST_LAYOUT  standard | embed | pad4k | pad8k (unset: waldio's default)
**   WALDIO_TEST_IO      direct | auto | buffered (unset: waldio's default)
**   WALDIO_TEST_GROUP   off | async | durable (unset: waldio's default)
** A value that is not understood ends the process with status 2 and a
** message: a run must never silently fall back to other options.
**
** Simulated I/O errors. testfixture injects I/O errors and disk-full errors
** inside os_unix.c (os_common.h SimulateIOError / SimulateDiskfullError),
** counted down by sqlite3_io_error_pending and friends (the Tcl variables
** sqlite_io_error_pending, ...; tester.tcl do_ioerr_test, malloc_common.tcl
** ioerr-transient/-persistent). waldio writes its log with its own system
** calls, which os_unix.c never sees, so the same counters are honoured here
** at two levels of the log:
**
**   logical   every xRead, xWrite, xSync, xTruncate and xFileSize SQLite
**             makes on a waldio WAL handle is a fault point exactly where
**             os_unix.c has one for a stock WAL (the call is made, then
**             fails; a truncate fails before it; a sync checks disk-full
**             first). So a fault loop counts at least the points it counts
**             on stock SQLite: the WAL calls are the same calls.
**   physical  waldio's own system calls on the log (syscalls.h, replaced
**             through the VFS's xSetSystemCall("waldio_pwrite", ...)):
**             pread, pwrite, pwritev2, fdatasync, fsync, ftruncate fail
**             with EIO (disk-full: ENOSPC) as os_unix.c's calls do, and
**             fallocate (zero-fill) fails with ENOSPC on disk-full. Only on
**             the thread that runs the test script: a background flush
**             (waldio's flusher thread) is no SQLite call and would make the
**             count depend on timing. A read is one point whether the page
**             cache serves it (preadv2 RWF_NOWAIT) or the disk (pread): see
**             fault_preadv2. Read-ahead advice is no fault point.
**
** Neither level needs test-only code in libwaldio: the physical wrappers go
** in through xSetSystemCall; the logical ones through the io methods of each
** WAL handle, swapped after waldio's xOpen (this file patches the waldio
** VFS's xOpen and xSetSystemCall pointers, and restores them around every
** re-registration, which recognizes its VFS by its xOpen). A test that
** resets the system calls (`test_syscall reset`: xSetSystemCall(0)) gets
** the wrappers back at once: they are part of the harness, not of the test.
*/
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <unistd.h>

#include "sqlite3.h"
#include "waldio.h"

#ifndef RWF_NOWAIT
# define RWF_NOWAIT 0x8          /* linux/fs.h, Linux 4.14+ */
#endif

struct name_value { const char *zName; int value; };

static const struct name_value aLayout[] = {
  { "embed", WALDIO_LAYOUT_EMBED },
  { "pad4k", WALDIO_LAYOUT_PAD4K },
  { "pad8k", WALDIO_LAYOUT_PAD8K },
  { "standard", WALDIO_LAYOUT_STANDARD },
#ifdef WALDIO_LAYOUT_AUTO
  { "auto",  WALDIO_LAYOUT_AUTO },
#endif
  { 0, 0 }
};
static const struct name_value aIo[] = {
  { "direct", WALDIO_IO_DIRECT }, { "auto", WALDIO_IO_AUTO },
  { "buffered", WALDIO_IO_BUFFERED }, { 0, 0 }
};
static const struct name_value aGroup[] = {
  { "off", WALDIO_GROUP_OFF }, { "async", WALDIO_GROUP_ASYNC },
  { "durable", WALDIO_GROUP_DURABLE }, { 0, 0 }
};

/* Sets *pOut from the environment variable zVar if it is set; exits on a
** value not in aMap. */
static void option_from_env(const char *zVar, const struct name_value *aMap,
                            int *pOut){
  const char *z = getenv(zVar);
  int i;
  if( z==0 || z[0]==0 ) return;
  for(i=0; aMap[i].zName; i++){
    if( strcmp(z, aMap[i].zName)==0 ){ *pOut = aMap[i].value; return; }
  }
  fprintf(stderr, "waldio_test_init: %s=%s is not understood\n", zVar, z);
  exit(2);
}

/* ------------------------------------------------ the simulated faults */

/* testfixture's counters (os.c, SQLITE_TEST). */
extern int sqlite3_io_error_hit;
extern int sqlite3_io_error_hardhit;
extern int sqlite3_io_error_pending;
extern int sqlite3_io_error_persist;
extern int sqlite3_io_error_benign;
extern int sqlite3_diskfull_pending;
extern int sqlite3_diskfull;

/* os_common.h SimulateIOError: 1 when this fault point fails. */
static int io_error_now(void){
  if( (sqlite3_io_error_persist && sqlite3_io_error_hit)
   || sqlite3_io_error_pending-- == 1 ){
    sqlite3_io_error_hit++;
    if( !sqlite3_io_error_benign ) sqlite3_io_error_hardhit++;
    return 1;
  }
  return 0;
}

/* os_common.h SimulateDiskfullError: 1 when this fault point is "full". */
static int diskfull_now(void){
  if( sqlite3_diskfull_pending ){
    if( sqlite3_diskfull_pending==1 ){
      sqlite3_io_error_hit++;
      if( !sqlite3_io_error_benign ) sqlite3_io_error_hardhit++;
      sqlite3_diskfull = 1;
      sqlite3_io_error_hit = 1;
      return 1;
    }
    sqlite3_diskfull_pending--;
  }
  return 0;
}

/* The thread that runs the Tcl script (testfixture's main thread). */
static int on_script_thread(void){
  return (pid_t)syscall(SYS_gettid)==getpid();
}

/* ------------------------------------ physical: waldio's system calls */

typedef ssize_t (*pread_fn)(int, void*, size_t, off_t);
typedef ssize_t (*preadv2_fn)(int, const struct iovec*, int, off_t, int);
typedef ssize_t (*pwrite_fn)(int, const void*, size_t, off_t);
typedef ssize_t (*pwritev2_fn)(int, const struct iovec*, int, off_t, int);
typedef int (*fd_fn)(int);
typedef int (*ftruncate_fn)(int, off_t);
typedef int (*fallocate_fn)(int, int, off_t, off_t);

/* The calls the wrappers forward to: waldio's own, read once. */
static struct {
  pread_fn xPread;
  preadv2_fn xPreadv2;
  pwrite_fn xPwrite;
  pwritev2_fn xPwritev2;
  fd_fn xFdatasync;
  fd_fn xFsync;
  ftruncate_fn xFtruncate;
  fallocate_fn xFallocate;
} real;

/* After the call was made (as os_unix.c): fail it with EIO or ENOSPC. */
static ssize_t fail_after(ssize_t r, int checkFull){
  if( !on_script_thread() ) return r;
  if( io_error_now() ){ errno = EIO; return -1; }
  if( checkFull && diskfull_now() ){ errno = ENOSPC; return -1; }
  return r;
}

/* A read of the log is one fault point whichever way it is served: from the
** page cache (waldio asks preadv2(RWF_NOWAIT) first, dio_file.c) or from the
** disk (pread). Whether the pages are cached is up to the kernel, so a fault
** point per call would make the count differ from run to run. A read the
** cache served and the fault fails is reported as not cached, and the pread
** waldio falls back to fails instead. */
static __thread int failNextPread;

static ssize_t fault_pread(int fd, void *buf, size_t n, off_t off){
  ssize_t r = real.xPread(fd, buf, n, off);
  if( failNextPread ){
    failNextPread = 0;
    errno = EIO;
    return -1;
  }
  return fail_after(r, 0);
}
static ssize_t fault_preadv2(int fd, const struct iovec *iov, int n, off_t off,
                             int flags){
  ssize_t r = real.xPreadv2(fd, iov, n, off, flags);
  if( (flags & RWF_NOWAIT) && n==1 && r==(ssize_t)iov[0].iov_len
   && on_script_thread() && io_error_now() ){
    failNextPread = 1;
    errno = EAGAIN;
    return -1;
  }
  return r;
}
static ssize_t fault_pwrite(int fd, const void *buf, size_t n, off_t off){
  return fail_after(real.xPwrite(fd, buf, n, off), 1);
}
static ssize_t fault_pwritev2(int fd, const struct iovec *iov, int n, off_t off,
                              int flags){
  return fail_after(real.xPwritev2(fd, iov, n, off, flags), 1);
}
/* unixSync: disk-full before the sync, an I/O error after it. */
static int sync_with_faults(fd_fn x, int fd){
  if( on_script_thread() && diskfull_now() ){ errno = ENOSPC; return -1; }
  return (int)fail_after(x(fd), 0);
}
static int fault_fdatasync(int fd){ return sync_with_faults(real.xFdatasync, fd); }
static int fault_fsync(int fd){ return sync_with_faults(real.xFsync, fd); }
/* unixTruncate: fails before truncating. */
static int fault_ftruncate(int fd, off_t len){
  if( on_script_thread() && io_error_now() ){ errno = EIO; return -1; }
  return real.xFtruncate(fd, len);
}
/* Zero-fill preallocation: only "disk full" (see the top of the file). */
static int fault_fallocate(int fd, int mode, off_t off, off_t len){
  if( on_script_thread() && diskfull_now() ){ errno = ENOSPC; return -1; }
  return real.xFallocate(fd, mode, off, len);
}

static const struct {
  const char *zName;
  sqlite3_syscall_ptr xFault;
  sqlite3_syscall_ptr *pReal;
} aSyscall[] = {
  { "waldio_pread",     (sqlite3_syscall_ptr)fault_pread,     (sqlite3_syscall_ptr*)&real.xPread },
  { "waldio_preadv2",   (sqlite3_syscall_ptr)fault_preadv2,   (sqlite3_syscall_ptr*)&real.xPreadv2 },
  { "waldio_pwrite",    (sqlite3_syscall_ptr)fault_pwrite,    (sqlite3_syscall_ptr*)&real.xPwrite },
  { "waldio_pwritev2",  (sqlite3_syscall_ptr)fault_pwritev2,  (sqlite3_syscall_ptr*)&real.xPwritev2 },
  { "waldio_fdatasync", (sqlite3_syscall_ptr)fault_fdatasync, (sqlite3_syscall_ptr*)&real.xFdatasync },
  { "waldio_fsync",     (sqlite3_syscall_ptr)fault_fsync,     (sqlite3_syscall_ptr*)&real.xFsync },
  { "waldio_ftruncate", (sqlite3_syscall_ptr)fault_ftruncate, (sqlite3_syscall_ptr*)&real.xFtruncate },
  { "waldio_fallocate", (sqlite3_syscall_ptr)fault_fallocate, (sqlite3_syscall_ptr*)&real.xFallocate },
};
#define N_SYSCALL (int)(sizeof(aSyscall)/sizeof(aSyscall[0]))

/* The waldio VFS's own methods, which this file replaces in its struct. */
static int (*origOpen)(sqlite3_vfs*, const char*, sqlite3_file*, int, int*);
static int (*origSetSystemCall)(sqlite3_vfs*, const char*, sqlite3_syscall_ptr);

/* Put the wrapper in place of waldio's call zName (NULL: of every call). */
static int install_syscalls(sqlite3_vfs *pVfs, const char *zName){
  int i;
  for(i=0; i<N_SYSCALL; i++){
    sqlite3_syscall_ptr cur;
    if( zName && strcmp(zName, aSyscall[i].zName)!=0 ) continue;
    cur = pVfs->xGetSystemCall(pVfs, aSyscall[i].zName);
    if( cur==0 ){
      fprintf(stderr, "waldio_test_init: the waldio VFS has no system call"
              " %s\n", aSyscall[i].zName);
      return SQLITE_ERROR;
    }
    if( cur==aSyscall[i].xFault ) continue;
    *aSyscall[i].pReal = cur;
    if( origSetSystemCall(pVfs, aSyscall[i].zName, aSyscall[i].xFault) ){
      return SQLITE_ERROR;
    }
  }
  return SQLITE_OK;
}

/* A reset by a test (all calls, or one of ours to its default) brings the
** wrappers back over the defaults. */
static int fault_set_system_call(sqlite3_vfs *pVfs, const char *zName,
                                 sqlite3_syscall_ptr x){
  int rc = origSetSystemCall(pVfs, zName, x);
  if( zName==0 || (x==0 && strncmp(zName, "waldio_", 7)==0) ){
    int rc2 = install_syscalls(pVfs, zName);
    if( rc==SQLITE_OK ) rc = rc2;
  }
  return rc;
}

/* ------------------------------------------- logical: the WAL handle */

/* waldio's io methods for WAL handles, learned at the first WAL open. */
static const sqlite3_io_methods *pWalMethods;

/* os_unix.c's sync counters (tester.tcl's sqlite_sync_count and
** sqlite_fullsync_count), which wal2-14 reads to check when SQLite asks for
** syncs. unixSync counts each call it gets (full_fsync), plus the directory's
** sync at the first successful sync of a file opened with SQLITE_OPEN_CREATE
** (UNIXFILE_DIRSYNC). A waldio WAL handle gets the same calls and is counted
** the same way: SQLite's requests, not waldio's system calls (waldio syncs
** the directory of a new log at its open, and group commit shares flushes). */
extern int sqlite3_sync_count, sqlite3_fullsync_count;

/* WAL handles opened with SQLITE_OPEN_CREATE and not yet synced. */
static sqlite3_file *aDirSyncDue[64];

static void dir_sync_due(sqlite3_file *f, int on){
  int i;
  for(i=0; i<(int)(sizeof(aDirSyncDue)/sizeof(aDirSyncDue[0])); i++){
    if( on ? aDirSyncDue[i]==0 : aDirSyncDue[i]==f ){
      aDirSyncDue[i] = on ? f : 0;
      return;
    }
  }
}
static int dir_sync_is_due(sqlite3_file *f){
  int i;
  for(i=0; i<(int)(sizeof(aDirSyncDue)/sizeof(aDirSyncDue[0])); i++){
    if( aDirSyncDue[i]==f ) return 1;
  }
  return 0;
}

static int fault_wal_close(sqlite3_file *f){
  dir_sync_due(f, 0);
  return pWalMethods->xClose(f);
}
static int fault_wal_read(sqlite3_file *f, void *z, int n, sqlite3_int64 off){
  int rc = pWalMethods->xRead(f, z, n, off);
  if( io_error_now() ) return SQLITE_IOERR_READ;
  return rc;
}
static int fault_wal_write(sqlite3_file *f, const void *z, int n,
                           sqlite3_int64 off){
  int rc = pWalMethods->xWrite(f, z, n, off);
  if( io_error_now() ) return SQLITE_IOERR_WRITE;
  if( diskfull_now() ) return SQLITE_FULL;
  return rc;
}
static int fault_wal_truncate(sqlite3_file *f, sqlite3_int64 size){
  if( io_error_now() ) return SQLITE_IOERR_TRUNCATE;
  return pWalMethods->xTruncate(f, size);
}

static int fault_wal_sync(sqlite3_file *f, int flags){
  int rc;
  if( diskfull_now() ) return SQLITE_FULL;
  if( (flags&0x0F)==SQLITE_SYNC_FULL ) sqlite3_fullsync_count++;
  sqlite3_sync_count++;
  rc = pWalMethods->xSync(f, flags);
  if( io_error_now() ) return SQLITE_IOERR_FSYNC;
  if( rc==SQLITE_OK && dir_sync_is_due(f) ){
    sqlite3_sync_count++;
    dir_sync_due(f, 0);
  }
  return rc;
}
static int fault_wal_file_size(sqlite3_file *f, sqlite3_int64 *pSize){
  int rc = pWalMethods->xFileSize(f, pSize);
  if( io_error_now() ) return SQLITE_IOERR_FSTAT;
  return rc;
}
static int fault_wal_lock(sqlite3_file *f, int l){ return pWalMethods->xLock(f, l); }
static int fault_wal_unlock(sqlite3_file *f, int l){ return pWalMethods->xUnlock(f, l); }
static int fault_wal_check_reserved(sqlite3_file *f, int *p){
  return pWalMethods->xCheckReservedLock(f, p);
}
static int fault_wal_file_control(sqlite3_file *f, int op, void *p){
  return pWalMethods->xFileControl(f, op, p);
}
static int fault_wal_sector_size(sqlite3_file *f){ return pWalMethods->xSectorSize(f); }
static int fault_wal_device_characteristics(sqlite3_file *f){
  return pWalMethods->xDeviceCharacteristics(f);
}

static const sqlite3_io_methods fault_wal_methods = {
  1, fault_wal_close, fault_wal_read, fault_wal_write, fault_wal_truncate,
  fault_wal_sync, fault_wal_file_size, fault_wal_lock, fault_wal_unlock,
  fault_wal_check_reserved, fault_wal_file_control, fault_wal_sector_size,
  fault_wal_device_characteristics, 0, 0, 0, 0, 0, 0
};

/* waldio's xOpen, then a WAL handle of waldio's own (io methods version 1:
** no shared memory; a WAL passed through to the unix VFS has version 3 and
** its faults already) gets the fault methods. */
static int fault_open(sqlite3_vfs *pVfs, const char *zName, sqlite3_file *f,
                      int flags, int *pOutFlags){
  int rc = origOpen(pVfs, zName, f, flags, pOutFlags);
  if( rc==SQLITE_OK && (flags & SQLITE_OPEN_WAL) && f->pMethods
   && f->pMethods->iVersion==1 ){
    if( pWalMethods==0 ) pWalMethods = f->pMethods;
    if( f->pMethods==pWalMethods ){
      f->pMethods = &fault_wal_methods;
      if( flags & SQLITE_OPEN_CREATE ) dir_sync_due(f, 1);
    }
  }
  return rc;
}

/* Put waldio's own methods back (before waldio_register looks for its VFS)
** or the fault ones in (after). */
static void unpatch_vfs(sqlite3_vfs *pVfs){
  if( pVfs && pVfs->xOpen==fault_open ){
    pVfs->xOpen = origOpen;
    pVfs->xSetSystemCall = origSetSystemCall;
  }
}
static int patch_vfs(sqlite3_vfs *pVfs){
  if( pVfs->xOpen!=fault_open ){
    origOpen = pVfs->xOpen;
    origSetSystemCall = pVfs->xSetSystemCall;
    pVfs->xOpen = fault_open;
    pVfs->xSetSystemCall = fault_set_system_call;
  }
  return install_syscalls(pVfs, 0);
}

/* ------------------------------------------- stock reference variants */

/* stock-reserve: what waldio's reserve_for_embedding (src/vfs.c) does to a
** new main database, on stock SQLite. */
static int reserve_new_database(sqlite3 *db, char **pzErr, const void *pApi){
  sqlite3_file *f = 0;
  sqlite3_int64 size = -1;
  int n = 24;
  (void)pzErr; (void)pApi;
  if( sqlite3_file_control(db, "main", SQLITE_FCNTL_FILE_POINTER, &f)==SQLITE_OK
   && f && f->pMethods
   && f->pMethods->xFileSize(f, &size)==SQLITE_OK && size==0 ){
    sqlite3_file_control(db, "main", SQLITE_FCNTL_RESERVE_BYTES, &n);
  }
  return SQLITE_OK;
}

/* stock-persist-wal: every connection keeps its WAL, as waldio does. */
static int persist_wal(sqlite3 *db, char **pzErr, const void *pApi){
  int on = 1;
  (void)pzErr; (void)pApi;
  sqlite3_file_control(db, "main", SQLITE_FCNTL_PERSIST_WAL, &on);
  return SQLITE_OK;
}

int waldio_test_init(const char *zUnused){
  const char *zVfs = getenv("WALDIO_TEST_VFS");
  sqlite3_vfs *pVfs;
  waldio_options o;
  int rc;
  (void)zUnused;
  if( zVfs && strcmp(zVfs, "stock")==0 ) return SQLITE_OK;
  if( zVfs && strcmp(zVfs, "stock-reserve")==0 ){
    return sqlite3_auto_extension((void(*)(void))reserve_new_database);
  }
  if( zVfs && strcmp(zVfs, "stock-persist-wal")==0 ){
    return sqlite3_auto_extension((void(*)(void))persist_wal);
  }
  if( zVfs && zVfs[0] && strcmp(zVfs, "waldio")!=0 ){
    fprintf(stderr, "waldio_test_init: WALDIO_TEST_VFS=%s is not understood\n",
            zVfs);
    exit(2);
  }
  waldio_options_default(&o);
  option_from_env("WALDIO_TEST_LAYOUT", aLayout, &o.layout);
  option_from_env("WALDIO_TEST_IO", aIo, &o.io);
  option_from_env("WALDIO_TEST_GROUP", aGroup, &o.group);
  unpatch_vfs(sqlite3_vfs_find(WALDIO_VFS_NAME));
  rc = waldio_register(0, 1, &o);
  if( rc!=SQLITE_OK ){
    char zMsg[512];
    waldio_last_error(zMsg, sizeof(zMsg));
    fprintf(stderr, "waldio_test_init: waldio_register failed (%d): %s\n",
            rc, zMsg);
    return rc;
  }
  pVfs = sqlite3_vfs_find(WALDIO_VFS_NAME);
  if( pVfs==0 || patch_vfs(pVfs)!=SQLITE_OK ){
    fprintf(stderr, "waldio_test_init: cannot install the fault wrappers\n");
    exit(2);
  }
  return SQLITE_OK;
}
