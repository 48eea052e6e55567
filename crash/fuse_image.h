/*
** fuse_image.h — the FUSE file system that the block recorder
** (crash/block_recorder.c) and the device model (devmodel/device_model.c)
** both expose: a root directory holding two files,
**
**   disk  one image file, read and written in place, fim_image_size bytes
**   ctl   a control file of fim_ctl_bytes bytes (each program gives it its
**         meaning)
**
** and the parts of their FUSE operations that are the same: which file a
** path names, attributes, the directory listing, open, close, truncate, the
** connection settings (no page cache of ours between the loop device and the
** program: FOPEN_DIRECT_IO, no writeback cache, nothing cached by the kernel,
** so each request reaches the program as the loop device makes it), whole
** reads and writes of the image, and the checks of a fallocate request.
**
** Header-only, for a program of one source file: it includes this once,
** opens the image with fim_open_image and sets fim_ctl_bytes before
** fuse_main.
*/
#ifndef WALDIO_FUSE_IMAGE_H
#define WALDIO_FUSE_IMAGE_H

#include <fuse.h>

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef FALLOC_FL_KEEP_SIZE
# define FALLOC_FL_KEEP_SIZE 0x01
#endif
#ifndef FALLOC_FL_PUNCH_HOLE
# define FALLOC_FL_PUNCH_HOLE 0x02
#endif
#ifndef FALLOC_FL_ZERO_RANGE
# define FALLOC_FL_ZERO_RANGE 0x10
#endif

static uint64_t fim_image_size;     /* bytes of the disk file */
static off_t fim_ctl_bytes;         /* bytes of the ctl file */

enum { FIM_NONE, FIM_ROOT, FIM_DISK, FIM_CTL };

static int fim_which(const char *path){
  if( strcmp(path, "/") == 0 ) return FIM_ROOT;
  if( strcmp(path, "/disk") == 0 ) return FIM_DISK;
  if( strcmp(path, "/ctl") == 0 ) return FIM_CTL;
  return FIM_NONE;
}

/* The connection settings both programs need (their init callback calls it). */
static void fim_configure(struct fuse_conn_info *conn, struct fuse_config *cfg){
  conn->want &= ~FUSE_CAP_WRITEBACK_CACHE;
  conn->max_write = 1u << 20;         /* the kernel caps it (fuse max_pages) */
  cfg->direct_io = 1;
  cfg->kernel_cache = 0;
  cfg->attr_timeout = 0;
  cfg->entry_timeout = 0;
  cfg->use_ino = 1;
}

static int fim_getattr(const char *path, struct stat *st, struct fuse_file_info *fi){
  (void)fi;
  memset(st, 0, sizeof(*st));
  switch( fim_which(path) ){
    case FIM_ROOT: st->st_mode = S_IFDIR | 0755; st->st_nlink = 2; st->st_ino = 1; return 0;
    case FIM_DISK:
      st->st_mode = S_IFREG | 0600; st->st_nlink = 1; st->st_ino = 2;
      st->st_size = (off_t)fim_image_size;
      st->st_blocks = (blkcnt_t)(fim_image_size / 512);
      return 0;
    case FIM_CTL:
      st->st_mode = S_IFREG | 0600; st->st_nlink = 1; st->st_ino = 3;
      st->st_size = fim_ctl_bytes;
      return 0;
  }
  return -ENOENT;
}

static int fim_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off,
                       struct fuse_file_info *fi, enum fuse_readdir_flags flags){
  (void)off; (void)fi; (void)flags;
  if( fim_which(path) != FIM_ROOT ) return -ENOENT;
  fill(buf, ".", NULL, 0, 0);
  fill(buf, "..", NULL, 0, 0);
  fill(buf, "disk", NULL, 0, 0);
  fill(buf, "ctl", NULL, 0, 0);
  return 0;
}

