/*
** db.c — the public API: opening and closing, transactions (begin, sync =
** the commit point, commit, rollback, savepoints), reads and writes at the
** right version, cursors, statistics.
**
** Invariants:
**   D1  Outside a transaction the tree is exactly version C on disk and in
**       memory (no dirty node). Inside one, writes happen at w = C+1.
**   D2  The commit point is lsmvbt_sync (pager commit returned): C = w.
**       A rollback after that cannot drop the durable version; it commits
**       a compensating version w+1 built from the undo log.
**   D3  The undo log holds each change's previous value, in order; rolling
**       back to a savepoint replays it backwards as ordinary writes.
**   D4  Garbage collection never removes a cell some open cursor's version
**       sees: horizon = min(C, versions pinned by cursors).
**   D5  An engine call that fails half-way through a write leaves the
**       transaction "failed": only rollback is accepted.
*/
#include "internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

struct lsmvbt_cursor {
  lsmvbt_db *db;
  uint64_t v;
  int eof;
  int64_t hi;            /* upper bound of the buffered leaf */
  int n, i, nalloc;
  int64_t *keys;
  uint32_t *off, *len;
  uint8_t *data;
  size_t ndata, data_alloc;
};

int lsm_err(lsmvbt_db *db, int rc, const char *zFmt, ...){
  va_list ap;
  va_start(ap, zFmt);
  vsnprintf(db->zErr, sizeof(db->zErr), zFmt, ap);
  va_end(ap);
  return rc;
}

const char *lsmvbt_errmsg(lsmvbt_db *db){
  return db ? db->zErr : "out of memory";
}

void lsmvbt_options_default(lsmvbt_options *o){
  memset(o, 0, sizeof(*o));
  o->lazy_split = 1;
  o->reserve_bytes = -1;
  o->lazy_gc = 1;
  o->gc_period = 64;
  o->embed_metadata = 1;
  o->redistribute = 0;
  o->sync = LSMVBT_SYNC_FULL;
  o->page_size = 4096;
  o->cache_pages = 4096;
  o->prealloc_bytes = 1u<<20;
  o->io = 0;
}

const lsmvbt_options *lsmvbt_get_options(lsmvbt_db *db){ return &db->opt; }

uint32_t lsmvbt_max_value(lsmvbt_db *db){
  return db->tree.limit/4 - LSM_CELL_FIXED;
}

/* The version reads see: the open transaction's, else the last committed. */
static uint64_t read_version(const lsmvbt_db *db){
  return db->txn==LSM_TXN_OPEN ? db->tree.w : db->C;
}

static void set_horizon(lsmvbt_db *db){
  uint64_t h = db->C;
  int i;
  for(i=0; i<db->npin; i++) if( db->pins[i]<h ) h = db->pins[i];
  db->tree.horizon = h;
}

static void end_call(lsmvbt_db *db){
  lsm_pager_shrink(&db->pager);
}

int lsmvbt_unlink(const char *zPath, lsmvbt_io *io){
  if( io==0 ) io = lsmvbt_io_default();
  if( io->xUnlink(zPath)!=0 && errno!=ENOENT ) return LSMVBT_IOERR;
  return LSMVBT_OK;
}

/* Take the file's exclusive lock (one handle per file, in any process). */
static int lock_file(lsmvbt_db *db, int fd){
  if( db->io->xFlock(fd, LOCK_EX|LOCK_NB)!=0 ){
    if( errno==EWOULDBLOCK ) return lsm_err(db, LSMVBT_BUSY, "%s is open elsewhere", db->zPath);
    return lsm_err(db, LSMVBT_IOERR, "flock %s: %s", db->zPath, strerror(errno));
  }
  return LSMVBT_OK;
}

