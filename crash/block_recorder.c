/*
** block_recorder.c — the block-write recorder of `waldio crash --real`: a
** FUSE file system (libfuse3) that exposes one disk image as a file and logs
** every write and every flush that reaches it, in order, with the bytes
** (the idea of CrashMonkey's and dm-log-writes' logging target, in user
** space: this machine kind has no device-mapper).
**
**   block_recorder IMAGE LOG MOUNTPOINT [fuse options]
**
** MOUNTPOINT then holds two files:
**
**   disk   the image, read and written in place (IMAGE is changed). A loop
**          device is attached to it and ext4 mounted on the loop device, so
**          every block ext4 writes, and every cache flush it asks for,
**          arrives here: the loop device turns REQ_PREFLUSH, a flush request
**          and an emulated FUA (the loop device has no FUA: the block layer
**          sends write + flush) into an fsync of this file, which reaches
**          rec_fsync below (docs/crash.md "Real kernel", checked by
**          tests/py/test_crash_real.py::test_flushes_reach_the_recorder).
**   ctl    control. Reading it returns the current sequence number (the
**          number of records logged so far, decimal, newline). Writing a
**          line logs a MARK record with that text: the workload marks each
**          acknowledged commit's place in the block log ("ack W N g").
**
** Every file is opened with FOPEN_DIRECT_IO and the writeback cache is off,
** so every write(2) of the loop device reaches this process as it is made
** (no page cache of this file system between the loop device and the log:
** nothing is coalesced, reordered or hidden), and every read comes from
** the image. The loop runs single-threaded: one request at a time, so the
** log's order is the order in which requests reached the "device".
**
** The log (read by python/waldio/crash/real/blocklog.py): the 48-byte file
** header "WALDIOBLK1\n\0\0\0\0\0", u64 image size, u64 CLOCK_MONOTONIC and
** u64 CLOCK_REALTIME at the start (ns), u64 0; then records, each a 48-byte
** little-endian header and `plen` payload bytes:
**
**   u8  type    BLK_WRITE, BLK_FLUSH, BLK_ZERO, BLK_MARK
**   u8  flags   BLK_WRITE: BLK_F_ZEROS (all-zero data, not stored)
**               BLK_FLUSH: BLK_F_DATASYNC (fdatasync rather than fsync)
**   u16 pad
**   u32 plen    payload bytes (WRITE: length unless BLK_F_ZEROS; MARK: text)
**   u64 seq     1, 2, 3 ... (the record's place in the log)
**   u64 t_ns    CLOCK_MONOTONIC when the request was handled
**   u64 off     byte offset in the image (WRITE, ZERO)
**   u64 len     bytes (WRITE, ZERO: a fallocate that zeroes, punches or
**               discards the range; it reads as zeros afterwards)
**   u64 pad
**
** A record is logged after the image was changed and before the request is
** answered: whatever the kernel saw completed is in the log. The log is
** buffered in this process and written out at unmount (destroy); a daemon
** that dies leaves a torn log, which the reader refuses.
*/
#define FUSE_USE_VERSION 31
#ifndef _GNU_SOURCE
# define _GNU_SOURCE
#endif

#include "fuse_image.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define BLK_MAGIC "WALDIOBLK1\n\0\0\0\0\0"
#define BLK_HDR_BYTES 48
#define BLK_MARK_MAX 4096

enum { BLK_WRITE = 1, BLK_FLUSH = 2, BLK_ZERO = 3, BLK_MARK = 4 };
enum { BLK_F_ZEROS = 1, BLK_F_DATASYNC = 2 };

/* The recorder's state: one image, one log, one request at a time. */
typedef struct blk_recorder {
  int image_fd;
  FILE *log;
  uint64_t seq;            /* records logged so far */
  int log_failed;          /* a log write failed: every request fails (EIO) */
} blk_recorder;

static blk_recorder g_rec;   /* the one instance fuse_main's callbacks use */

