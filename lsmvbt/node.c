/*
** node.c — cells of one node in memory, and their encoding in a page slot
** (format and invariants N1-N2 in node.h).
*/
#include "internal.h"

#include <stdlib.h>
#include <string.h>

lsm_node *lsm_node_new(uint32_t pgno, int level){
  lsm_node *n = calloc(1, sizeof(*n));
  if( n ){
    n->pgno = pgno;
    n->level = (uint8_t)level;
  }
  return n;
}

void lsm_node_free(lsm_node *n){
  int i;
  if( n==0 ) return;
  for(i=0; i<n->ncell; i++) free(n->cell[i].val);
  free(n->cell);
  free(n);
}

int lsm_node_lower(const lsm_node *n, int64_t key){
  int lo = 0, hi = n->ncell;
  while( lo<hi ){
    int mid = lo + (hi-lo)/2;
    if( n->cell[mid].key<key ) lo = mid+1; else hi = mid;
  }
  return lo;
}

int lsm_node_find(const lsm_node *n, int64_t key, uint64_t start){
  int i;
  for(i=lsm_node_lower(n, key); i<n->ncell && n->cell[i].key==key; i++){
    if( n->cell[i].start==start ) return i;
  }
  return -1;
}

int lsm_node_insert(lsm_node *n, const lsm_cell *c){
  int i;
  lsm_cell nc = *c;
  if( n->ncell==n->nalloc ){
    int na = n->nalloc ? n->nalloc*2 : 16;
    lsm_cell *a = realloc(n->cell, sizeof(lsm_cell)*(size_t)na);
    if( a==0 ) return -1;
    n->cell = a;
    n->nalloc = na;
  }
  nc.val = 0;
  if( n->level==0 && c->len>0 ){
    nc.val = malloc(c->len);
    if( nc.val==0 ) return -1;
    memcpy(nc.val, c->val, c->len);
  }
  if( n->level!=0 ) nc.len = 0;
  i = lsm_node_lower(n, c->key);
  while( i<n->ncell && n->cell[i].key==c->key && n->cell[i].start<c->start ) i++;
  memmove(&n->cell[i+1], &n->cell[i], sizeof(lsm_cell)*(size_t)(n->ncell-i));
  n->cell[i] = nc;
  n->ncell++;
  n->used += lsm_cell_size(n->level, &nc);
  return i;
}

void lsm_node_remove(lsm_node *n, int idx){
  n->used -= lsm_cell_size(n->level, &n->cell[idx]);
  free(n->cell[idx].val);
  memmove(&n->cell[idx], &n->cell[idx+1], sizeof(lsm_cell)*(size_t)(n->ncell-idx-1));
  n->ncell--;
}

void lsm_hdr_encode(uint8_t *b, const lsm_page_hdr *h){
  lsm_put32(b, LSM_MAGIC);
  b[4] = h->type;
  b[5] = h->level;
  b[6] = (uint8_t)h->ncell; b[7] = (uint8_t)(h->ncell>>8);
  lsm_put32(b+8, h->pgno);
  lsm_put32(b+12, h->npages);
  lsm_put64(b+16, h->version);
  lsm_put32(b+24, h->root);
  lsm_put32(b+28, h->prev_root);
  lsm_put64(b+32, 0);
  lsm_put32(b+40, h->page_size);
  lsm_put32(b+44, h->slot);
}

void lsm_hdr_decode(const uint8_t *b, lsm_page_hdr *h){
  h->type = b[4];
  h->level = b[5];
  h->ncell = (uint16_t)(b[6] | b[7]<<8);
  h->pgno = lsm_get32(b+8);
  h->npages = lsm_get32(b+12);
  h->version = lsm_get64(b+16);
  h->root = lsm_get32(b+24);
  h->prev_root = lsm_get32(b+28);
  h->page_size = lsm_get32(b+40);
  h->slot = lsm_get32(b+44);
}

