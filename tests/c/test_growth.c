/*
** test_growth.c — two writers of one process growing the log at once
** (wal_log.h L7). In group modes the flusher thread (or a durable leader)
** and a transaction spilling its own frames can both need the log to grow.
** The test forces the interleaving that used to lose a frame:
**
**   A  starts to zero-fill the new range ... and is held there until B has
**      started its own fill (or 300 ms have passed);
**   B  must not fill the same range: with the bug it did, and its fill was
**      held until A had written its frame into the range, then wiped it.
**
** With growth single-owner, B waits for A's extension, finds the range
** allocated and writes only its own frame: A's frame must read back intact.
*/
#include "check.h"
#include "test_util.h"
#include "wal_log.h"

#include <errno.h>
#include <pthread.h>
#include <time.h>

#define SLOT 4096

static __thread int t_role;            /* 'A' or 'B' */
static pthread_mutex_t g_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cv = PTHREAD_COND_INITIALIZER;
static int g_aFilling, g_bFilling, g_aFrameWritten;
static waldio_log *g_log;

/* Wait up to ms for *flag (under g_mu). */
static void wait_flag(int *flag, int ms){
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  ts.tv_sec += ms / 1000;
  ts.tv_nsec += (long)(ms % 1000) * 1000000L;
  if( ts.tv_nsec>=1000000000L ){ ts.tv_sec++; ts.tv_nsec -= 1000000000L; }
  pthread_mutex_lock(&g_mu);
  while( !*flag ){
    if( pthread_cond_timedwait(&g_cv, &g_mu, &ts)==ETIMEDOUT ) break;
  }
  pthread_mutex_unlock(&g_mu);
}

static void set_flag(int *flag){
  pthread_mutex_lock(&g_mu);
  *flag = 1;
  pthread_cond_broadcast(&g_cv);
  pthread_mutex_unlock(&g_mu);
}

static ssize_t hooked_pwrite(int fd, const void *p, size_t n, off_t off){
  ssize_t r;
  int zeroFill = n>=65536 && ((const unsigned char*)p)[0]==0
              && memcmp(p, (const char*)p + 1, 4095)==0;
  if( zeroFill && t_role=='A' && !g_aFilling ){
    set_flag(&g_aFilling);
    wait_flag(&g_bFilling, 300);       /* B gets its chance to fill too */
  }
  if( zeroFill && t_role=='B' ){
    set_flag(&g_bFilling);
    wait_flag(&g_aFrameWritten, 1000); /* the bug: B's fill lands late */
  }
  r = pwrite(fd, p, n, off);
  if( !zeroFill && t_role=='A' ) set_flag(&g_aFrameWritten);
  return r;
}

static int no_fallocate(int fd, int mode, off_t off, off_t len){
  (void)fd; (void)mode; (void)off; (void)len;
  errno = EOPNOTSUPP;                  /* force written zeros */
  return -1;
}

static u8 *slot_image(int fill){
  u8 *p = aligned_alloc(4096, SLOT);
  memset(p, fill, SLOT);
  return p;
}

static void *writer(void *arg){
  u32 frame = (u32)(uintptr_t)arg;
  u8 *img = slot_image(frame==16 ? 0xAA : 0xBB);
  t_role = frame==16 ? 'A' : 'B';
  CHECK_EQ(log_write_slots(g_log, frame, 1, img, 0, SLOT, LOG_WRITE_FRAME, 0),
           SQLITE_OK);
  free(img);
  return 0;
}

/* A valid 32-byte SQLite WAL header for 4096-byte pages. */
static void sqlite_header(u8 *h){
  u32 sum[2];
  memset(h, 0, WAL_HDR_BYTES);
  wf_put32(h, WAL_MAGIC_LE);
  wf_put32(h+4, WAL_FORMAT_VERSION);
  wf_put32(h+8, SLOT);
  wf_put32(h+16, 0x1234);
  wf_put32(h+20, 0x5678);
  wf_checksum(0, h, 24, 0, sum);
  wf_put32(h+24, sum[0]);
  wf_put32(h+28, sum[1]);
}

int main(void){
  char zDir[300], zPath[400];
  waldio_syscalls sys;
  waldio_options o;
  log_registry reg;
  log_request req;
  pthread_t a, b;
  u8 hdr[WAL_HDR_BYTES], *back;
  int fd;

  test_dir(zDir, sizeof(zDir), "growth");
  snprintf(zPath, sizeof(zPath), "%s/g.db-wal", zDir);
  waldio_syscalls_default(&sys);
  sys.xPwrite = hooked_pwrite;
  sys.xFallocate = no_fallocate;
  waldio_options_default(&o);
  o.prealloc_bytes = 65536;
  memset(&req, 0, sizeof(req));
  req.opts = &o;
  req.layout = WALDIO_LAYOUT_EMBED;
  req.zLayoutWhy = "test";
  req.mode = 0644;
  log_registry_init(&reg);
  CHECK_EQ(log_acquire(&reg, &sys, zPath, &req, &g_log), SQLITE_OK);
  if( !g_log ) return CHECK_DONE();
  sqlite_header(hdr);
  CHECK_EQ(log_write_header(g_log, hdr, 0), SQLITE_OK);
  CHECK_EQ(g_log->physSize, 4096);           /* a new log is block 0 only */
  back = slot_image(0x11);                   /* the first direct write ... */
  CHECK_EQ(log_write_slots(g_log, 1, 1, back, 0, SLOT, LOG_WRITE_FRAME, 0),
           SQLITE_OK);
  free(back);
  CHECK_EQ(g_log->physSize, 65536);          /* ... preallocates: frames 1..15
                                             ** fit, 16 does not */

  pthread_create(&a, 0, writer, (void*)(uintptr_t)16);
  wait_flag(&g_aFilling, 5000);
  pthread_create(&b, 0, writer, (void*)(uintptr_t)20);
  pthread_join(a, 0);
  pthread_join(b, 0);

  back = slot_image(0);
  fd = open(zPath, O_RDONLY);
  CHECK_EQ(pread(fd, back, SLOT, 16 * SLOT), SLOT);
  CHECK_EQ(back[0], 0xAA);                   /* A's frame survived */
  CHECK_EQ(back[SLOT-1], 0xAA);
  CHECK_EQ(pread(fd, back, SLOT, 20 * SLOT), SLOT);
  CHECK_EQ(back[0], 0xBB);
  CHECK_EQ(g_log->stats.prealloc_extends, 2); /* frame 1's and A's: B made none */
  close(fd);
  free(back);
  log_release(&reg, g_log, 0);
  log_registry_remove(&reg);
  unlink(zPath);
  rmdir(zDir);
  return CHECK_DONE();
}
