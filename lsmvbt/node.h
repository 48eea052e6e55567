/*
** node.h — the on-disk page format and the in-memory node (DESIGN.md §2).
**
** The file is an array of page *pairs*: logical page p lives in two slots,
** at byte offsets (2p)*PS and (2p+1)*PS. Every slot, whatever it holds,
** starts with this 48-byte header (little-endian):
**
**    0  u32 magic      LSM_MAGIC
**    4  u8  type       1 superblock (page 0), 2 leaf, 3 internal
**    5  u8  level      0 for leaves, height above the leaves otherwise
**    6  u16 ncell
**    8  u32 pgno       logical page number (a misplaced write is detected)
**   12  u32 npages     slots written by the commit of `version` (this one incl.)
**   16  u64 version    the commit that wrote this slot
**   24  u32 root       root page of the tree at `version`
**   28  u32 prev_root  root page of the tree at `version`-1
**   32  u64 checksum   of the whole slot, this field read as zero
**   40  u32 page_size
**   44  u32 slot       0 or 1
**
** followed by the cells, packed, sorted by (key, start):
**    leaf      i64 key, u64 start, u64 end, u32 len, len bytes of value
**    internal  i64 key (upper bound of the child's keys), u64 start,
**              u64 end, u32 child
** A cell is alive at version v iff start <= v < end; end = LSM_INF means not
** deleted. An all-zero slot is empty (never written, or wiped by recovery).
**
** Invariants of a node (checked by lsm_node_decode and lsmvbt_check):
**   N1  cells sorted by (key, start); no two cells share (key, start).
**   N2  the serialized body fits the page: `used` <= page_size - 48.
**   N3  a leaf holds at most one cell per key alive at any one version,
**       among the keys of the range through which it is reached.
*/
#ifndef LSMVBT_NODE_H
#define LSMVBT_NODE_H

#include <stdint.h>

#define LSM_MAGIC        0x5456424du   /* "MBVT" */
#define LSM_HDR_SIZE     48
#define LSM_CELL_FIXED   28            /* key + start + end + (len | child) */
#define LSM_INF          UINT64_MAX
#define LSM_PAGE_SUPER   1
#define LSM_PAGE_LEAF    2
#define LSM_PAGE_INTERNAL 3
#define LSM_NO_SLOT      0xff
#define LSM_FORMAT_TAG   "LS-MVBT format1"   /* 16 bytes with the NUL */

typedef struct lsm_page_hdr {
  uint8_t type, level;
  uint16_t ncell;
  uint32_t pgno, npages;
  uint64_t version;
  uint32_t root, prev_root;
  uint32_t page_size, slot;
} lsm_page_hdr;

typedef struct lsm_cell {
  int64_t key;
  uint64_t start, end;
  uint32_t child;        /* internal nodes */
  uint32_t len;          /* leaves: value length */
  uint8_t *val;          /* leaves: the value, owned by the node */
} lsm_cell;

typedef struct lsm_node lsm_node;
struct lsm_node {
  uint32_t pgno;
  uint8_t level;
  uint8_t dirty;         /* modified in the open transaction */
  uint8_t fresh;         /* allocated in the open transaction */
  int ncell, nalloc;
  lsm_cell *cell;
  uint32_t used;         /* serialized body size */
  lsm_node *hnext;       /* pager hash chain */
  lsm_node *prev, *next; /* pager LRU list (clean) or dirty list */
};

static inline int lsm_alive(const lsm_cell *c, uint64_t v){
  return c->start<=v && v<c->end;
}
static inline uint32_t lsm_cell_size(int level, const lsm_cell *c){
  return LSM_CELL_FIXED + (level==0 ? c->len : 0);
}

lsm_node *lsm_node_new(uint32_t pgno, int level);
void lsm_node_free(lsm_node *n);
int lsm_node_lower(const lsm_node *n, int64_t key);         /* first cell with key >= key */
int lsm_node_find(const lsm_node *n, int64_t key, uint64_t start);  /* index or -1 */
/* Insert a copy of c (its value is copied) at its sorted place; returns the
** index, or -1 when out of memory. */
int lsm_node_insert(lsm_node *n, const lsm_cell *c);
void lsm_node_remove(lsm_node *n, int idx);

/* Little-endian helpers. */
static inline void lsm_put32(uint8_t *p, uint32_t v){
  p[0]=(uint8_t)v; p[1]=(uint8_t)(v>>8); p[2]=(uint8_t)(v>>16); p[3]=(uint8_t)(v>>24);
}
static inline uint32_t lsm_get32(const uint8_t *p){
  return (uint32_t)p[0] | (uint32_t)p[1]<<8 | (uint32_t)p[2]<<16 | (uint32_t)p[3]<<24;
}
static inline void lsm_put64(uint8_t *p, uint64_t v){
  lsm_put32(p, (uint32_t)v); lsm_put32(p+4, (uint32_t)(v>>32));
}
static inline uint64_t lsm_get64(const uint8_t *p){
  return (uint64_t)lsm_get32(p) | (uint64_t)lsm_get32(p+4)<<32;
}

void lsm_hdr_encode(uint8_t *buf, const lsm_page_hdr *h);
void lsm_hdr_decode(const uint8_t *buf, lsm_page_hdr *h);
/* Store the checksum of a filled slot / check it (and the magic). */
void lsm_page_seal(uint8_t *buf, uint32_t page_size);
int lsm_page_valid(const uint8_t *buf, uint32_t page_size);
int lsm_page_is_zero(const uint8_t *buf, uint32_t page_size);

/* Serialize n with header h (type/level/ncell are taken from n) and seal. */
void lsm_node_encode(const lsm_node *n, uint8_t *buf, uint32_t page_size,
                     const lsm_page_hdr *h);
/* Parse the cells of a valid slot into n (empty). LSMVBT_CORRUPT if the
** body breaks N1/N2. */
int lsm_node_decode(lsm_node *n, const uint8_t *buf, uint32_t page_size);

#endif
