/*
** test_target.c — what libwaldio needs from the CPU and kernel it runs on,
** checked on that target: natively, and for aarch64 (the phones' CPU) under
** qemu-aarch64 in `make test-aarch64` (docs/cross-build.md). One part per
** run, so that each passes, fails or is skipped on its own:
**
**   atomics  64-bit atomics on memory that processes share (the flush
**            region's tickets, flush_region.h): lock-free (a lock-based
**            fallback, as libatomic's, would lock per process only), every
**            u64 field of flush_region 8-byte aligned, no increment or
**            compare-and-swap lost between processes, the counter carried
**            across its 32-bit halves; and a futex wait in one process woken
**            by another (the region's waits are not FUTEX_PRIVATE).
**   dio      the log's direct I/O (dio_file.h): what statx(STATX_DIOALIGN)
**            reports, which alignment and block size dio_open() chose and
**            from where, that O_DIRECT is in effect (a write misaligned by
**            one byte is refused), and an aligned direct write that reads
**            back intact, directly and through the page cache.
**   ofd      the log's open-file-description locks (log_lock.h): two opens
**            of one file conflict, in one process and across processes; a
**            refused upgrade keeps the shared lock; closing a dup() keeps
**            the lock, closing the last descriptor (or dying) releases it.
**
** Usage: test_target atomics|dio|ofd. Exit status 77: skipped, with the
** reason printed (dio on a file system without direct I/O).
*/
#include "check.h"
#include "test_util.h"
#include "dio_file.h"
#include "flush_region.h"
#include "log_lock.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <stddef.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>

#ifndef STATX_DIOALIGN
# define STATX_DIOALIGN 0x2000U
#endif
#define SKIPPED 77
#define CHILDREN 4
#define INCREMENTS 20000

static char g_dir[300];

static void path_in_dir(char *z, size_t n, const char *zName){
  snprintf(z, n, "%s/%s", g_dir, zName);
}

/* The exit status of child pid (or -1 if it did not exit). */
static int wait_child(pid_t pid){
  int status = 0;
  if( waitpid(pid, &status, 0)!=pid || !WIFEXITED(status) ) return -1;
  return WEXITSTATUS(status);
}

/* ---- atomics ---------------------------------------------------------- */

typedef struct shared_words {
  u64 counter;          /* incremented by every child */
  u64 max;              /* raised by compare-and-swap to each result */
  u32 word;             /* the futex word */
  u32 waiting;          /* the futex child is about to wait */
} shared_words;

static void raise_to(u64 *p, u64 v){
  u64 cur = __atomic_load_n(p, __ATOMIC_SEQ_CST);
  while( cur<v && !__atomic_compare_exchange_n(p, &cur, v, 0, __ATOMIC_SEQ_CST,
                                               __ATOMIC_SEQ_CST) ){}
}

static int futex(u32 *w, int op, u32 val, const struct timespec *ts){
  return (int)syscall(SYS_futex, w, op, val, ts, 0, 0);
}

static void check_atomics(void){
  const u64 start = 0xFFFFFFFFull - INCREMENTS / 2;   /* carries mid-run */
  const struct timespec tenSeconds = { 10, 0 };
  char zPath[400];
  shared_words *s;
  pid_t aPid[CHILDREN], pid;
  int fd, i;

  CHECK(__atomic_always_lock_free(sizeof(u64), 0));
  CHECK_EQ(offsetof(flush_region, leaderSince) % 8, 0);
  CHECK_EQ(offsetof(flush_region, written) % 8, 0);
  CHECK_EQ(offsetof(flush_region, durable) % 8, 0);
  CHECK_EQ(offsetof(flush_region, flushes) % 8, 0);
  CHECK_EQ(offsetof(flush_region, flushing) % 8, 0);

  /* A file mapped MAP_SHARED by every process, as SQLite maps -shm files. */
  path_in_dir(zPath, sizeof(zPath), "atomics-shm");
  fd = open(zPath, O_RDWR|O_CREAT|O_TRUNC, 0644);
  CHECK(fd>=0 && ftruncate(fd, 4096)==0);
  s = mmap(0, 4096, PROT_READ|PROT_WRITE, MAP_SHARED, fd, 0);
  CHECK(s!=MAP_FAILED);
  if( fd<0 || s==MAP_FAILED ) return;
  close(fd);
  unlink(zPath);
  CHECK(__atomic_is_lock_free(sizeof(u64), &s->counter));
  s->counter = start;

  for(i=0; i<CHILDREN; i++){
    aPid[i] = fork();
    if( aPid[i]==0 ){
      int k;
      for(k=0; k<INCREMENTS; k++){
        raise_to(&s->max, __atomic_add_fetch(&s->counter, 1, __ATOMIC_SEQ_CST));
      }
      _exit(0);
    }
  }
  for(i=0; i<CHILDREN; i++) CHECK_EQ(wait_child(aPid[i]), 0);
  CHECK_EQ(s->counter, start + (u64)CHILDREN * INCREMENTS);
  CHECK_EQ(s->max, s->counter);
  fprintf(stderr, "atomics: %d processes x %d increments from %#llx: %#llx\n",
          CHILDREN, INCREMENTS, (unsigned long long)start,
          (unsigned long long)s->counter);

  /* A shared futex: the child sleeps on `word` until the parent wakes it.
  ** 3: the wait timed out (the wake never reached it). */
  pid = fork();
  if( pid==0 ){
    __atomic_store_n(&s->waiting, 1, __ATOMIC_SEQ_CST);
    while( __atomic_load_n(&s->word, __ATOMIC_SEQ_CST)==0 ){
      if( futex(&s->word, FUTEX_WAIT, 0, &tenSeconds)!=0 && errno==ETIMEDOUT ){
        _exit(3);
      }
    }
    _exit(0);
  }
  for(i=0; i<10000 && !__atomic_load_n(&s->waiting, __ATOMIC_SEQ_CST); i++){
    usleep(1000);
  }
  usleep(20000);                     /* most often it sleeps by now */
  __atomic_store_n(&s->word, 1, __ATOMIC_SEQ_CST);
  CHECK(futex(&s->word, FUTEX_WAKE, INT_MAX, 0)>=0);
  CHECK_EQ(wait_child(pid), 0);
  munmap(s, 4096);
}

