/*
** tree.c — search, insert, delete, split (lazy / legacy / copy / version),
** sibling redistribution, garbage collection and reachability of the
** multi-version B+-tree (invariants T1-T4 in tree.h, N1-N3 in node.h).
**
** Every write runs at version t->w and goes through apply(): "in node X,
** end these cells and add those". apply() rewrites X in place when the
** result fits, and otherwise redistributes (if enabled) or splits; a split
** turns into an apply() on the parent that ends X's routing cell and adds
** the new ones (T2), and so on up to the root.
*/
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define OPT(t) (&(t)->db->opt)
#define PGR(t) (&(t)->db->pager)
#define STATS(t) ((t)->db->stats)

typedef struct lsm_ref { int64_t key; uint64_t start; } lsm_ref;

typedef struct lsm_pathel {
  lsm_node *node;
  lsm_range r;           /* the node's key range at the version descended with */
  int64_t ekey;          /* the parent's routing cell that led here */
  uint64_t estart;
} lsm_pathel;

typedef struct lsm_path { int n; lsm_pathel el[LSM_MAX_DEPTH]; } lsm_path;

/* A cell of a node's logical content during a split; `old` if it comes from
** the node (its value still points into the node), else it is being added. */
typedef struct lsm_lcell { lsm_cell c; int old; } lsm_lcell;

static int in_range(const lsm_range *r, int64_t k){
  return (!r->has_lo || k>r->lo) && k<=r->hi;
}

/* ---- Root history --------------------------------------------------------- */

int lsm_tree_init(lsm_tree *t, lsmvbt_db *db, uint32_t root, uint64_t since){
  uint32_t reserve;
  memset(t, 0, sizeof(*t));
  t->db = db;
  t->body = db->pager.ps - LSM_HDR_SIZE;
  reserve = db->opt.reserve_bytes<0 ? db->pager.ps/16 : (uint32_t)db->opt.reserve_bytes;
  if( reserve > t->body/2 ) reserve = t->body/2;
  t->limit = t->body - reserve;
  t->roots = malloc(sizeof(lsm_root)*8);
  if( t->roots==0 ) return LSMVBT_NOMEM;
  t->nroot_alloc = 8;
  t->nroot = 1;
  t->roots[0].since = since;
  t->roots[0].pgno = root;
  return LSMVBT_OK;
}

void lsm_tree_close(lsm_tree *t){
  free(t->roots);
  memset(t, 0, sizeof(*t));
}

static lsm_root root_entry(const lsm_tree *t, uint64_t v){
  int i;
  for(i=t->nroot-1; i>0; i--) if( t->roots[i].since<=v ) break;
  return t->roots[i];
}

uint32_t lsm_tree_root(const lsm_tree *t, uint64_t v){
  return root_entry(t, v).pgno;
}

static int set_root(lsm_tree *t, uint64_t w, uint32_t pgno){
  if( t->roots[t->nroot-1].since==w ){
    t->roots[t->nroot-1].pgno = pgno;
    return LSMVBT_OK;
  }
  if( t->nroot==t->nroot_alloc ){
    lsm_root *a = realloc(t->roots, sizeof(lsm_root)*(size_t)t->nroot_alloc*2);
    if( a==0 ) return LSMVBT_NOMEM;
    t->roots = a;
    t->nroot_alloc *= 2;
  }
  t->roots[t->nroot].since = w;
  t->roots[t->nroot].pgno = pgno;
  t->nroot++;
  return LSMVBT_OK;
}

void lsm_tree_forget(lsm_tree *t, uint64_t w){
  while( t->nroot>1 && t->roots[t->nroot-1].since>=w ) t->nroot--;
}

/* Keep the root of the horizon and the later ones. */
static void prune_roots(lsm_tree *t){
  int i;
  for(i=t->nroot-1; i>0; i--) if( t->roots[i].since<=t->horizon ) break;
  if( i>0 ){
    memmove(t->roots, t->roots+i, sizeof(lsm_root)*(size_t)(t->nroot-i));
    t->nroot -= i;
  }
}

/* ---- Descent ---------------------------------------------------------------- */

/* The routing cell of internal node n for key at version v, among the cells
** inside n's range r (T1, T3); *child gets the child's range. -1: none. */
static int route(const lsm_node *n, const lsm_range *r, int64_t key, uint64_t v,
                 lsm_range *child){
  int i, j;
  for(i=lsm_node_lower(n, key); i<n->ncell; i++){
    const lsm_cell *c = &n->cell[i];
    if( lsm_alive(c, v) && in_range(r, c->key) ) break;
  }
  if( i>=n->ncell ) return -1;
  for(j=i-1; j>=0; j--){
    const lsm_cell *c = &n->cell[j];
    if( c->key<n->cell[i].key && lsm_alive(c, v) && in_range(r, c->key) ) break;
  }
  child->hi = n->cell[i].key;
  child->since = n->cell[i].start;
  if( j>=0 ){
    child->has_lo = 1;
    child->lo = n->cell[j].key;
  }else{
    child->has_lo = r->has_lo;
    child->lo = r->lo;
  }
  return i;
}

