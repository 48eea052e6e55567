/*
** frame_cache.c — direct-mapped cache of recent log slots (see frame_cache.h).
*/
#include "frame_cache.h"

#include <stdlib.h>
#include <string.h>

#define MAX_SLOTS 65536u

int frame_cache_init(frame_cache *c, long long budget, u32 slotBytes, size_t align){
  long long n = slotBytes ? budget / slotBytes : 0;
  void *p = 0;
  frame_cache_free(c);
  if( n<=0 ) return 0;
  if( n>MAX_SLOTS ) n = MAX_SLOTS;
  c->aFrame = calloc((size_t)n, sizeof(u32));
  if( !c->aFrame || posix_memalign(&p, align, (size_t)n * slotBytes) ){
    frame_cache_free(c);
    return -1;
  }
  c->aData = p;
  c->nSlot = (u32)n;
  c->slotBytes = slotBytes;
  return 0;
}

void frame_cache_free(frame_cache *c){
  free(c->aFrame);
  free(c->aData);
  memset(c, 0, sizeof(*c));
}

void frame_cache_clear(frame_cache *c){
  if( c->nSlot ) memset(c->aFrame, 0, c->nSlot * sizeof(u32));
}

const u8 *frame_cache_get(const frame_cache *c, u32 frame){
  u32 i;
  if( c->nSlot==0 || frame==0 ) return 0;
  i = (frame - 1) % c->nSlot;
  return c->aFrame[i]==frame ? c->aData + (size_t)i * c->slotBytes : 0;
}

void frame_cache_put(frame_cache *c, u32 frame, const u8 *img){
  u32 i;
  if( c->nSlot==0 || frame==0 ) return;
  i = (frame - 1) % c->nSlot;
  memcpy(c->aData + (size_t)i * c->slotBytes, img, c->slotBytes);
  c->aFrame[i] = frame;
}

void frame_cache_forget(frame_cache *c, u32 frame){
  u32 i;
  if( c->nSlot==0 || frame==0 ) return;
  i = (frame - 1) % c->nSlot;
  if( c->aFrame[i]==frame ) c->aFrame[i] = 0;
}
