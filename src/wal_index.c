/*
** wal_index.c — which frames hold the newest copy of their page, read from
** SQLite's wal-index (see wal_index.h for the layout and why nothing here
** is trusted).
**
** The walk goes from mxFrame down to frame 1 and keeps a frame the first
** time its page number is seen (an open-addressing set of page numbers).
*/
#include "wal_index.h"
#include "sqlite_api.h"

#include <stdlib.h>
#include <string.h>

#define HDR_WORDS   (136 / 4)                 /* 2 headers + checkpoint info */
#define NPAGE       4096                      /* frames per region */
#define NPAGE_ONE   (NPAGE - HDR_WORDS)       /* frames in region 0 */

u32 wal_index_mx_frame(const volatile void *shm0){
  u32 mx;
  memcpy(&mx, (const u8*)shm0 + 16, sizeof(mx));
  return mx;
}

u64 wal_index_end_mark(const volatile void *shm0){
  u8 a[48], b[48];
  u32 mx, salt1;
  if( !shm0 ) return 0;
  memcpy(a, (const u8*)shm0, sizeof(a));
  __sync_synchronize();                  /* as walIndexTryHdr reads them */
  memcpy(b, (const u8*)shm0 + 48, sizeof(b));
  if( memcmp(a, b, sizeof(a))!=0 || a[12]==0 ) return 0;   /* torn, or !isInit */
  memcpy(&mx, a + 16, sizeof(mx));
  memcpy(&salt1, a + 32, sizeof(salt1));
  return ((u64)salt1 << 32) | mx;
}

u64 wal_index_frame_mark(const volatile void *shm0, u32 frame){
  u64 end = wal_index_end_mark(shm0);
  return end && frame<=(u32)end ? (end & ~(u64)0xffffffff) | frame : 0;
}

u32 wal_index_backfilled(const volatile void *shm0){
  u32 n;
  memcpy(&n, (const u8*)shm0 + 96, sizeof(n));
  return n;
}

u32 wal_index_read_mark(const volatile void *shm0, int i){
  u32 m;
  memcpy(&m, (const u8*)shm0 + 100 + 4 * i, sizeof(m));
  return m;
}

u32 wal_index_frame_page(const wal_index_view *v, u32 iFrame){
  u32 iRegion, idx;
  const volatile u32 *a;
  if( iFrame<=NPAGE_ONE ){
    iRegion = 0;
    idx = HDR_WORDS + iFrame - 1;
  }else{
    iRegion = 1 + (iFrame - NPAGE_ONE - 1) / NPAGE;
    idx = (iFrame - NPAGE_ONE - 1) % NPAGE;
  }
  if( iRegion>=WAL_INDEX_REGIONS || !v->apRegion[iRegion] ) return 0;
  a = (const volatile u32*)v->apRegion[iRegion];
  return a[idx];
}

/* Insert pgno into the set (capacity mask+1, a power of two); 1 if new. */
static int set_add(u32 *aSet, u32 mask, u32 pgno){
  u32 h = (pgno * 2654435761u) & mask;
  while( aSet[h] ){
    if( aSet[h]==pgno ) return 0;
    h = (h + 1) & mask;
  }
  aSet[h] = pgno;
  return 1;
}

int wal_index_newest_frames(const wal_index_view *v, u32 mxFrame,
                            u32 *aFrame, int nMax){
  u32 *aSet, mask = 63, f;
  int n = 0, i;
  while( mask/2<(u32)nMax ) mask = mask*2 + 1;  /* the set holds <= nMax */
  aSet = calloc((size_t)mask + 1, sizeof(u32));
  if( !aSet ) return 0;
  for(f=mxFrame; f>=1 && n<nMax; f--){
    u32 pgno = wal_index_frame_page(v, f);
    if( pgno==0 ){ n = 0; break; }              /* not mapped: give up */
    if( set_add(aSet, mask, pgno) ) aFrame[n++] = f;
  }
  free(aSet);
  for(i=0; i<n/2; i++){                         /* ascending */
    u32 t = aFrame[i];
    aFrame[i] = aFrame[n-1-i];
    aFrame[n-1-i] = t;
  }
  return n;
}