static int descend(lsm_tree *t, uint64_t v, int64_t key, lsm_path *path){
  lsm_root re = root_entry(t, v);
  lsm_range r;
  uint32_t pg = re.pgno;
  int n = 0, expect = -1;
  r.lo = 0; r.has_lo = 0; r.hi = INT64_MAX; r.since = re.since;
  path->el[0].ekey = 0;
  path->el[0].estart = 0;
  for(;;){
    lsm_node *nd;
    lsm_range cr;
    int i, rc;
    if( n>=LSM_MAX_DEPTH ) return lsm_err(t->db, LSMVBT_CORRUPT, "tree deeper than %d", LSM_MAX_DEPTH);
    rc = lsm_pager_get(PGR(t), pg, &nd);
    if( rc ) return rc;
    if( expect>=0 && nd->level!=expect ){
      return lsm_err(t->db, LSMVBT_CORRUPT, "page %u has level %d, expected %d", pg, nd->level, expect);
    }
    path->el[n].node = nd;
    path->el[n].r = r;
    if( nd->level==0 ){
      path->n = n+1;
      return LSMVBT_OK;
    }
    i = route(nd, &r, key, v, &cr);
    if( i<0 ){
      return lsm_err(t->db, LSMVBT_CORRUPT, "page %u routes no child for key %lld at version %llu",
                     pg, (long long)key, (unsigned long long)v);
    }
    path->el[n+1].ekey = nd->cell[i].key;
    path->el[n+1].estart = nd->cell[i].start;
    pg = nd->cell[i].child;
    expect = nd->level - 1;
    r = cr;
    n++;
  }
}

static int leaf_find(const lsm_node *n, int64_t key, uint64_t v){
  int i;
  for(i=lsm_node_lower(n, key); i<n->ncell && n->cell[i].key==key; i++){
    if( lsm_alive(&n->cell[i], v) ) return i;
  }
  return -1;
}

/* ---- Reads -------------------------------------------------------------------- */

int lsm_tree_get(lsm_tree *t, uint64_t v, int64_t key, const lsm_cell **pc){
  lsm_path path;
  lsm_node *leaf;
  int i, rc = descend(t, v, key, &path);
  *pc = 0;
  if( rc ) return rc;
  leaf = path.el[path.n-1].node;
  i = leaf_find(leaf, key, v);
  if( i>=0 ) *pc = &leaf->cell[i];
  return LSMVBT_OK;
}

int lsm_tree_leaf_scan(lsm_tree *t, uint64_t v, int64_t key, int64_t *pHi,
                       int (*xCell)(void*, const lsm_cell*), void *ctx){
  lsm_path path;
  lsm_node *leaf;
  const lsm_range *r;
  int i, rc = descend(t, v, key, &path);
  if( rc ) return rc;
  leaf = path.el[path.n-1].node;
  r = &path.el[path.n-1].r;
  *pHi = r->hi;
  for(i=lsm_node_lower(leaf, key); i<leaf->ncell; i++){
    const lsm_cell *c = &leaf->cell[i];
    if( lsm_alive(c, v) && in_range(r, c->key) ){
      rc = xCell(ctx, c);
      if( rc ) return rc;
    }
  }
  return LSMVBT_OK;
}

static int max_key(lsm_tree *t, uint32_t pg, const lsm_range *r, uint64_t v, int depth,
                   int64_t *pKey, int *pFound){
  lsm_node *n;
  int i, rc;
  if( depth>=LSM_MAX_DEPTH ) return lsm_err(t->db, LSMVBT_CORRUPT, "tree too deep");
  rc = lsm_pager_get(PGR(t), pg, &n);
  if( rc ) return rc;
  for(i=n->ncell-1; i>=0; i--){
    const lsm_cell *c = &n->cell[i];
    lsm_range cr;
    if( !lsm_alive(c, v) || !in_range(r, c->key) ) continue;
    if( n->level==0 ){
      *pKey = c->key;
      *pFound = 1;
      return LSMVBT_OK;
    }
    if( route(n, r, c->key, v, &cr)!=i ) return lsm_err(t->db, LSMVBT_CORRUPT, "page %u: duplicate bounds", pg);
    rc = max_key(t, c->child, &cr, v, depth+1, pKey, pFound);
    if( rc || *pFound ) return rc;
    /* n is still cached: nothing is evicted during an engine call. */
  }
  return LSMVBT_OK;
}