static uint64_t clock_ns(clockid_t id){
  struct timespec ts;
  clock_gettime(id, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void put_u64(unsigned char *p, uint64_t v){
  for(int i = 0; i < 8; i++) p[i] = (unsigned char)(v >> (8 * i));
}

static int all_zero(const char *buf, size_t n){
  static const char zero[4096];
  while( n > 0 ){
    size_t k = n < sizeof(zero) ? n : sizeof(zero);
    if( memcmp(buf, zero, k) ) return 0;
    buf += k;
    n -= k;
  }
  return 1;
}

/* Append one record (header + payload). 0, or -EIO once the log failed:
** a recording with a hole in it is worthless, so the device fails too. */
static int log_record(int type, int flags, uint64_t off, uint64_t len,
                      const void *payload, uint32_t plen){
  unsigned char h[BLK_HDR_BYTES];
  if( g_rec.log_failed ) return -EIO;
  memset(h, 0, sizeof(h));
  h[0] = (unsigned char)type;
  h[1] = (unsigned char)flags;
  h[4] = (unsigned char)plen;
  h[5] = (unsigned char)(plen >> 8);
  h[6] = (unsigned char)(plen >> 16);
  h[7] = (unsigned char)(plen >> 24);
  put_u64(h + 8, g_rec.seq + 1);
  put_u64(h + 16, clock_ns(CLOCK_MONOTONIC));
  put_u64(h + 24, off);
  put_u64(h + 32, len);
  if( fwrite(h, 1, sizeof(h), g_rec.log) != sizeof(h)
   || (plen && fwrite(payload, 1, plen, g_rec.log) != plen) ){
    g_rec.log_failed = 1;
    fprintf(stderr, "block_recorder: writing the log failed: %s\n", strerror(errno));
    return -EIO;
  }
  g_rec.seq++;
  return 0;
}

/* ------------------------------------------------------------ the files
** (the file system itself: fuse_image.h) */

#define CTL_TEXT_BYTES 21   /* 20 digits and a newline */

static void *rec_init(struct fuse_conn_info *conn, struct fuse_config *cfg){
  fim_configure(conn, cfg);
  return NULL;
}

static void rec_destroy(void *unused){
  (void)unused;
  if( g_rec.log ){
    if( fflush(g_rec.log) != 0 || fsync(fileno(g_rec.log)) != 0 ){
      fprintf(stderr, "block_recorder: flushing the log failed: %s\n", strerror(errno));
    }
    fclose(g_rec.log);
    g_rec.log = NULL;
  }
}

static int rec_read(const char *path, char *buf, size_t size, off_t off,
                    struct fuse_file_info *fi){
  (void)fi;
  if( fim_which(path) == FIM_CTL ){
    char text[CTL_TEXT_BYTES + 1];
    snprintf(text, sizeof(text), "%20" PRIu64 "\n", g_rec.seq);
    return fim_read_text(text, CTL_TEXT_BYTES, buf, size, off);
  }
  if( fim_which(path) != FIM_DISK ) return -ENOENT;
  size = fim_clip(size, off);
  int rc = fim_pread_all(g_rec.image_fd, buf, size, off);
  return rc ? rc : (int)size;
}

static int rec_write(const char *path, const char *buf, size_t size, off_t off,
                     struct fuse_file_info *fi){
  (void)fi;
  if( fim_which(path) == FIM_CTL ){
    size_t n = size;
    while( n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\0') ) n--;
    if( n > BLK_MARK_MAX ) return -EMSGSIZE;
    int rc = log_record(BLK_MARK, 0, 0, 0, buf, (uint32_t)n);
    return rc ? rc : (int)size;
  }
  if( fim_which(path) != FIM_DISK ) return -ENOENT;
  if( (uint64_t)off + size > fim_image_size ) return -ENOSPC;
  int rc = fim_pwrite_all(g_rec.image_fd, buf, size, off);
  if( rc ) return rc;
  int zeros = all_zero(buf, size);
  rc = log_record(BLK_WRITE, zeros ? BLK_F_ZEROS : 0, (uint64_t)off, size,
                  buf, zeros ? 0 : (uint32_t)size);
  return rc ? rc : (int)size;
}

/* A cache flush of the "device": everything logged before it is durable. */
static int rec_fsync(const char *path, int datasync, struct fuse_file_info *fi){
  (void)fi;
  if( fim_which(path) != FIM_DISK ) return 0;
  return log_record(BLK_FLUSH, datasync ? BLK_F_DATASYNC : 0, 0, 0, NULL, 0);
}

/* A discard or write-zeroes request: the range reads as zeros. */
static int rec_fallocate(const char *path, int mode, off_t off, off_t len,
                         struct fuse_file_info *fi){
  (void)fi;
  int rc = fim_check_fallocate(path, mode, off, &len);
  if( rc ) return rc;
  if( fallocate(g_rec.image_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, len) != 0 ){
    return -errno;
  }
  return log_record(BLK_ZERO, 0, (uint64_t)off, (uint64_t)len, NULL, 0);
}

static const struct fuse_operations rec_ops = {
  .init = rec_init,
  .destroy = rec_destroy,
  .getattr = fim_getattr,
  .readdir = fim_readdir,
  .open = fim_open,
  .read = rec_read,
  .write = rec_write,
  .fsync = rec_fsync,
  .flush = fim_flush,
  .fallocate = rec_fallocate,
  .truncate = fim_truncate,
};

static int open_log(const char *path){
  unsigned char h[BLK_HDR_BYTES];
  g_rec.log = fopen(path, "wb");
  if( !g_rec.log ) return -1;
  setvbuf(g_rec.log, NULL, _IOFBF, 4 << 20);
  memset(h, 0, sizeof(h));
  memcpy(h, BLK_MAGIC, 16);
  put_u64(h + 16, fim_image_size);
  put_u64(h + 24, clock_ns(CLOCK_MONOTONIC));
  put_u64(h + 32, clock_ns(CLOCK_REALTIME));
  return fwrite(h, 1, sizeof(h), g_rec.log) == sizeof(h) ? 0 : -1;
}

int main(int argc, char **argv){
  if( argc < 4 ){
    fprintf(stderr, "usage: %s IMAGE LOG MOUNTPOINT [fuse options]\n", argv[0]);
    return 2;
  }
  g_rec.image_fd = fim_open_image("block_recorder", argv[1]);
  if( g_rec.image_fd < 0 ) return 1;
  fim_ctl_bytes = CTL_TEXT_BYTES;
  if( open_log(argv[2]) != 0 ){
    fprintf(stderr, "block_recorder: %s: %s\n", argv[2], strerror(errno));
    return 1;
  }
  /* fuse_main(argv[0] MOUNTPOINT -f -s [options]): foreground, one thread. */
  char *fargv[64];
  int fargc = 0;
  fargv[fargc++] = argv[0];
  fargv[fargc++] = argv[3];
  fargv[fargc++] = "-f";
  fargv[fargc++] = "-s";
  for(int i = 4; i < argc && fargc < 63; i++) fargv[fargc++] = argv[i];
  fargv[fargc] = NULL;
  int rc = fuse_main(fargc, fargv, &rec_ops, NULL);
  rec_destroy(NULL);                  /* a mount that failed never called it */
  close(g_rec.image_fd);
  return rc;
}
