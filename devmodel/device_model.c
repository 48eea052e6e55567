/*
** device_model.c — an emulated phone storage device (issue 28): a FUSE file
** system (libfuse3) that exposes one disk image as a file whose requests
** cost what a device profile says, in the manner of crash/block_recorder.c.
**
**   device_model IMAGE MOUNTPOINT [NAME=VALUE ...] [-- fuse options]
**
** A loop device is attached to MOUNTPOINT/disk (python/waldio/device/stack.py,
** with --direct-io=on so that it keeps several requests in flight) and ext4
** is made on it, so every block request ext4 sends, and every cache flush,
** arrives here: the loop device turns a write into a write(2) of this file,
** REQ_PREFLUSH and a flush request into an fsync, an emulated FUA (the loop
** device has no FUA, /sys/block/loopN/queue/fua = 0) into write + fsync, a
** discard into fallocate(PUNCH_HOLE) and write-zeroes into
** fallocate(ZERO_RANGE). As in the recorder, every file is opened with
** FOPEN_DIRECT_IO and the writeback cache is off: each request reaches this
** process as the loop device makes it.
**
** MOUNTPOINT holds two files (the file system itself: crash/fuse_image.h,
** shared with the recorder):
**
**   disk  the image, read and written in place; nothing is ever synced to
**         the host's disk (the image is scratch: durability is not modelled,
**         only the time it costs).
**   ctl   reading it returns one JSON object (padded with spaces to
**         CTL_BYTES): the parameters and the model's own accounting since the
**         last reset (below). Writing "reset" zeroes the accounting;
**         "overhead_us A [B]" sets the back-dating of arrivals to A us per
**         request and B us per KiB it carries (below); "costs off" makes
**         every request cost nothing until "costs on", and "costs fixed X"
**         makes every one cost X us (to measure this machine's own stack
**         with the same process).
**
** THE MODEL. A request is served by one of queue_depth command slots and,
** for its data, by one shared medium (the NAND and its bus):
**
**   read  = read_us on a slot,  then len / read_mbps on the medium
**   write = write_us on a slot, then len / write_mbps on the medium, plus
**           rmw_us when the request is not whole units (off or len not a
**           multiple of unit_bytes: the device reads, merges and programs a
**           unit: the small-request penalty)
**   flush = a barrier: it starts when every slot and the medium are idle,
**           costs flush_us + flush_us_per_kib * (KiB written since the last
**           flush, at most cache_kib: what did not fit in the device's cache
**           was programmed as it came, at the write rate) when something was
**           written, flush_empty_us otherwise,
**           and holds every slot and the medium until it is done. It covers
**           every write accounted before it (the kernel sends a flush only
**           after the writes it must cover have completed).
**   discard (PUNCH_HOLE) = discard_us on a slot. Write-zeroes (ZERO_RANGE)
**           costs what a write of the range costs (eMMC and SD cards have no
**           unmapping write-zeroes: the host writes the zeros).
**
** Optional reliable write (reliable_write_us > 0): a flush that comes right
** after exactly one write, with nothing else written since the last flush,
** is what the block layer makes of a FUA write on the loop device (write,
** then flush); it costs reliable_write_us instead of the flush formula. The
** model cannot tell it from an fdatasync after one write (the same two
** requests reach it), which it then charges the same.
**
** queue_depth 1 (eMMC, SD) serialises every request; a larger queue (UFS,
** NVMe) overlaps the per-command latencies while the medium still moves one
** request's data at a time.
**
** Timing is kept on a virtual clock (CLOCK_MONOTONIC, ns): under one mutex a
** request is given its start (the later of its arrival and its resources'
** free times) and its completion; the data is then copied to or from the
** image and the worker thread sleeps until the completion time (absolute
** clock_nanosleep, timer slack 1 ns), then answers. Arrivals are back-dated
** by the time this machine's own stack (system call, file system, block
** layer, loop device, FUSE, copying the data) takes around a request,
** measured by the caller (python/waldio/device/stack.py), so that an
** application sees the profile's cost rather than the profile's cost plus
** this machine's.
**
** ACCOUNTING (ctl): requests and bytes by kind, the bytes each flush covered,
** charged_us (the sum of the service times the model computed: what the
** device was busy), slept_us (what the workers actually slept), late (answers
** sent more than LATE_NS after their modelled completion, because this
** machine was slower than the profile: a run with many is bounded by the host,
** not by the model), late_us and overrun_us (answers after their modelled
** completion, summed), and the largest number of requests in flight at once.
** Tests check this accounting, not wall-clock time
** (tests/py/test_device.py).
*/
#define FUSE_USE_VERSION 31
#ifndef _GNU_SOURCE
# define _GNU_SOURCE
#endif