int lsm_tree_last_key(lsm_tree *t, uint64_t v, int64_t *pKey, int *pFound){
  lsm_root re = root_entry(t, v);
  lsm_range r;
  r.lo = 0; r.has_lo = 0; r.hi = INT64_MAX; r.since = re.since;
  *pFound = 0;
  return max_key(t, re.pgno, &r, v, 0, pKey, pFound);
}

/* ---- Node mutation ---------------------------------------------------------- */

/* What touch() would do to n, without doing it: the bytes it would free and
** whether dead cells that cannot be collected yet would remain (which makes
** n a "lazy" node, allowed to use the reserved space). */
static void touch_plan(const lsm_tree *t, const lsm_node *n, const lsm_range *r, int gc,
                       uint32_t *pGain, int *pGarbage){
  uint32_t gain = 0;
  int garbage = 0, i;
  for(i=0; i<n->ncell; i++){
    const lsm_cell *c = &n->cell[i];
    uint64_t end = c->end;
    if( end==LSM_INF && !in_range(r, c->key) ) end = r->since;
    if( c->start>=end || (gc && end<=t->horizon) ) gain += lsm_cell_size(n->level, c);
    else if( end!=LSM_INF ) garbage = 1;
  }
  *pGain = gain;
  *pGarbage = garbage;
}

/* Make n part of the commit, materialize the cells that left its range
** (end = since, T3), drop cells nobody can see, and if gc, the garbage. */
static void touch(lsm_tree *t, lsm_node *n, const lsm_range *r, int gc){
  int i = 0;
  lsm_pager_dirty(PGR(t), n);
  while( i<n->ncell ){
    lsm_cell *c = &n->cell[i];
    if( c->end==LSM_INF && !in_range(r, c->key) ) c->end = r->since;
    if( c->start>=c->end || (gc && c->end<=t->horizon) ){
      if( c->start<c->end ) STATS(t).gc_cells++;
      if( n->level ) t->dropped++;
      lsm_node_remove(n, i);
    }else{
      i++;
    }
  }
}

/* End cell (key,start) of a touched node at version w; a cell created by w
** itself was never visible to anyone else and simply goes. */
static int end_cell(lsm_tree *t, lsm_node *n, int64_t key, uint64_t start){
  int i = lsm_node_find(n, key, start);
  if( i<0 ){
    return lsm_err(t->db, LSMVBT_CORRUPT, "page %u lacks cell (%lld, %llu)", n->pgno,
                   (long long)key, (unsigned long long)start);
  }
  if( n->cell[i].start>=t->w ){
    if( n->level ) t->dropped++;
    lsm_node_remove(n, i);
  }else{
    n->cell[i].end = t->w;
  }
  return LSMVBT_OK;
}

static uint64_t cells_size(int level, const lsm_cell *a, int n){
  uint64_t s = 0;
  int i;
  for(i=0; i<n; i++) s += lsm_cell_size(level, &a[i]);
  return s;
}

static int cmp_lcell(const void *a, const void *b){
  const lsm_lcell *x = a, *y = b;
  return x->c.key<y->c.key ? -1 : x->c.key>y->c.key;
}

/* n's content at w after the pending change: cells alive at w inside r, minus
** ends, plus adds; sorted by key (keys are distinct, N3/T1). */
static int live_set(lsm_tree *t, const lsm_node *n, const lsm_range *r,
                    const lsm_ref *ends, int nend, const lsm_cell *adds, int nadd,
                    lsm_lcell **pL, int *pn){
  lsm_lcell *L = malloc(sizeof(lsm_lcell)*(size_t)(n->ncell + nadd + 1));
  int i, j, k = 0;
  if( L==0 ) return LSMVBT_NOMEM;
  for(i=0; i<n->ncell; i++){
    const lsm_cell *c = &n->cell[i];
    int ended = 0;
    if( !lsm_alive(c, t->w) || !in_range(r, c->key) ) continue;
    for(j=0; j<nend; j++) if( ends[j].key==c->key && ends[j].start==c->start ) ended = 1;
    if( ended ) continue;
    L[k].c = *c;
    L[k++].old = 1;
  }
  for(i=0; i<nadd; i++){
    L[k].c = adds[i];
    L[k++].old = 0;
  }
  qsort(L, (size_t)k, sizeof(lsm_lcell), cmp_lcell);
  *pL = L;
  *pn = k;
  return LSMVBT_OK;
}