/* ---- direct I/O ------------------------------------------------------- */

static int is_pow2(u32 v){ return v && (v & (v - 1))==0; }

static int check_dio(void){
  char zPath[400];
  waldio_syscalls sys;
  dio_file f;
  struct statx sx;
  u8 *buf, *back;
  size_t got = 0;
  int created = 0, fl, rc;

  path_in_dir(zPath, sizeof(zPath), "dio-wal");
  waldio_syscalls_default(&sys);
  rc = dio_open(&f, &sys, zPath, WALDIO_IO_DIRECT, 0644, &created);
  if( rc!=SQLITE_OK ){
    char zWhy[512];
    waldio_last_error(zWhy, sizeof(zWhy));
    fprintf(stderr, "dio: skipped: %s\n", zWhy);
    return SKIPPED;
  }

  /* The raw system call (not statx(), which a test preload may adjust:
  ** qemu_statx.c). */
  memset(&sx, 0, sizeof(sx));
  if( syscall(SYS_statx, f.fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx)==0 ){
    fprintf(stderr, "dio: statx: STATX_DIOALIGN %s, mem_align %u, offset_align %u\n",
            (sx.stx_mask & STATX_DIOALIGN) ? "reported" : "not reported",
            sx.stx_dio_mem_align, sx.stx_dio_offset_align);
  }
  fprintf(stderr, "dio: %s: offset alignment %u, memory %u, block %u (from %s)\n",
          f.zFs, f.offAlign, f.memAlign, f.block, f.zDioSource);
  CHECK(f.direct);
  CHECK(is_pow2(f.offAlign) && f.offAlign>=512);
  CHECK(is_pow2(f.memAlign));
  CHECK(is_pow2(f.block) && f.block>=f.offAlign);
  fl = fcntl(f.fd, F_GETFL);
  CHECK(fl!=-1 && (fl & O_DIRECT)!=0);

  buf = dio_alloc(&f, 2 * (size_t)f.block);
  back = dio_alloc(&f, f.block);
  CHECK(buf && back);
  if( !buf || !back ){ dio_close(&f); return 0; }
  memset(buf, 0xA5, 2 * (size_t)f.block);
  CHECK_EQ(dio_write(&f, buf, f.block, f.block, 0), SQLITE_OK);
  memset(buf, 0x5A, f.block);
  CHECK_EQ(dio_write(&f, buf, f.block, 2 * (i64)f.block, DIO_DSYNC), SQLITE_OK);
  CHECK_EQ(pread(f.fd, back, f.block, f.block), f.block);      /* direct */
  CHECK(back[0]==0xA5 && memcmp(back, back + 1, f.block - 1)==0);
  CHECK_EQ(dio_read(&f, back, f.block, 2 * (i64)f.block, &got), SQLITE_OK);
  CHECK_EQ(got, f.block);                                       /* page cache */
  CHECK(back[0]==0x5A && memcmp(back, back + 1, f.block - 1)==0);

  /* Misaligned by one byte: ext4 and xfs refuse it (btrfs may quietly
  ** buffer it instead). A success here means O_DIRECT is not in effect. */
  if( strcmp(f.zFs, "ext4")==0 || strcmp(f.zFs, "xfs")==0 ){
    errno = 0;
    CHECK(pwrite(f.fd, buf + 1, f.block, 1)<0 && errno==EINVAL);
  }
  dio_free(buf);
  dio_free(back);
  dio_close(&f);
  unlink(zPath);
  return 0;
}