int lsmvbt_open(const char *zPath, int flags, const lsmvbt_options *opt, lsmvbt_db **pDb){
  lsmvbt_db *db = calloc(1, sizeof(*db));
  int rc, exists;
  *pDb = db;
  if( db==0 ) return LSMVBT_NOMEM;
  db->fd = -1;
  if( opt ) db->opt = *opt; else lsmvbt_options_default(&db->opt);
  db->io = db->opt.io ? db->opt.io : lsmvbt_io_default();
  db->zPath = strdup(zPath);
  if( db->zPath==0 ) return LSMVBT_NOMEM;
  if( db->opt.page_size<512 || db->opt.page_size>65536 || (db->opt.page_size & (db->opt.page_size-1)) ){
    return lsm_err(db, LSMVBT_MISUSE, "page_size must be a power of two in 512..65536");
  }
  if( db->opt.cache_pages==0 ) db->opt.cache_pages = 4096;

  db->fd = db->io->xOpen(zPath, O_RDWR, 0);
  exists = db->fd>=0;
  if( !exists && errno!=ENOENT ){
    return lsm_err(db, LSMVBT_CANTOPEN, "cannot open %s: %s", zPath, strerror(errno));
  }
  if( exists && (flags & LSMVBT_OPEN_TRUNCATE) ){
    rc = lock_file(db, db->fd);        /* never replace a file in use */
    db->io->xClose(db->fd);
    db->fd = -1;
    if( rc ) return rc;
  }
  if( !exists || (flags & LSMVBT_OPEN_TRUNCATE) ){
    if( !exists && !(flags & (LSMVBT_OPEN_CREATE|LSMVBT_OPEN_TRUNCATE)) ){
      return lsm_err(db, LSMVBT_CANTOPEN, "%s does not exist", zPath);
    }
    rc = lsm_create_file(db, zPath);
    if( rc ) return rc;
    db->fd = db->io->xOpen(zPath, O_RDWR, 0);
    if( db->fd<0 ) return lsm_err(db, LSMVBT_CANTOPEN, "cannot open %s: %s", zPath, strerror(errno));
  }
  rc = lock_file(db, db->fd);
  if( rc ) return rc;
  rc = lsm_recover(db);
  if( rc ) return rc;
  db->opt.page_size = db->pager.ps;
  db->opt.reserve_bytes = (int)(db->tree.body - db->tree.limit);
  db->stats.version = db->C;
  end_call(db);
  return LSMVBT_OK;
}

static void undo_clear(lsmvbt_db *db, uint32_t from){
  uint32_t i;
  for(i=from; i<db->nundo; i++) free(db->undo[i].val);
  db->nundo = from;
}

int lsmvbt_close(lsmvbt_db *db){
  int rc = LSMVBT_OK;
  if( db==0 ) return LSMVBT_OK;
  if( db->txn ) lsmvbt_rollback(db);
  if( db->fd>=0 ){
    if( db->opt.sync==LSMVBT_SYNC_NORMAL && db->tree_ok && !db->pager.broken ){
      rc = lsm_sync_data(db->io, db->fd);
    }
    db->io->xClose(db->fd);   /* releases the lock */
  }
  if( db->tree_ok ) lsm_tree_close(&db->tree);
  lsm_pager_close(&db->pager);
  undo_clear(db, 0);
  free(db->undo);
  free(db->sp);
  free(db->pins);
  free(db->getbuf);
  free(db->zPath);
  free(db);
  return rc;
}

/* ---- Transactions ------------------------------------------------------------- */

static int usable(lsmvbt_db *db){
  if( db->pager.broken ){
    return lsm_err(db, LSMVBT_IOERR, "an I/O error left the file unrepaired; reopen it to recover");
  }
  return LSMVBT_OK;
}

/* Give pages back that no version >= horizon can reach (pages are never
** freed one by one: old nodes stay readable for pinned versions). */
static int reclaim(lsmvbt_db *db){
  uint8_t *bm;
  uint32_t before = db->pager.freel.n;
  int rc;
  bm = calloc(db->pager.npage/8 + 1, 1);
  if( bm==0 ) return LSMVBT_NOMEM;
  rc = lsm_tree_mark(&db->tree, bm, db->pager.npage);
  if( rc==LSMVBT_OK ) rc = lsm_pager_set_free(&db->pager, bm);
  free(bm);
  if( rc==LSMVBT_OK ){
    db->tree.dropped = 0;
    if( db->pager.freel.n>before ) db->stats.pages_reclaimed += db->pager.freel.n - before;
  }
  return rc;
}

int lsmvbt_begin(lsmvbt_db *db){
  int rc = usable(db);
  if( rc ) return rc;
  if( db->txn ) return lsm_err(db, LSMVBT_MISUSE, "a transaction is already open");
  set_horizon(db);
  if( db->tree.dropped>=16 ){
    rc = reclaim(db);
    if( rc ) return rc;
  }
  db->tree.w = db->C + 1;
  db->txn = LSM_TXN_OPEN;
  db->gc_pass_done = 0;
  undo_clear(db, 0);
  db->nsp = 0;
  return LSMVBT_OK;
}