/* A new node holding copies of L[0..n) as cells born at w. */
static int copy_node(lsm_tree *t, int level, const lsm_lcell *L, int n, lsm_node **pp){
  lsm_node *x;
  int i, rc = lsm_pager_new(PGR(t), level, &x);
  if( rc ) return rc;
  for(i=0; i<n; i++){
    lsm_cell c = L[i].c;
    c.start = t->w;
    c.end = LSM_INF;
    if( lsm_node_insert(x, &c)<0 ) return LSMVBT_NOMEM;
  }
  if( x->used > t->body ){
    return lsm_err(t->db, LSMVBT_CORRUPT, "internal error: split produced %u bytes", x->used);
  }
  *pp = x;
  return LSMVBT_OK;
}

/* The legacy MVBT split rewrites the old node: every live cell ends at w. */
static void kill_node(lsm_tree *t, lsm_node *x, const lsm_range *r){
  int i = 0;
  touch(t, x, r, OPT(t)->lazy_gc);
  while( i<x->ncell ){
    lsm_cell *c = &x->cell[i];
    if( lsm_alive(c, t->w) && in_range(r, c->key) ){
      if( c->start>=t->w ){
        if( x->level ) t->dropped++;
        lsm_node_remove(x, i);
        continue;
      }
      c->end = t->w;
    }
    i++;
  }
}

static int apply(lsm_tree *t, lsm_path *path, int lvl, const lsm_ref *ends, int nend,
                 const lsm_cell *adds, int nadd);

/* The node at path->el[lvl] is replaced, from w on, by the routing cells
** news[] (T2): end its parent cell and add them, or make a new root. */
static int replace(lsm_tree *t, lsm_path *path, int lvl, lsm_cell *news, int nnew){
  lsm_ref e;
  if( lvl==0 ){
    uint32_t newroot;
    if( nnew==1 ){
      newroot = news[0].child;
    }else{
      lsm_node *root;
      int i, rc = lsm_pager_new(PGR(t), path->el[0].node->level + 1, &root);
      if( rc ) return rc;
      for(i=0; i<nnew; i++) if( lsm_node_insert(root, &news[i])<0 ) return LSMVBT_NOMEM;
      newroot = root->pgno;
      STATS(t).root_splits++;
    }
    return set_root(t, t->w, newroot);
  }
  e.key = path->el[lvl].ekey;
  e.start = path->el[lvl].estart;
  return apply(t, path, lvl-1, &e, 1, news, nnew);
}

static lsm_cell route_cell(int64_t bound, uint64_t w, uint32_t child){
  lsm_cell c;
  memset(&c, 0, sizeof(c));
  c.key = bound;
  c.start = w;
  c.end = LSM_INF;
  c.child = child;
  return c;
}

