/*
** qemu_statx.c — preloaded into the C tests when they run under qemu-user
** (a cross build: make test-aarch64), to undo one emulator defect.
**
** qemu-user 7.2 (Debian 12) passes the kernel's statx() mask on to the
** program but not the fields it does not know: STATX_DIOALIGN comes back set
** with stx_dio_offset_align = stx_dio_mem_align = 0, which by the kernel's
** definition means "this file cannot do direct I/O" (test_target prints the
** raw answer). libwaldio then rightly refuses every log opened with
** waldio_io=direct, on a file system that does direct I/O perfectly well.
**
** This statx() clears STATX_DIOALIGN from exactly that answer, as a kernel
** older than 6.1 would leave it, so that libwaldio takes its documented
** fallback (the device's logical block size, dio_file.c): the path every
** phone whose kernel predates 6.1 takes. Nothing else changes.
*/
#ifndef _GNU_SOURCE
# define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <sys/stat.h>

typedef int (*statx_fn)(int, const char *, int, unsigned, struct statx *);

int statx(int dirfd, const char *zPath, int flags, unsigned mask,
          struct statx *sx){
  static statx_fn real;
  int rc;
  if( !real ) real = (statx_fn)dlsym(RTLD_NEXT, "statx");
  rc = real(dirfd, zPath, flags, mask, sx);
  if( rc==0 && (sx->stx_mask & STATX_DIOALIGN)
   && sx->stx_dio_offset_align==0 && sx->stx_dio_mem_align==0 ){
    sx->stx_mask &= ~STATX_DIOALIGN;
  }
  return rc;
}