int lsmvbt_in_txn(lsmvbt_db *db){ return db->txn!=LSM_TXN_NONE; }

static int txn_failed_flag(lsmvbt_db *db){
  if( db->txn_failed ){
    lsm_err(db, LSMVBT_ERROR, "an earlier write of this transaction failed: roll it back");
  }
  return db->txn_failed;
}

/* D5: a write that failed half-way leaves nodes half-changed. */
static int fail_txn(lsmvbt_db *db, int rc){
  db->txn_failed = 1;
  return rc;
}

static int write_prep(lsmvbt_db *db){
  int rc = usable(db);
  if( rc ) return rc;
  if( db->txn!=LSM_TXN_OPEN ){
    return lsm_err(db, LSMVBT_MISUSE, db->txn ? "the transaction is already synced"
                                              : "no transaction is open");
  }
  if( txn_failed_flag(db) ) return LSMVBT_ERROR;
  set_horizon(db);
  if( !db->opt.lazy_gc && db->opt.gc_period>0 && !db->gc_pass_done
   && db->tree.w % (uint64_t)db->opt.gc_period==0 ){
    db->gc_pass_done = 1;
    rc = lsm_tree_gc_pass(&db->tree);
    if( rc ) return fail_txn(db, rc);
  }
  return LSMVBT_OK;
}

static int undo_push(lsmvbt_db *db, int64_t key, int had, uint8_t *val, uint32_t len){
  if( db->nundo==db->nundo_alloc ){
    uint32_t na = db->nundo_alloc ? db->nundo_alloc*2 : 64;
    lsm_undo *a = realloc(db->undo, sizeof(lsm_undo)*na);
    if( a==0 ){ free(val); return LSMVBT_NOMEM; }
    db->undo = a;
    db->nundo_alloc = na;
  }
  db->undo[db->nundo].key = key;
  db->undo[db->nundo].had = had;
  db->undo[db->nundo].val = val;
  db->undo[db->nundo].len = len;
  db->nundo++;
  return LSMVBT_OK;
}

int lsmvbt_put(lsmvbt_db *db, int64_t key, const void *val, uint32_t n, int mode){
  uint8_t *old = 0;
  uint32_t nold = 0;
  int had = 0, rc = write_prep(db);
  if( rc ) return rc;
  if( mode!=LSMVBT_INSERT && mode!=LSMVBT_REPLACE && mode!=LSMVBT_UPDATE ){
    return lsm_err(db, LSMVBT_MISUSE, "unknown put mode %d", mode);
  }
  if( n>lsmvbt_max_value(db) ){
    return lsm_err(db, LSMVBT_TOOBIG, "value of %u bytes; at most %u fit this page size and reserve",
                   n, lsmvbt_max_value(db));
  }
  rc = lsm_tree_put(&db->tree, key, val, n, mode, &old, &nold, &had);
  if( rc==LSMVBT_OK ) rc = undo_push(db, key, had, old, nold);
  else free(old);
  if( rc==LSMVBT_CONSTRAINT ) lsm_err(db, rc, "key %lld exists", (long long)key);
  else if( rc==LSMVBT_NOTFOUND ) lsm_err(db, rc, "key %lld not found", (long long)key);
  else if( rc ) fail_txn(db, rc);
  end_call(db);
  return rc;
}

int lsmvbt_delete(lsmvbt_db *db, int64_t key){
  uint8_t *old = 0;
  uint32_t nold = 0;
  int rc = write_prep(db);
  if( rc ) return rc;
  rc = lsm_tree_delete(&db->tree, key, &old, &nold);
  if( rc==LSMVBT_OK ) rc = undo_push(db, key, 1, old, nold);
  if( rc==LSMVBT_NOTFOUND ) lsm_err(db, rc, "key %lld not found", (long long)key);
  else if( rc ) fail_txn(db, rc);
  end_call(db);
  return rc;
}