/* Split the node at path->el[lvl], which cannot take the pending change. */
static int split(lsm_tree *t, lsm_path *path, int lvl, const lsm_ref *ends, int nend,
                 const lsm_cell *adds, int nadd){
  lsm_node *x = path->el[lvl].node, *q = 0, *left = 0;
  lsm_range r = path->el[lvl].r;
  lsm_lcell *L = 0;
  lsm_cell news[2];
  uint64_t total = 0, oldsz = 0, w = t->w;
  int64_t maxold = INT64_MIN, m;
  int nl, nold = 0, i, at, append, rc, gc = OPT(t)->lazy_gc;

  rc = live_set(t, x, &r, ends, nend, adds, nadd, &L, &nl);
  if( rc ) return rc;
  for(i=0; i<nl; i++){
    uint32_t sz = lsm_cell_size(x->level, &L[i].c);
    total += sz;
    if( L[i].old ){ nold++; oldsz += sz; maxold = L[i].c.key; }
  }

  if( total <= t->limit/2 || nl<2 ){
    /* Version split: the live cells fill half a node or less (the rest is
    ** garbage that cannot be collected yet): copy them into one new node. */
    rc = copy_node(t, x->level, L, nl, &left);
    if( rc==LSMVBT_OK && !OPT(t)->lazy_split ) kill_node(t, x, &r);
    free(L);
    if( rc ) return rc;
    STATS(t).version_splits++;
    news[0] = route_cell(r.hi, w, left->pgno);
    return replace(t, path, lvl, news, 1);
  }

  /* Key split at m. Appending past the largest key (the common case of
  ** ascending inserts) leaves the old cells where they are and starts a new
  ** node with the new ones; otherwise split the bytes in half. */
  append = nold>0 && oldsz<=t->limit;
  for(i=0; i<nadd; i++) if( adds[i].key<=maxold ) append = 0;
  if( append ){
    at = nold;
  }else{
    uint64_t acc = 0;
    for(i=0; i<nl; i++){
      acc += lsm_cell_size(x->level, &L[i].c);
      if( acc*2>=total ) break;
    }
    at = i+1;
    if( at>=nl ) at = nl-1;
    if( at<1 ) at = 1;
  }
  m = L[at-1].c.key;

  /* Copies first: the values of L's old cells point into x. */
  rc = copy_node(t, x->level, L+at, nl-at, &q);
  if( rc ){ free(L); return rc; }

  if( OPT(t)->lazy_split ){
    int touch_x = 0;
    for(i=0; i<nadd; i++) if( adds[i].key<=m ) touch_x = 1;
    for(i=0; i<nend; i++) if( ends[i].key<=m ) touch_x = 1;
    if( !touch_x ){
      /* The lazy split proper: x is not written at all. */
      left = x;
    }else{
      lsm_range r2 = r;
      uint32_t gain;
      int garbage;
      uint64_t after;
      r2.hi = m;
      r2.since = w;
      touch_plan(t, x, &r2, gc, &gain, &garbage);
      after = x->used - gain;
      for(i=0; i<nadd; i++) if( adds[i].key<=m ) after += lsm_cell_size(x->level, &adds[i]);
      for(i=0; i<nend; i++){
        int k;
        if( ends[i].key>m ) continue;
        k = lsm_node_find(x, ends[i].key, ends[i].start);
        if( k<0 ){ free(L); return lsm_err(t->db, LSMVBT_CORRUPT, "page %u lost a cell", x->pgno); }
        if( x->cell[k].start>=w ) after -= lsm_cell_size(x->level, &x->cell[k]);
        else garbage = 1;
      }
      if( after <= (garbage ? t->body : t->limit) ){
        /* The lower half stays in x, which now holds the moved cells as
        ** garbage: the reserved space takes the overflow if needed. */
        touch(t, x, &r2, gc);
        for(i=0; i<nend && rc==LSMVBT_OK; i++){
          if( ends[i].key<=m ) rc = end_cell(t, x, ends[i].key, ends[i].start);
        }
        for(i=0; i<nadd && rc==LSMVBT_OK; i++){
          if( adds[i].key<=m && lsm_node_insert(x, &adds[i])<0 ) rc = LSMVBT_NOMEM;
        }
        if( after > t->limit ) STATS(t).reserve_uses++;
        path->el[lvl].r = r2;
        left = x;
      }else{
        /* x is full of cells it cannot drop yet: copy the lower half too. */
        rc = copy_node(t, x->level, L, at, &left);
        STATS(t).splits_copy++;
      }
    }
    STATS(t).splits_lazy++;
  }else{
    rc = copy_node(t, x->level, L, at, &left);
    if( rc==LSMVBT_OK ) kill_node(t, x, &r);
    STATS(t).splits_legacy++;
  }
  free(L);
  if( rc ) return rc;
  news[0] = route_cell(m, w, left->pgno);
  news[1] = route_cell(r.hi, w, q->pgno);
  return replace(t, path, lvl, news, 2);
}