#include "fuse_image.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_QUEUE 256
#define CTL_BYTES 4096
#define LATE_NS 200000           /* 0.2 ms after the modelled completion */

/* The profile's parameters, as given on the command line (units in the
** names). Every one must be given: the Python loader owns the defaults. */
typedef struct dm_params {
  double queue_depth;
  double read_us, read_mbps;
  double write_us, write_mbps;
  double unit_bytes, rmw_us;
  double flush_us, flush_us_per_kib, flush_empty_us;
  double cache_kib;
  double discard_us;
  double reliable_write_us;
} dm_params;

static const struct { const char *name; size_t off; double lo, hi; } PARAMS[] = {
#define P(n, lo, hi) { #n, offsetof(dm_params, n), lo, hi }
  P(queue_depth, 1, MAX_QUEUE),
  P(read_us, 0, 1e6), P(read_mbps, 0.001, 1e6),
  P(write_us, 0, 1e6), P(write_mbps, 0.001, 1e6),
  P(unit_bytes, 512, 1 << 20), P(rmw_us, 0, 1e6),
  P(flush_us, 0, 1e7), P(flush_us_per_kib, 0, 1e6), P(flush_empty_us, 0, 1e7),
  P(cache_kib, 0, 1 << 24),
  P(discard_us, 0, 1e7),
  P(reliable_write_us, 0, 1e7),
#undef P
};
#define N_PARAMS (sizeof(PARAMS) / sizeof(PARAMS[0]))

enum { K_READ, K_WRITE, K_FLUSH, K_DISCARD, K_ZERO, N_KINDS };
static const char *const KIND_NAMES[N_KINDS] = { "read", "write", "flush", "discard", "zero" };

typedef struct dm_stats {
  uint64_t requests[N_KINDS];
  uint64_t bytes[N_KINDS];
  uint64_t flush_covered_bytes;   /* sum over flushes of the bytes each covered */
  uint64_t flushes_dirty;         /* flushes that covered at least one write */
  uint64_t reliable_writes;       /* flushes charged as a reliable write */
  uint64_t rmw;                   /* writes charged the small-request penalty */
  uint64_t charged_ns, slept_ns;
  uint64_t late, late_ns;
  uint64_t overrun_ns;             /* sum of (answer - modelled completion) */
  uint64_t max_inflight;
} dm_stats;

/* The device: one image, its parameters, its virtual clock. Every field
** below `lock` is read and written under it. */
typedef struct dm_device {
  int image_fd;
  dm_params p;
  pthread_mutex_t lock;
  int64_t overhead_ns;            /* back-dating of arrivals: per request */
  double overhead_ns_per_kib;     /* ... and per KiB it carries */
  int costs_off;                  /* "costs off": every request costs 0 */
  uint64_t fixed_ns;              /* "costs fixed X": every request costs X us, no queue */
  uint64_t slot_free[MAX_QUEUE];  /* when each command slot is free (ns) */
  uint64_t medium_free;           /* when the medium is free */
  uint64_t dirty_bytes;           /* written since the last flush */
  uint64_t dirty_writes;          /* write requests since the last flush */
  int last_was_write;             /* the last request accounted was a write */
  uint64_t inflight;
  dm_stats st;
} dm_device;

static dm_device g_dev;