int lsmvbt_sync(lsmvbt_db *db){
  uint32_t n = 0;
  int rc = usable(db), with_super;
  if( rc ) return rc;
  if( db->txn==LSM_TXN_SYNCED ) return LSMVBT_OK;
  if( db->txn!=LSM_TXN_OPEN ) return lsm_err(db, LSMVBT_MISUSE, "no transaction is open");
  if( txn_failed_flag(db) ) return LSMVBT_ERROR;
  with_super = !db->opt.embed_metadata && db->pager.ndirty>0;
  rc = lsm_pager_commit(&db->pager, db->tree.w, lsm_tree_root(&db->tree, db->tree.w),
                        lsm_tree_root(&db->tree, db->C), with_super,
                        db->opt.sync==LSMVBT_SYNC_FULL, &n);
  if( rc ) return rc;
  if( n==0 ){
    db->stats.empty_commits++;
  }else{
    db->C = db->tree.w;
    db->stats.commits++;
    db->stats.version = db->C;
  }
  db->txn = LSM_TXN_SYNCED;
  return LSMVBT_OK;
}

static void txn_end(lsmvbt_db *db){
  db->txn = LSM_TXN_NONE;
  db->tree.w = 0;
  db->nsp = 0;
  undo_clear(db, 0);
  db->txn_failed = 0;
  end_call(db);
}

int lsmvbt_commit(lsmvbt_db *db){
  int rc = lsmvbt_sync(db);
  if( rc ) return rc;
  txn_end(db);
  return LSMVBT_OK;
}

/* Replay undo records [from, nundo) backwards as writes of the open
** transaction, without logging them (D3). */
static int undo_replay(lsmvbt_db *db, const lsm_undo *u, uint32_t from, uint32_t to){
  uint32_t i;
  int rc;
  set_horizon(db);
  for(i=to; i>from; i--){
    const lsm_undo *r = &u[i-1];
    if( r->had ){
      rc = lsm_tree_put(&db->tree, r->key, r->val, r->len, LSMVBT_REPLACE, 0, 0, 0);
    }else{
      rc = lsm_tree_delete(&db->tree, r->key, 0, 0);
      if( rc==LSMVBT_NOTFOUND ) rc = LSMVBT_OK;
    }
    if( rc ) return rc;
  }
  return LSMVBT_OK;
}

int lsmvbt_rollback(lsmvbt_db *db){
  lsm_undo *u;
  uint32_t nu;
  int rc;
  if( db->txn==LSM_TXN_NONE ) return LSMVBT_OK;
  if( db->txn==LSM_TXN_OPEN ){
    lsm_pager_rollback(&db->pager);
    lsm_tree_forget(&db->tree, db->tree.w);
    db->stats.rollbacks++;
    txn_end(db);
    return LSMVBT_OK;
  }
  /* D2: synced. Nothing to undo if nothing was written. */
  if( db->C!=db->tree.w ){
    txn_end(db);
    return LSMVBT_OK;
  }
  u = db->undo;
  nu = db->nundo;
  db->undo = 0;
  db->nundo = db->nundo_alloc = 0;
  db->txn = LSM_TXN_NONE;
  db->tree.w = 0;
  rc = lsmvbt_begin(db);
  if( rc==LSMVBT_OK ){
    rc = undo_replay(db, u, 0, nu);
    if( rc==LSMVBT_OK ) rc = lsmvbt_sync(db);
    if( rc ){
      char msg[sizeof(db->zErr)];
      snprintf(msg, sizeof(msg), "%s", db->zErr);
      lsm_pager_rollback(&db->pager);
      lsm_tree_forget(&db->tree, db->tree.w);
      txn_end(db);
      lsm_err(db, rc, "rollback after sync failed, version %llu stays committed: %s",
              (unsigned long long)db->C, msg);
    }else{
      db->stats.compensations++;
      txn_end(db);
    }
  }
  {
    uint32_t i;
    for(i=0; i<nu; i++) free(u[i].val);
    free(u);
  }
  return rc;
}

int lsmvbt_savepoint(lsmvbt_db *db, int id){
  if( db->txn!=LSM_TXN_OPEN ) return lsm_err(db, LSMVBT_MISUSE, "no transaction is open");
  while( db->nsp>0 && db->sp[db->nsp-1].id>=id ) db->nsp--;
  if( db->nsp==db->nsp_alloc ){
    int na = db->nsp_alloc ? db->nsp_alloc*2 : 8;
    lsm_savepoint *a = realloc(db->sp, sizeof(lsm_savepoint)*(size_t)na);
    if( a==0 ) return LSMVBT_NOMEM;
    db->sp = a;
    db->nsp_alloc = na;
  }
  db->sp[db->nsp].id = id;
  db->sp[db->nsp].mark = db->nundo;
  db->nsp++;
  return LSMVBT_OK;
}