/* Sibling redistribution (enabled only when the optimization is off): move
** the cells of full leaf x from its first up to the new cell into the left
** sibling, or from the new cell on into the right sibling, if that sibling
** has room. x, the sibling and the parent are written (the parent's two
** routing cells are replaced: T2). LSMVBT_NOTFOUND: no sibling can help. */
static int redistribute(lsm_tree *t, lsm_path *path, int lvl, const lsm_ref *ends, int nend,
                        const lsm_cell *add){
  lsm_node *x = path->el[lvl].node, *p = path->el[lvl-1].node, *s;
  lsm_range r = path->el[lvl].r, rp = path->el[lvl-1].r, rs;
  lsm_lcell *L;
  lsm_ref pends[2];
  lsm_cell pnews[2];
  uint64_t w = t->w;
  uint64_t after;
  uint32_t gain;
  int ie, il, ir, j, nl, pos, i, lo_i, hi_i, garbage, rc, gc = OPT(t)->lazy_gc;

  ie = lsm_node_find(p, path->el[lvl].ekey, path->el[lvl].estart);
  if( ie<0 ) return lsm_err(t->db, LSMVBT_CORRUPT, "page %u lost a routing cell", p->pgno);
  for(il=ie-1; il>=0; il--) if( lsm_alive(&p->cell[il], w) && in_range(&rp, p->cell[il].key) ) break;
  for(ir=ie+1; ir<p->ncell; ir++) if( lsm_alive(&p->cell[ir], w) && in_range(&rp, p->cell[ir].key) ) break;
  rc = live_set(t, x, &r, ends, nend, add, 1, &L, &nl);
  if( rc ) return rc;
  for(pos=0; pos<nl && L[pos].old; pos++);

  for(j=0; j<2; j++){
    int left = (j==0);
    if( left ){
      int k;
      if( il<0 || pos>=nl-1 ) continue;          /* x must keep a cell */
      for(k=il-1; k>=0; k--) if( lsm_alive(&p->cell[k], w) && in_range(&rp, p->cell[k].key) ) break;
      rs.hi = p->cell[il].key;
      rs.since = p->cell[il].start;
      rs.has_lo = k>=0 ? 1 : rp.has_lo;
      rs.lo = k>=0 ? p->cell[k].key : rp.lo;
      lo_i = 0; hi_i = pos+1;
      rc = lsm_pager_get(PGR(t), p->cell[il].child, &s);
    }else{
      if( ir>=p->ncell || pos==0 ) continue;
      rs.hi = p->cell[ir].key;
      rs.since = p->cell[ir].start;
      rs.has_lo = 1;
      rs.lo = p->cell[ie].key;
      lo_i = pos; hi_i = nl;
      rc = lsm_pager_get(PGR(t), p->cell[ir].child, &s);
    }
    if( rc ) break;
    if( s->level!=x->level ){ rc = lsm_err(t->db, LSMVBT_CORRUPT, "sibling level"); break; }
    touch_plan(t, s, &rs, gc, &gain, &garbage);
    after = s->used - gain;
    for(i=lo_i; i<hi_i; i++) after += lsm_cell_size(x->level, &L[i].c);
    if( after > t->limit ) continue;

    if( left ){
      pends[0].key = p->cell[il].key; pends[0].start = p->cell[il].start;
      pends[1].key = p->cell[ie].key; pends[1].start = p->cell[ie].start;
      pnews[0] = route_cell(L[pos].c.key, w, s->pgno);
      pnews[1] = route_cell(p->cell[ie].key, w, x->pgno);
    }else{
      pends[0].key = p->cell[ie].key; pends[0].start = p->cell[ie].start;
      pends[1].key = p->cell[ir].key; pends[1].start = p->cell[ir].start;
      pnews[0] = route_cell(L[pos-1].c.key, w, x->pgno);
      pnews[1] = route_cell(p->cell[ir].key, w, s->pgno);
    }
    /* The sibling first (its copies read values still owned by x). Touching
    ** it with its old range materializes any stale cell of the keys it gains. */
    touch(t, s, &rs, gc);
    for(i=lo_i; i<hi_i; i++){
      lsm_cell c = L[i].c;
      c.start = w;
      c.end = LSM_INF;
      if( lsm_node_insert(s, &c)<0 ){ free(L); return LSMVBT_NOMEM; }
    }
    touch(t, x, &r, gc);
    for(i=0; i<nend && rc==LSMVBT_OK; i++) rc = end_cell(t, x, ends[i].key, ends[i].start);
    for(i=lo_i; i<hi_i && rc==LSMVBT_OK; i++){
      if( L[i].old ) rc = end_cell(t, x, L[i].c.key, L[i].c.start);
    }
    free(L);
    if( rc ) return rc;
    STATS(t).redistributions++;
    return apply(t, path, lvl-1, pends, 2, pnews, 2);
  }
  free(L);
  return rc ? rc : LSMVBT_NOTFOUND;
}

/* In node path->el[lvl], end the cells `ends` and add `adds`, at version w. */
static int apply(lsm_tree *t, lsm_path *path, int lvl, const lsm_ref *ends, int nend,
                 const lsm_cell *adds, int nadd){
  lsm_node *x = path->el[lvl].node;
  const lsm_range *r = &path->el[lvl].r;
  int gc = OPT(t)->lazy_gc, garbage, i, rc = LSMVBT_OK;
  uint32_t gain;
  uint64_t after;

  touch_plan(t, x, r, gc, &gain, &garbage);
  after = x->used - gain + cells_size(x->level, adds, nadd);
  for(i=0; i<nend; i++){
    int k = lsm_node_find(x, ends[i].key, ends[i].start);
    if( k<0 ){
      return lsm_err(t->db, LSMVBT_CORRUPT, "page %u lacks cell (%lld, %llu)", x->pgno,
                     (long long)ends[i].key, (unsigned long long)ends[i].start);
    }
    if( x->cell[k].start>=t->w ) after -= lsm_cell_size(x->level, &x->cell[k]);
    else garbage = 1;
  }
  if( nadd==0 || after <= (garbage ? t->body : t->limit) ){
    touch(t, x, r, gc);
    for(i=0; i<nend && rc==LSMVBT_OK; i++) rc = end_cell(t, x, ends[i].key, ends[i].start);
    for(i=0; i<nadd && rc==LSMVBT_OK; i++){
      if( lsm_node_insert(x, &adds[i])<0 ) rc = LSMVBT_NOMEM;
    }
    if( rc==LSMVBT_OK && after > t->limit && nadd>0 ) STATS(t).reserve_uses++;
    return rc;
  }
  if( OPT(t)->redistribute && lvl>0 && x->level==0 && nadd==1 ){
    rc = redistribute(t, path, lvl, ends, nend, adds);
    if( rc!=LSMVBT_NOTFOUND ) return rc;
  }
  return split(t, path, lvl, ends, nend, adds, nadd);
}