static uint64_t now_ns(void){
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t us_ns(double us){ return us <= 0 ? 0 : (uint64_t)llround(us * 1000.0); }

/* Nanoseconds to move len bytes at mbps MB/s (10^6 bytes per second). */
static uint64_t xfer_ns(uint64_t len, double mbps){
  return (uint64_t)llround((double)len * 1000.0 / mbps);
}

static uint64_t max_u64(uint64_t a, uint64_t b){ return a > b ? a : b; }

/* Account one request: its completion time on the virtual clock. Called
** with the lock held; `arrive` is already back-dated. */
static uint64_t model_request(dm_device *d, int kind, uint64_t off, uint64_t len,
                              uint64_t arrive){
  unsigned q = (unsigned)d->p.queue_depth;
  uint64_t done;
  d->st.requests[kind]++;
  d->st.bytes[kind] += len;
  if( d->costs_off ) return arrive;
  if( d->fixed_ns ) return arrive + d->fixed_ns;
  if( kind == K_FLUSH ){
    uint64_t start = max_u64(arrive, d->medium_free), cost;
    for(unsigned i = 0; i < q; i++) start = max_u64(start, d->slot_free[i]);
    if( d->p.reliable_write_us > 0 && d->dirty_writes == 1 && d->last_was_write ){
      cost = us_ns(d->p.reliable_write_us);
      d->st.reliable_writes++;
    }else if( d->dirty_bytes > 0 ){
      double kib = (double)d->dirty_bytes / 1024.0;
      if( kib > d->p.cache_kib ) kib = d->p.cache_kib;
      cost = us_ns(d->p.flush_us + d->p.flush_us_per_kib * kib);
    }else{
      cost = us_ns(d->p.flush_empty_us);
    }
    if( d->dirty_bytes > 0 ) d->st.flushes_dirty++;
    d->st.flush_covered_bytes += d->dirty_bytes;
    d->dirty_bytes = 0;
    d->dirty_writes = 0;
    done = start + cost;
    for(unsigned i = 0; i < q; i++) d->slot_free[i] = done;
    d->medium_free = done;
    d->st.charged_ns += cost;
    d->last_was_write = 0;
    return done;
  }
  unsigned s = 0;                                  /* the slot free first */
  for(unsigned i = 1; i < q; i++) if( d->slot_free[i] < d->slot_free[s] ) s = i;
  uint64_t start = max_u64(arrive, d->slot_free[s]);
  uint64_t cmd, data;
  if( kind == K_READ ){
    cmd = us_ns(d->p.read_us);
    data = xfer_ns(len, d->p.read_mbps);
  }else if( kind == K_DISCARD ){
    cmd = us_ns(d->p.discard_us);
    data = 0;
  }else{                                            /* K_WRITE, K_ZERO */
    uint64_t unit = (uint64_t)d->p.unit_bytes;
    cmd = us_ns(d->p.write_us);
    data = xfer_ns(len, d->p.write_mbps);
    if( off % unit || len % unit ){
      data += us_ns(d->p.rmw_us);
      d->st.rmw++;
    }
    d->dirty_bytes += len;
    d->dirty_writes++;
  }
  uint64_t data_start = max_u64(start + cmd, d->medium_free);
  done = data_start + data;
  if( data > 0 ) d->medium_free = done;
  d->slot_free[s] = done;
  d->st.charged_ns += cmd + data;
  d->last_was_write = (kind == K_WRITE || kind == K_ZERO);
  return done;
}

/* Begin a request: its modelled completion time. */
static uint64_t begin_request(int kind, uint64_t off, uint64_t len){
  dm_device *d = &g_dev;
  uint64_t t = now_ns();
  pthread_mutex_lock(&d->lock);
  uint64_t back = (uint64_t)d->overhead_ns
                + (uint64_t)llround(d->overhead_ns_per_kib * (double)len / 1024.0);
  uint64_t arrive = t > back ? t - back : t;
  uint64_t done = model_request(d, kind, off, len, arrive);
  d->inflight++;
  if( d->inflight > d->st.max_inflight ) d->st.max_inflight = d->inflight;
  pthread_mutex_unlock(&d->lock);
  return done;
}

/* How much later than asked clock_nanosleep returns on this machine (ns, a
** moving average over the requests that slept): a worker sleeps until
** done - wake_early and spins the rest, so that a sleeping CPU's wake-up
** latency (tens of microseconds in a virtual machine) is not charged to the
** device; it yields while it waits, since on a busy machine a spinning worker
** would take the CPU the kernel needs to deliver the answer. Read and written without the lock: a lost update only delays the
** average. */
static _Atomic uint64_t g_wake_early_ns = 20000;
#define WAKE_EARLY_MAX_NS 400000

/* End a request: wait until its completion time, then account the wait. */
static void end_request(uint64_t done){
  dm_device *d = &g_dev;
  uint64_t t = now_ns(), slept = 0;
  if( done > t ){
    uint64_t early = g_wake_early_ns;
    if( done - t > early ){
      uint64_t until = done - early;
      struct timespec ts = { (time_t)(until / 1000000000u), (long)(until % 1000000000u) };
      while( clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR ){}
      uint64_t over = now_ns() - until;
      if( over > WAKE_EARLY_MAX_NS ) over = WAKE_EARLY_MAX_NS;
      g_wake_early_ns = early - early / 8 + over / 8;
    }
    while( now_ns() < done ) sched_yield();       /* the rest, giving way */
    slept = done - t;
  }
  uint64_t end = now_ns();
  pthread_mutex_lock(&d->lock);
  d->inflight--;
  d->st.slept_ns += slept;
  if( end > done ) d->st.overrun_ns += end - done;
  if( end > done + LATE_NS ){
    d->st.late++;
    d->st.late_ns += end - done;
  }
  pthread_mutex_unlock(&d->lock);
}

/* ------------------------------------------------------------ ctl */

/* Append to a bounded text buffer; *n may pass cap (then the text was cut). */
static void appendf(char *buf, size_t cap, size_t *n, const char *fmt, ...)
  __attribute__((format(printf, 4, 5)));
static void appendf(char *buf, size_t cap, size_t *n, const char *fmt, ...){
  va_list ap;
  va_start(ap, fmt);
  int k = vsnprintf(buf + (*n < cap ? *n : cap), *n < cap ? cap - *n : 0, fmt, ap);
  va_end(ap);
  if( k > 0 ) *n += (size_t)k;
}

/* The ctl file's content: the parameters and the accounting, one JSON
** object padded with spaces to cap bytes. */
static int ctl_text(char *buf, size_t cap){
  dm_device *d = &g_dev;
  size_t n = 0;
  pthread_mutex_lock(&d->lock);
  appendf(buf, cap, &n, "{\"params\": {");
  for(size_t i = 0; i < N_PARAMS; i++){
    appendf(buf, cap, &n, "%s\"%s\": %.17g", i ? ", " : "", PARAMS[i].name,
            *(const double *)((const char *)&d->p + PARAMS[i].off));
  }
  appendf(buf, cap, &n, "}, \"overhead_us\": %.3f, \"costs\": \"%s\", \"image_bytes\": %" PRIu64
          ", \"overhead_us_per_kib\": %.4f, \"requests\": {", (double)d->overhead_ns / 1000.0,
          d->costs_off ? "off" : d->fixed_ns ? "fixed" : "on", fim_image_size,
          d->overhead_ns_per_kib / 1000.0);
  for(int k = 0; k < N_KINDS; k++){
    appendf(buf, cap, &n, "%s\"%s\": %" PRIu64, k ? ", " : "", KIND_NAMES[k], d->st.requests[k]);
  }
  appendf(buf, cap, &n, "}, \"bytes\": {");
  for(int k = 0; k < N_KINDS; k++){
    appendf(buf, cap, &n, "%s\"%s\": %" PRIu64, k ? ", " : "", KIND_NAMES[k], d->st.bytes[k]);
  }
  appendf(buf, cap, &n, "}, \"flush_covered_bytes\": %" PRIu64 ", \"flushes_dirty\": %" PRIu64
          ", \"reliable_writes\": %" PRIu64 ", \"rmw\": %" PRIu64
          ", \"dirty_bytes\": %" PRIu64 ", \"charged_us\": %.3f, \"slept_us\": %.3f"
          ", \"late\": %" PRIu64 ", \"late_us\": %.3f, \"overrun_us\": %.3f"
          ", \"wake_early_us\": %.3f, \"max_inflight\": %" PRIu64 "}",
          d->st.flush_covered_bytes, d->st.flushes_dirty, d->st.reliable_writes, d->st.rmw,
          d->dirty_bytes, (double)d->st.charged_ns / 1000.0, (double)d->st.slept_ns / 1000.0,
          d->st.late, (double)d->st.late_ns / 1000.0, (double)d->st.overrun_ns / 1000.0,
          (double)g_wake_early_ns / 1000.0, d->st.max_inflight);
  pthread_mutex_unlock(&d->lock);
  if( n + 1 >= cap ) return -EOVERFLOW;
  memset(buf + n, ' ', cap - 1 - n);
  buf[cap - 1] = '\n';
  return 0;
}

static int ctl_command(const char *buf, size_t size){
  char line[128];
  if( size >= sizeof(line) ) return -EINVAL;
  memcpy(line, buf, size);
  line[size] = 0;
  while( size > 0 && (line[size - 1] == '\n' || line[size - 1] == ' ') ) line[--size] = 0;
  dm_device *d = &g_dev;
  if( strcmp(line, "reset") == 0 ){
    pthread_mutex_lock(&d->lock);
    memset(&d->st, 0, sizeof(d->st));
    d->st.max_inflight = d->inflight;
    pthread_mutex_unlock(&d->lock);
    return 0;
  }
  if( strcmp(line, "costs off") == 0 || strcmp(line, "costs on") == 0 ){
    pthread_mutex_lock(&d->lock);
    d->costs_off = line[7] == 'f';
    d->fixed_ns = 0;
    pthread_mutex_unlock(&d->lock);
    return 0;
  }
  double us;
  char *end;
  if( strncmp(line, "costs fixed ", 12) == 0 ){
    us = strtod(line + 12, &end);
    if( *end || !(us > 0 && us < 1e6) ) return -EINVAL;
    pthread_mutex_lock(&d->lock);
    d->costs_off = 0;
    d->fixed_ns = (uint64_t)llround(us * 1000.0);
    pthread_mutex_unlock(&d->lock);
    return 0;
  }
  if( strncmp(line, "overhead_us ", 12) == 0 ){       /* "overhead_us A [B per KiB]" */
    us = strtod(line + 12, &end);
    double per_kib = 0;
    if( *end == ' ' ) per_kib = strtod(end + 1, &end);
    if( *end || !(us >= 0 && us < 1e6) || !(per_kib >= 0 && per_kib < 1e4) ) return -EINVAL;
    pthread_mutex_lock(&d->lock);
    d->overhead_ns = (int64_t)llround(us * 1000.0);
    d->overhead_ns_per_kib = per_kib * 1000.0;
    pthread_mutex_unlock(&d->lock);
    return 0;
  }
  return -EINVAL;
}

/* ------------------------------------------------------------ the files
** (the file system itself: crash/fuse_image.h, shared with the recorder) */

static void *dm_init(struct fuse_conn_info *conn, struct fuse_config *cfg){
  fim_configure(conn, cfg);
  if( conn->capable & FUSE_CAP_ASYNC_DIO ) conn->want |= FUSE_CAP_ASYNC_DIO;
  conn->max_background = MAX_QUEUE;    /* the loop device's async requests */
  conn->congestion_threshold = MAX_QUEUE;
  /* Each worker thread sleeps until its request's completion: no slack. */
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
  return NULL;
}

static int dm_read(const char *path, char *buf, size_t size, off_t off,
                   struct fuse_file_info *fi){
  (void)fi;
  if( fim_which(path) == FIM_CTL ){
    char text[CTL_BYTES];
    int rc = ctl_text(text, sizeof(text));
    return rc ? rc : fim_read_text(text, CTL_BYTES, buf, size, off);
  }
  if( fim_which(path) != FIM_DISK ) return -ENOENT;
  size = fim_clip(size, off);
  uint64_t done_at = begin_request(K_READ, (uint64_t)off, size);
  int rc = fim_pread_all(g_dev.image_fd, buf, size, off);
  end_request(done_at);
  return rc ? rc : (int)size;
}

static int dm_write(const char *path, const char *buf, size_t size, off_t off,
                    struct fuse_file_info *fi){
  (void)fi;
  if( fim_which(path) == FIM_CTL ){
    int rc = ctl_command(buf, size);
    return rc ? rc : (int)size;
  }
  if( fim_which(path) != FIM_DISK ) return -ENOENT;
  if( (uint64_t)off + size > fim_image_size ) return -ENOSPC;
  uint64_t done_at = begin_request(K_WRITE, (uint64_t)off, size);
  int rc = fim_pwrite_all(g_dev.image_fd, buf, size, off);
  end_request(done_at);
  return rc ? rc : (int)size;
}

/* A cache flush of the device: it covers every write accounted before it. */
static int dm_fsync(const char *path, int datasync, struct fuse_file_info *fi){
  (void)datasync; (void)fi;
  if( fim_which(path) != FIM_DISK ) return 0;
  end_request(begin_request(K_FLUSH, 0, 0));
  return 0;
}

/* A discard (PUNCH_HOLE) or write-zeroes (ZERO_RANGE) request. */
static int dm_fallocate(const char *path, int mode, off_t off, off_t len,
                        struct fuse_file_info *fi){
  (void)fi;
  int rc = fim_check_fallocate(path, mode, off, &len);
  if( rc ) return rc;
  int kind = (mode & FALLOC_FL_PUNCH_HOLE) ? K_DISCARD : K_ZERO;
  uint64_t done_at = begin_request(kind, (uint64_t)off, (uint64_t)len);
  rc = fallocate(g_dev.image_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, len)
     ? -errno : 0;
  end_request(done_at);
  return rc;
}

static const struct fuse_operations dm_ops = {
  .init = dm_init,
  .getattr = fim_getattr,
  .readdir = fim_readdir,
  .open = fim_open,
  .read = dm_read,
  .write = dm_write,
  .fsync = dm_fsync,
  .flush = fim_flush,
  .fallocate = dm_fallocate,
  .truncate = fim_truncate,
};

/* NAME=VALUE into g_dev.p: 0, or -1 with the reason on stderr. */
static int set_param(const char *arg, unsigned char *given){
  const char *eq = strchr(arg, '=');
  if( !eq ){
    fprintf(stderr, "device_model: %s: expected NAME=VALUE\n", arg);
    return -1;
  }
  for(size_t i = 0; i < N_PARAMS; i++){
    if( strlen(PARAMS[i].name) == (size_t)(eq - arg) && !strncmp(arg, PARAMS[i].name, (size_t)(eq - arg)) ){
      char *end;
      double v = strtod(eq + 1, &end);
      if( end == eq + 1 || *end || !(v >= PARAMS[i].lo && v <= PARAMS[i].hi) ){
        fprintf(stderr, "device_model: %s: must be a number from %g to %g\n",
                arg, PARAMS[i].lo, PARAMS[i].hi);
        return -1;
      }
      *(double *)((char *)&g_dev.p + PARAMS[i].off) = v;
      given[i] = 1;
      return 0;
    }
  }
  fprintf(stderr, "device_model: %s: unknown parameter\n", arg);
  return -1;
}

int main(int argc, char **argv){
  if( argc < 3 ){
    fprintf(stderr, "usage: %s IMAGE MOUNTPOINT NAME=VALUE... [-- fuse options]\n", argv[0]);
    return 2;
  }
  unsigned char given[N_PARAMS] = {0};
  int i = 3;
  for(; i < argc && strcmp(argv[i], "--") != 0; i++){
    if( set_param(argv[i], given) ) return 2;
  }
  for(size_t k = 0; k < N_PARAMS; k++){
    if( !given[k] ){
      fprintf(stderr, "device_model: parameter %s is missing\n", PARAMS[k].name);
      return 2;
    }
  }
  if( g_dev.p.queue_depth != floor(g_dev.p.queue_depth) ){
    fprintf(stderr, "device_model: queue_depth must be a whole number\n");
    return 2;
  }
  g_dev.image_fd = fim_open_image("device_model", argv[1]);
  if( g_dev.image_fd < 0 ) return 1;
  fim_ctl_bytes = CTL_BYTES;
  pthread_mutex_init(&g_dev.lock, NULL);
  prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);     /* inherited by the worker threads */
  /* fuse_main(argv[0] MOUNTPOINT -f [options]): foreground, multi-threaded
  ** (one worker per request in flight, up to the queue and then some). */
  char *fargv[64], threads[64];
  int fargc = 0;
  snprintf(threads, sizeof(threads), "max_threads=%d", (int)g_dev.p.queue_depth + 16);
  fargv[fargc++] = argv[0];
  fargv[fargc++] = argv[2];
  fargv[fargc++] = "-f";
  fargv[fargc++] = "-o";
  fargv[fargc++] = threads;
  for(i++; i < argc && fargc < 63; i++) fargv[fargc++] = argv[i];
  fargv[fargc] = NULL;
  int rc = fuse_main(fargc, fargv, &dm_ops, NULL);
  close(g_dev.image_fd);
  return rc;
}