int lsmvbt_release(lsmvbt_db *db, int id){
  while( db->nsp>0 && db->sp[db->nsp-1].id>=id ) db->nsp--;
  return LSMVBT_OK;
}

int lsmvbt_rollback_to(lsmvbt_db *db, int id){
  uint32_t mark = db->nundo;
  int i, rc, found = 0;
  if( db->txn!=LSM_TXN_OPEN ) return lsm_err(db, LSMVBT_MISUSE, "no transaction is open");
  if( txn_failed_flag(db) ) return LSMVBT_ERROR;
  /* The oldest savepoint at or above id marks the state to return to; if
  ** there is none, id was opened before this table joined: undo all. */
  for(i=0; i<db->nsp; i++){
    if( db->sp[i].id>=id ){ mark = db->sp[i].mark; found = 1; break; }
  }
  if( !found ) mark = db->nsp>0 ? db->nundo : 0;
  rc = undo_replay(db, db->undo, mark, db->nundo);
  if( rc ) return fail_txn(db, rc);
  undo_clear(db, mark);
  while( db->nsp>0 && db->sp[db->nsp-1].id>id ) db->nsp--;
  if( db->nsp==0 || db->sp[db->nsp-1].id!=id ){
    rc = lsmvbt_savepoint(db, id);
    db->sp[db->nsp-1].mark = mark;
  }
  end_call(db);
  return rc;
}

/* ---- Reads ------------------------------------------------------------------ */

int lsmvbt_get(lsmvbt_db *db, int64_t key, const void **pVal, uint32_t *pn){
  const lsm_cell *c;
  int rc = usable(db);
  *pVal = 0;
  *pn = 0;
  if( rc ) return rc;
  rc = lsm_tree_get(&db->tree, read_version(db), key, &c);
  if( rc==LSMVBT_OK && c==0 ) rc = LSMVBT_NOTFOUND;
  if( rc==LSMVBT_OK ){
    if( c->len + 1 > db->getbuf_alloc ){
      uint8_t *a = realloc(db->getbuf, c->len + 1);
      if( a==0 ){ end_call(db); return LSMVBT_NOMEM; }
      db->getbuf = a;
      db->getbuf_alloc = c->len + 1;
    }
    if( c->len ) memcpy(db->getbuf, c->val, c->len);
    db->getbuf[c->len] = 0;
    *pVal = db->getbuf;
    *pn = c->len;
  }
  end_call(db);
  return rc;
}

int lsmvbt_last_key(lsmvbt_db *db, int64_t *pKey){
  int found = 0, rc = usable(db);
  if( rc ) return rc;
  rc = lsm_tree_last_key(&db->tree, read_version(db), pKey, &found);
  end_call(db);
  if( rc==LSMVBT_OK && !found ) rc = LSMVBT_NOTFOUND;
  return rc;
}

/* ---- Cursors ---------------------------------------------------------------- */

static int pin(lsmvbt_db *db, uint64_t v){
  if( db->npin==db->npin_alloc ){
    int na = db->npin_alloc ? db->npin_alloc*2 : 8;
    uint64_t *a = realloc(db->pins, sizeof(uint64_t)*(size_t)na);
    if( a==0 ) return LSMVBT_NOMEM;
    db->pins = a;
    db->npin_alloc = na;
  }
  db->pins[db->npin++] = v;
  return LSMVBT_OK;
}

static void unpin(lsmvbt_db *db, uint64_t v){
  int i;
  for(i=0; i<db->npin; i++){
    if( db->pins[i]==v ){
      db->pins[i] = db->pins[--db->npin];
      return;
    }
  }
}

int lsmvbt_cursor_open(lsmvbt_db *db, lsmvbt_cursor **pCur){
  lsmvbt_cursor *c = calloc(1, sizeof(*c));
  *pCur = 0;
  if( c==0 ) return LSMVBT_NOMEM;
  c->db = db;
  c->v = read_version(db);
  c->eof = 1;
  if( pin(db, c->v) ){ free(c); return LSMVBT_NOMEM; }
  *pCur = c;
  return LSMVBT_OK;
}