static int fim_open(const char *path, struct fuse_file_info *fi){
  int w = fim_which(path);
  if( w != FIM_DISK && w != FIM_CTL ) return w == FIM_ROOT ? -EISDIR : -ENOENT;
  fi->direct_io = 1;
  fi->keep_cache = 0;
  return 0;
}

/* close(2) of a descriptor: not a flush of the device (FUSE_FLUSH). */
static int fim_flush(const char *path, struct fuse_file_info *fi){
  (void)path; (void)fi;
  return 0;
}

static int fim_truncate(const char *path, off_t size, struct fuse_file_info *fi){
  (void)fi;
  if( fim_which(path) == FIM_CTL ) return 0;          /* open(O_TRUNC) of ctl */
  return (uint64_t)size == fim_image_size ? 0 : -EPERM;
}

/* A read of the ctl file whose content is text (len bytes): the bytes read. */
static int fim_read_text(const char *text, size_t len, char *buf, size_t size, off_t off){
  if( off < 0 || (size_t)off >= len ) return 0;
  size_t n = len - (size_t)off;
  if( n > size ) n = size;
  memcpy(buf, text + off, n);
  return (int)n;
}

/* The part of a read of the disk file that lies in the image: its length. */
static size_t fim_clip(size_t size, off_t off){
  if( (uint64_t)off >= fim_image_size ) return 0;
  if( (uint64_t)off + size > fim_image_size ) size = (size_t)(fim_image_size - (uint64_t)off);
  return size;
}

/* Read size bytes of the image at off (zeros past a short image file):
** 0, or -errno. */
static int fim_pread_all(int fd, char *buf, size_t size, off_t off){
  size_t done = 0;
  while( done < size ){
    ssize_t n = pread(fd, buf + done, size - done, off + (off_t)done);
    if( n < 0 ){
      if( errno == EINTR ) continue;
      return -errno;
    }
    if( n == 0 ){
      memset(buf + done, 0, size - done);
      break;
    }
    done += (size_t)n;
  }
  return 0;
}

/* Write size bytes of the image at off: 0, or -errno. */
static int fim_pwrite_all(int fd, const char *buf, size_t size, off_t off){
  size_t done = 0;
  while( done < size ){
    ssize_t n = pwrite(fd, buf + done, size - done, off + (off_t)done);
    if( n < 0 ){
      if( errno == EINTR ) continue;
      return -errno;
    }
    done += (size_t)n;
  }
  return 0;
}

/* The loop device turns discards and write-zeroes requests into fallocate
** (PUNCH_HOLE or ZERO_RANGE, with KEEP_SIZE): check one, and clip *len to the
** image. 0, or the error to answer. */
static int fim_check_fallocate(const char *path, int mode, off_t off, off_t *len){
  if( fim_which(path) != FIM_DISK ) return -EOPNOTSUPP;
  if( !(mode & (FALLOC_FL_PUNCH_HOLE | FALLOC_FL_ZERO_RANGE)) ) return -EOPNOTSUPP;
  if( off < 0 || *len <= 0 || (uint64_t)off >= fim_image_size ) return -EINVAL;
  if( (uint64_t)(off + *len) > fim_image_size ) *len = (off_t)(fim_image_size - (uint64_t)off);
  return 0;
}

/* Open the image (read-write; a non-empty multiple of 4096 bytes) and set
** fim_image_size: its descriptor, or -1 after a message naming prog. */
static int fim_open_image(const char *prog, const char *path){
  int fd = open(path, O_RDWR);
  if( fd < 0 ){
    fprintf(stderr, "%s: %s: %s\n", prog, path, strerror(errno));
    return -1;
  }
  struct stat st;
  if( fstat(fd, &st) != 0 || st.st_size <= 0 || st.st_size % 4096 ){
    fprintf(stderr, "%s: %s: the image must be a non-empty multiple of 4096 bytes\n", prog, path);
    close(fd);
    return -1;
  }
  fim_image_size = (uint64_t)st.st_size;
  return fd;
}

#endif /* WALDIO_FUSE_IMAGE_H */