/* ---- Writes -------------------------------------------------------------------- */

static int copy_value(const lsm_cell *c, uint8_t **pOld, uint32_t *pnOld){
  *pOld = 0;
  *pnOld = c->len;
  if( c->len ){
    *pOld = malloc(c->len);
    if( *pOld==0 ) return LSMVBT_NOMEM;
    memcpy(*pOld, c->val, c->len);
  }
  return LSMVBT_OK;
}

int lsm_tree_put(lsm_tree *t, int64_t key, const void *val, uint32_t n, int mode,
                 uint8_t **pOld, uint32_t *pnOld, int *pHad){
  lsm_path path;
  lsm_node *leaf;
  lsm_ref e;
  lsm_cell c;
  int i, rc;
  if( pHad ) *pHad = 0;
  if( pOld ){ *pOld = 0; *pnOld = 0; }
  rc = descend(t, t->w, key, &path);
  if( rc ) return rc;
  leaf = path.el[path.n-1].node;
  i = leaf_find(leaf, key, t->w);
  if( i>=0 ){
    if( mode==LSMVBT_INSERT ) return LSMVBT_CONSTRAINT;
    if( pHad ) *pHad = 1;
    if( pOld && (rc = copy_value(&leaf->cell[i], pOld, pnOld))!=0 ) return rc;
    e.key = key;
    e.start = leaf->cell[i].start;
  }else if( mode==LSMVBT_UPDATE ){
    return LSMVBT_NOTFOUND;
  }
  memset(&c, 0, sizeof(c));
  c.key = key;
  c.start = t->w;
  c.end = LSM_INF;
  c.len = n;
  c.val = (uint8_t*)val;
  return apply(t, &path, path.n-1, &e, i>=0 ? 1 : 0, &c, 1);
}

int lsm_tree_delete(lsm_tree *t, int64_t key, uint8_t **pOld, uint32_t *pnOld){
  lsm_path path;
  lsm_node *leaf;
  lsm_ref e;
  int i, rc;
  if( pOld ){ *pOld = 0; *pnOld = 0; }
  rc = descend(t, t->w, key, &path);
  if( rc ) return rc;
  leaf = path.el[path.n-1].node;
  i = leaf_find(leaf, key, t->w);
  if( i<0 ) return LSMVBT_NOTFOUND;
  if( pOld && (rc = copy_value(&leaf->cell[i], pOld, pnOld))!=0 ) return rc;
  e.key = key;
  e.start = leaf->cell[i].start;
  return apply(t, &path, path.n-1, &e, 1, 0, 0);
}

/* ---- Whole-tree passes ----------------------------------------------------------- */

static int gc_visit(lsm_tree *t, uint32_t pg, const lsm_range *r, int depth){
  lsm_node *n;
  uint32_t gain;
  int garbage, i, rc, stale = 0;
  if( depth>=LSM_MAX_DEPTH ) return lsm_err(t->db, LSMVBT_CORRUPT, "tree too deep");
  rc = lsm_pager_get(PGR(t), pg, &n);
  if( rc ) return rc;
  touch_plan(t, n, r, 1, &gain, &garbage);
  for(i=0; i<n->ncell; i++){
    if( n->cell[i].end==LSM_INF && !in_range(r, n->cell[i].key) ) stale = 1;
  }
  if( gain>0 || stale ) touch(t, n, r, 1);
  if( n->level==0 ) return LSMVBT_OK;
  for(i=0; i<n->ncell; i++){
    lsm_range cr;
    const lsm_cell *c = &n->cell[i];
    if( !lsm_alive(c, t->w) || !in_range(r, c->key) ) continue;
    if( route(n, r, c->key, t->w, &cr)!=i ) return lsm_err(t->db, LSMVBT_CORRUPT, "page %u: duplicate bounds", pg);
    rc = gc_visit(t, c->child, &cr, depth+1);
    if( rc ) return rc;
  }
  return LSMVBT_OK;
}

int lsm_tree_gc_pass(lsm_tree *t){
  lsm_root re = root_entry(t, t->w);
  lsm_range r;
  r.lo = 0; r.has_lo = 0; r.hi = INT64_MAX; r.since = re.since;
  STATS(t).gc_passes++;
  return gc_visit(t, re.pgno, &r, 0);
}