void lsmvbt_cursor_close(lsmvbt_cursor *c){
  if( c==0 ) return;
  unpin(c->db, c->v);
  free(c->keys);
  free(c->off);
  free(c->len);
  free(c->data);
  free(c);
}

/* Copy one live cell of the scanned leaf into the cursor's buffer: a cursor
** holds no pointer into the cache, so writes and evictions cannot hurt it. */
static int collect(void *ctx, const lsm_cell *cell){
  lsmvbt_cursor *c = ctx;
  if( c->n==c->nalloc ){
    int na = c->nalloc ? c->nalloc*2 : 64;
    int64_t *k = realloc(c->keys, sizeof(int64_t)*(size_t)na);
    uint32_t *o, *l;
    if( k==0 ) return LSMVBT_NOMEM;
    c->keys = k;
    o = realloc(c->off, sizeof(uint32_t)*(size_t)na);
    if( o==0 ) return LSMVBT_NOMEM;
    c->off = o;
    l = realloc(c->len, sizeof(uint32_t)*(size_t)na);
    if( l==0 ) return LSMVBT_NOMEM;
    c->len = l;
    c->nalloc = na;
  }
  if( c->ndata + cell->len + 1 > c->data_alloc ){
    size_t na = c->data_alloc ? c->data_alloc*2 : 8192;
    uint8_t *d;
    while( na < c->ndata + cell->len + 1 ) na *= 2;
    d = realloc(c->data, na);
    if( d==0 ) return LSMVBT_NOMEM;
    c->data = d;
    c->data_alloc = na;
  }
  c->keys[c->n] = cell->key;
  c->off[c->n] = (uint32_t)c->ndata;
  c->len[c->n] = cell->len;
  if( cell->len ) memcpy(c->data + c->ndata, cell->val, cell->len);
  c->ndata += cell->len;
  c->data[c->ndata++] = 0;     /* values read as C strings stay terminated */
  c->n++;
  return LSMVBT_OK;
}

int lsmvbt_cursor_seek(lsmvbt_cursor *c, int64_t key){
  int rc = usable(c->db);
  if( rc ) return rc;
  for(;;){
    c->n = 0;
    c->i = 0;
    c->ndata = 0;
    rc = lsm_tree_leaf_scan(&c->db->tree, c->v, key, &c->hi, collect, c);
    if( rc ) break;
    if( c->n>0 ){ c->eof = 0; break; }
    if( c->hi==INT64_MAX ){ c->eof = 1; break; }
    key = c->hi + 1;
  }
  if( rc ) c->eof = 1;
  end_call(c->db);
  return rc;
}

int lsmvbt_cursor_first(lsmvbt_cursor *c){ return lsmvbt_cursor_seek(c, INT64_MIN); }

int lsmvbt_cursor_next(lsmvbt_cursor *c){
  if( c->eof ) return LSMVBT_OK;
  if( ++c->i < c->n ) return LSMVBT_OK;
  if( c->hi==INT64_MAX ){ c->eof = 1; return LSMVBT_OK; }
  return lsmvbt_cursor_seek(c, c->hi + 1);
}

int lsmvbt_cursor_eof(lsmvbt_cursor *c){ return c->eof; }
int64_t lsmvbt_cursor_key(lsmvbt_cursor *c){ return c->eof ? 0 : c->keys[c->i]; }
const void *lsmvbt_cursor_value(lsmvbt_cursor *c, uint32_t *pn){
  if( c->eof ){ *pn = 0; return 0; }
  *pn = c->len[c->i];
  return c->data + c->off[c->i];
}
uint64_t lsmvbt_cursor_version(lsmvbt_cursor *c){ return c->v; }

/* ---- Inspection -------------------------------------------------------------- */

void lsmvbt_get_stats(lsmvbt_db *db, lsmvbt_stats *st){
  *st = db->stats;
  st->version = db->C;
  st->page_size = db->pager.ps;
  st->npages = db->pager.npage;
  st->free_pages = db->pager.freel.n;
  if( db->tree_ok && lsm_tree_height(&db->tree, read_version(db), &st->height) ) st->height = 0;
  end_call(db);
}

int lsmvbt_check(lsmvbt_db *db){
  int rc = usable(db);
  if( rc ) return rc;
  rc = lsm_tree_check(&db->tree, read_version(db));
  end_call(db);
  return rc;
}