/* 64-bit checksum over 8-byte words, the checksum field (bytes 32..39) read
** as zero. Chained multiply-xorshift: a slot torn at any sector boundary
** (old sectors mixed with new) fails it with probability ~1 - 2^-64. */
static uint64_t page_checksum(const uint8_t *b, uint32_t n){
  uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
  uint32_t i;
  for(i=0; i<n; i+=8){
    uint64_t w = (i==32) ? 0 : lsm_get64(b+i);
    h ^= w;
    h *= 0xff51afd7ed558ccdull;
    h ^= h>>32;
  }
  h ^= h>>33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h>>33;
  return h;
}

void lsm_page_seal(uint8_t *b, uint32_t ps){
  lsm_put64(b+32, page_checksum(b, ps));
}

int lsm_page_valid(const uint8_t *b, uint32_t ps){
  return lsm_get32(b)==LSM_MAGIC && lsm_get64(b+32)==page_checksum(b, ps);
}

int lsm_page_is_zero(const uint8_t *b, uint32_t ps){
  uint32_t i;
  for(i=0; i<ps; i+=8) if( lsm_get64(b+i) ) return 0;
  return 1;
}

void lsm_node_encode(const lsm_node *n, uint8_t *buf, uint32_t ps,
                     const lsm_page_hdr *h){
  lsm_page_hdr hh = *h;
  uint8_t *p = buf + LSM_HDR_SIZE;
  int i;
  hh.type = n->level ? LSM_PAGE_INTERNAL : LSM_PAGE_LEAF;
  hh.level = n->level;
  hh.ncell = (uint16_t)n->ncell;
  hh.pgno = n->pgno;
  for(i=0; i<n->ncell; i++){
    const lsm_cell *c = &n->cell[i];
    lsm_put64(p, (uint64_t)c->key);
    lsm_put64(p+8, c->start);
    lsm_put64(p+16, c->end);
    if( n->level ){
      lsm_put32(p+24, c->child);
      p += LSM_CELL_FIXED;
    }else{
      lsm_put32(p+24, c->len);
      if( c->len ) memcpy(p+LSM_CELL_FIXED, c->val, c->len);
      p += LSM_CELL_FIXED + c->len;
    }
  }
  memset(p, 0, (size_t)(buf + ps - p));
  lsm_hdr_encode(buf, &hh);
  lsm_page_seal(buf, ps);
}

int lsm_node_decode(lsm_node *n, const uint8_t *buf, uint32_t ps){
  lsm_page_hdr h;
  const uint8_t *p = buf + LSM_HDR_SIZE, *end = buf + ps;
  int i;
  lsm_hdr_decode(buf, &h);
  if( (h.type==LSM_PAGE_LEAF)!=(h.level==0) ) return LSMVBT_CORRUPT;
  if( h.type!=LSM_PAGE_LEAF && h.type!=LSM_PAGE_INTERNAL ) return LSMVBT_CORRUPT;
  n->level = h.level;
  n->cell = calloc(h.ncell ? h.ncell : 1, sizeof(lsm_cell));
  if( n->cell==0 ) return LSMVBT_NOMEM;
  n->nalloc = h.ncell ? h.ncell : 1;
  for(i=0; i<h.ncell; i++){
    lsm_cell *c = &n->cell[i];
    if( end - p < LSM_CELL_FIXED ) return LSMVBT_CORRUPT;
    c->key = (int64_t)lsm_get64(p);
    c->start = lsm_get64(p+8);
    c->end = lsm_get64(p+16);
    if( n->level ){
      c->child = lsm_get32(p+24);
      p += LSM_CELL_FIXED;
    }else{
      c->len = lsm_get32(p+24);
      p += LSM_CELL_FIXED;
      if( (uint64_t)(end - p) < c->len ) return LSMVBT_CORRUPT;
      if( c->len ){
        c->val = malloc(c->len);
        if( c->val==0 ) return LSMVBT_NOMEM;
        memcpy(c->val, p, c->len);
        p += c->len;
      }
    }
    n->ncell = i+1;
    n->used += lsm_cell_size(n->level, c);
    if( c->start>=c->end ) return LSMVBT_CORRUPT;
    if( i>0 ){
      const lsm_cell *b = &n->cell[i-1];
      if( b->key>c->key || (b->key==c->key && b->start>=c->start) ) return LSMVBT_CORRUPT;
    }
  }
  return LSMVBT_OK;
}