static int mark_visit(lsm_tree *t, uint32_t pg, int level, uint8_t *bm, uint32_t npage, int depth){
  lsm_node *n;
  int i, rc;
  if( pg>=npage || depth>=LSM_MAX_DEPTH ){
    return lsm_err(t->db, LSMVBT_CORRUPT, "page %u referenced beyond the file", pg);
  }
  if( bm[pg/8] & (1u<<(pg%8)) ) return LSMVBT_OK;
  bm[pg/8] |= (uint8_t)(1u<<(pg%8));
  if( PGR(t)->cur[pg]==LSM_NO_SLOT ){
    /* Marking runs outside transactions: every reachable page is on disk. */
    return lsm_err(t->db, LSMVBT_CORRUPT, "page %u is referenced but was never written", pg);
  }
  if( level==0 ) return LSMVBT_OK;          /* leaves point nowhere: not read */
  rc = lsm_pager_get(PGR(t), pg, &n);
  if( rc ) return rc;
  if( level>0 && n->level!=level ){
    return lsm_err(t->db, LSMVBT_CORRUPT, "page %u has level %d, expected %d", pg, n->level, level);
  }
  for(i=0; i<n->ncell; i++){
    if( n->cell[i].end > t->horizon ){
      rc = mark_visit(t, n->cell[i].child, n->level-1, bm, npage, depth+1);
      if( rc ) return rc;
    }
  }
  return LSMVBT_OK;
}

int lsm_tree_mark(lsm_tree *t, uint8_t *bm, uint32_t npage){
  int i, rc;
  prune_roots(t);
  bm[0] |= 1;
  for(i=0; i<t->nroot; i++){
    lsm_node *root;
    rc = lsm_pager_get(PGR(t), t->roots[i].pgno, &root);
    if( rc ) return rc;
    rc = mark_visit(t, t->roots[i].pgno, root->level, bm, npage, 0);
    if( rc ) return rc;
  }
  return LSMVBT_OK;
}

typedef struct check_ctx { int have_prev; int64_t prev; uint64_t v; } check_ctx;

static int check_visit(lsm_tree *t, uint32_t pg, const lsm_range *r, int level, int depth,
                       check_ctx *cx){
  lsm_node *n;
  int i, rc, have = 0;
  int64_t last = 0;
  if( depth>=LSM_MAX_DEPTH ) return lsm_err(t->db, LSMVBT_CORRUPT, "tree deeper than %d", LSM_MAX_DEPTH);
  rc = lsm_pager_get(PGR(t), pg, &n);
  if( rc ) return rc;
  if( level>=0 && n->level!=level ){
    return lsm_err(t->db, LSMVBT_CORRUPT, "page %u has level %d, expected %d", pg, n->level, level);
  }
  if( n->used > t->body ) return lsm_err(t->db, LSMVBT_CORRUPT, "page %u overfull", pg);
  for(i=0; i<n->ncell; i++){
    const lsm_cell *c = &n->cell[i];
    if( !lsm_alive(c, cx->v) || !in_range(r, c->key) ) continue;
    if( have && c->key<=last ){
      return lsm_err(t->db, LSMVBT_CORRUPT, "page %u: key %lld twice or out of order at version %llu",
                     pg, (long long)c->key, (unsigned long long)cx->v);
    }
    have = 1;
    last = c->key;
    if( n->level==0 ){
      if( cx->have_prev && c->key<=cx->prev ){
        return lsm_err(t->db, LSMVBT_CORRUPT, "key %lld out of order across leaves", (long long)c->key);
      }
      cx->have_prev = 1;
      cx->prev = c->key;
    }else{
      lsm_range cr;
      if( route(n, r, c->key, cx->v, &cr)!=i ) return lsm_err(t->db, LSMVBT_CORRUPT, "page %u: bad routing", pg);
      rc = check_visit(t, c->child, &cr, n->level-1, depth+1, cx);
      if( rc ) return rc;
    }
  }
  if( n->level>0 && (!have || last!=r->hi) ){
    return lsm_err(t->db, LSMVBT_CORRUPT, "page %u does not cover its range up to %lld", pg, (long long)r->hi);
  }
  return LSMVBT_OK;
}

int lsm_tree_check(lsm_tree *t, uint64_t v){
  lsm_root re = root_entry(t, v);
  lsm_range r;
  check_ctx cx;
  memset(&cx, 0, sizeof(cx));
  cx.v = v;
  r.lo = 0; r.has_lo = 0; r.hi = INT64_MAX; r.since = re.since;
  return check_visit(t, re.pgno, &r, -1, 0, &cx);
}

int lsm_tree_height(lsm_tree *t, uint64_t v, uint32_t *pHeight){
  lsm_node *n;
  int rc = lsm_pager_get(PGR(t), lsm_tree_root(t, v), &n);
  *pHeight = 0;
  if( rc==LSMVBT_OK ) *pHeight = (uint32_t)n->level + 1;
  return rc;
}