/* ---- OFD locks -------------------------------------------------------- */

/* In a child: open the file anew and try lock `which` in `mode`; exit 0 if
** the answer is `want` (0 or EAGAIN). */
static pid_t child_tries(const char *zPath, const waldio_syscalls *sys,
                         int mode, int want){
  pid_t pid = fork();
  if( pid==0 ){
    int fd = open(zPath, O_RDWR);
    _exit(fd>=0 && log_lock(sys, fd, LOG_LOCK_INIT, mode)==want ? 0 : 1);
  }
  return pid;
}

static void check_ofd(void){
  char zPath[400];
  waldio_syscalls sys;
  int a, b, c, d;
  pid_t pid;

  path_in_dir(zPath, sizeof(zPath), "ofd-wal");
  waldio_syscalls_default(&sys);
  a = open(zPath, O_RDWR|O_CREAT|O_TRUNC, 0644);
  b = open(zPath, O_RDWR);
  c = open(zPath, O_RDWR);
  CHECK(a>=0 && b>=0 && c>=0);

  /* Two open file descriptions of one process conflict. */
  CHECK_EQ(log_lock(&sys, a, LOG_LOCK_INIT, LOG_EXCLUSIVE), 0);
  CHECK_EQ(log_lock(&sys, b, LOG_LOCK_INIT, LOG_SHARED), EAGAIN);
  CHECK(log_lock_held_elsewhere(&sys, b, LOG_LOCK_INIT, LOG_SHARED));
  CHECK(!log_lock_held_elsewhere(&sys, a, LOG_LOCK_INIT, LOG_EXCLUSIVE));
  CHECK_EQ(log_lock(&sys, a, LOG_LOCK_USE, LOG_SHARED), 0);    /* other bytes */
  CHECK_EQ(log_lock(&sys, b, LOG_LOCK_USE, LOG_SHARED), 0);
  /* And across processes. */
  CHECK_EQ(wait_child(child_tries(zPath, &sys, LOG_SHARED, EAGAIN)), 0);

  /* Closing a dup() of the description keeps the lock. */
  d = dup(a);
  CHECK(d>=0);
  close(d);
  CHECK_EQ(log_lock(&sys, b, LOG_LOCK_INIT, LOG_SHARED), EAGAIN);

  /* A refused upgrade keeps the shared lock. */
  CHECK_EQ(log_lock(&sys, a, LOG_LOCK_INIT, LOG_SHARED), 0);   /* downgrade */
  CHECK_EQ(log_lock(&sys, b, LOG_LOCK_INIT, LOG_SHARED), 0);
  CHECK_EQ(log_lock(&sys, a, LOG_LOCK_INIT, LOG_EXCLUSIVE), EAGAIN);
  CHECK_EQ(log_lock(&sys, b, LOG_LOCK_INIT, LOG_UNLOCKED), 0);
  CHECK_EQ(log_lock(&sys, c, LOG_LOCK_INIT, LOG_EXCLUSIVE), EAGAIN);  /* a's */

  /* Closing the last descriptor releases it. */
  close(a);
  CHECK_EQ(log_lock(&sys, c, LOG_LOCK_INIT, LOG_EXCLUSIVE), 0);
  CHECK_EQ(log_lock(&sys, c, LOG_LOCK_INIT, LOG_UNLOCKED), 0);

  /* A process that dies holding a lock releases it. */
  pid = fork();
  if( pid==0 ){
    int fd = open(zPath, O_RDWR);
    _exit(fd>=0 && log_lock(&sys, fd, LOG_LOCK_INIT, LOG_EXCLUSIVE)==0 ? 0 : 1);
  }
  CHECK_EQ(wait_child(pid), 0);
  CHECK_EQ(log_lock(&sys, c, LOG_LOCK_INIT, LOG_EXCLUSIVE), 0);
  close(b);
  close(c);
  unlink(zPath);
}

int main(int argc, char **argv){
  const char *zPart = argc>1 ? argv[1] : "";
  int rc = 0;
  test_dir(g_dir, sizeof(g_dir), "target");
  if( strcmp(zPart, "atomics")==0 ){
    check_atomics();
  }else if( strcmp(zPart, "dio")==0 ){
    rc = check_dio();
  }else if( strcmp(zPart, "ofd")==0 ){
    check_ofd();
  }else{
    fprintf(stderr, "usage: %s atomics|dio|ofd\n", argv[0]);
    rc = 2;
  }
  rmdir(g_dir);
  return rc ? rc : CHECK_DONE();
}
