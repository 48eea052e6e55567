/*
** test_util.h — shared helpers of the LS-MVBT engine tests: CHECK macros,
** a seeded PRNG, a scratch directory, and the in-memory model (a map from
** a fixed universe of keys to values) the engine is compared against.
*/
#ifndef LSMVBT_TEST_UTIL_H
#define LSMVBT_TEST_UTIL_H

#include "lsmvbt.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int g_failures;

#define CHECK(cond) do{ if(!(cond)){ g_failures++; \
  fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } }while(0)
#define CHECK_EQ(a, b) do{ long long a_ = (long long)(a), b_ = (long long)(b); \
  if( a_!=b_ ){ g_failures++; fprintf(stderr, "%s:%d: %s == %lld, expected %s == %lld\n", \
  __FILE__, __LINE__, #a, a_, #b, b_); } }while(0)
#define CHECK_RC(db, expr, want) do{ int rc_ = (expr); if( rc_!=(want) ){ g_failures++; \
  fprintf(stderr, "%s:%d: %s returned %d, expected %d (%s)\n", __FILE__, __LINE__, #expr, \
  rc_, (int)(want), (db) ? lsmvbt_errmsg(db) : ""); } }while(0)
#define CHECK_DONE() (fprintf(stderr, "%s: %d failure(s)\n", __FILE__, g_failures), \
  g_failures ? 1 : 0)
/* Stop a test loop after the first failures: later ones only repeat them. */
#define FAILED_ENOUGH() (g_failures>=5)

static uint64_t g_rng = 0x2545f4914f6cdd1dull;
static inline void rng_seed(uint64_t s){ g_rng = s ? s : 1; }
static inline uint64_t rng_next(void){
  g_rng ^= g_rng>>12; g_rng ^= g_rng<<25; g_rng ^= g_rng>>27;
  return g_rng * 0x2545f4914f6cdd1dull;
}
static inline uint32_t rng_below(uint32_t n){ return (uint32_t)(rng_next() % n); }

/* A fresh directory under $TMPDIR, else /dev/shm (these tests count and
** replay I/O; they do not need a disk's fdatasync), else /tmp. */
static inline void test_dir(char *buf, size_t n, const char *tag){
  const char *base = getenv("TMPDIR");
  if( !base || !*base ) base = access("/dev/shm", W_OK)==0 ? "/dev/shm" : "/tmp";
  snprintf(buf, n, "%s/lsmvbt-%s-%d", base, tag, (int)getpid());
  mkdir(buf, 0755);
}

/* ---- The model: values of a fixed, sorted universe of keys ------------------ */
typedef struct mval { int has; uint32_t len; uint8_t *val; } mval;
typedef struct model { int n; mval *v; } model;

static int64_t *g_keys;       /* sorted universe */
static int g_nkeys;

static int cmp_i64(const void *a, const void *b){
  int64_t x = *(const int64_t*)a, y = *(const int64_t*)b;
  return x<y ? -1 : x>y;
}

/* Universe: n keys, mostly dense small ones, plus the extremes. */
static inline void universe_init(int n){
  int i, k = 0;
  g_keys = malloc(sizeof(int64_t)*(size_t)n);
  g_keys[k++] = INT64_MIN;
  g_keys[k++] = INT64_MAX;
  g_keys[k++] = -1;
  g_keys[k++] = 0;
  while( k<n ){
    int64_t x = (rng_below(4)==0) ? (int64_t)rng_next() : (int64_t)rng_below(4*(uint32_t)n) - n/2;
    int dup = 0;
    for(i=0; i<k; i++) if( g_keys[i]==x ) dup = 1;
    if( !dup ) g_keys[k++] = x;
  }
  qsort(g_keys, (size_t)n, sizeof(int64_t), cmp_i64);
  g_nkeys = n;
}

static inline int key_index(int64_t key){
  int lo = 0, hi = g_nkeys;
  while( lo<hi ){ int m = lo+(hi-lo)/2; if( g_keys[m]<key ) lo = m+1; else hi = m; }
  return (lo<g_nkeys && g_keys[lo]==key) ? lo : -1;
}

static inline void model_init(model *m){
  m->n = g_nkeys;
  m->v = calloc((size_t)g_nkeys, sizeof(mval));
}
static inline void model_set(model *m, int i, const void *val, uint32_t len){
  free(m->v[i].val);
  m->v[i].has = 1;
  m->v[i].len = len;
  m->v[i].val = malloc(len ? len : 1);
  if( len ) memcpy(m->v[i].val, val, len);
}
static inline void model_del(model *m, int i){
  free(m->v[i].val);
  m->v[i].has = 0;
  m->v[i].val = 0;
  m->v[i].len = 0;
}
static inline void model_free(model *m){
  int i;
  if( m->v==0 ) return;
  for(i=0; i<m->n; i++) free(m->v[i].val);
  free(m->v);
  m->v = 0;
  m->n = 0;
}
static inline void model_copy(model *dst, const model *src){
  int i;
  model_free(dst);
  model_init(dst);
  for(i=0; i<src->n; i++) if( src->v[i].has ) model_set(dst, i, src->v[i].val, src->v[i].len);
}
static inline int model_count(const model *m){
  int i, n = 0;
  for(i=0; i<m->n; i++) n += m->v[i].has;
  return n;
}

/* A value: length mostly small, sometimes up to maxlen; content from a seed. */
static inline uint32_t make_value(uint8_t *buf, uint32_t maxlen){
  uint32_t len = rng_below(8)==0 ? rng_below(maxlen+1) : rng_below(maxlen<120 ? maxlen+1 : 120);
  uint32_t i;
  uint8_t x = (uint8_t)rng_next();
  for(i=0; i<len; i++) buf[i] = (uint8_t)(x + i*7);
  return len;
}

/* Compare a cursor's whole scan, from `from` on, with the model. */
static inline int scan_matches(lsmvbt_db *db, lsmvbt_cursor *c, const model *m, int64_t from,
                               const char *what){
  int i = 0, ok = 1;
  while( i<m->n && g_keys[i]<from ) i++;
  if( lsmvbt_cursor_seek(c, from) ){ fprintf(stderr, "%s: seek: %s\n", what, lsmvbt_errmsg(db)); return 0; }
  for(;;){
    while( i<m->n && !m->v[i].has ) i++;
    if( lsmvbt_cursor_eof(c) || i>=m->n ){
      if( !lsmvbt_cursor_eof(c) || i<m->n ){
        fprintf(stderr, "%s: scan length differs (cursor eof %d, model at %d/%d)\n", what,
                lsmvbt_cursor_eof(c), i, m->n);
        ok = 0;
      }
      break;
    }
    {
      uint32_t n;
      const void *v = lsmvbt_cursor_value(c, &n);
      if( lsmvbt_cursor_key(c)!=g_keys[i] || n!=m->v[i].len || (n && memcmp(v, m->v[i].val, n)) ){
        fprintf(stderr, "%s: at key %lld: cursor has key %lld len %u, model len %u\n", what,
                (long long)g_keys[i], (long long)lsmvbt_cursor_key(c), n, m->v[i].len);
        ok = 0;
        break;
      }
    }
    i++;
    if( lsmvbt_cursor_next(c) ){ fprintf(stderr, "%s: next: %s\n", what, lsmvbt_errmsg(db)); return 0; }
  }
  return ok;
}

static inline int db_matches(lsmvbt_db *db, const model *m, const char *what){
  lsmvbt_cursor *c;
  int ok;
  if( lsmvbt_cursor_open(db, &c) ) return 0;
  ok = scan_matches(db, c, m, INT64_MIN, what);
  lsmvbt_cursor_close(c);
  return ok;
}

static inline void rm_rf_file(const char *path){ unlink(path); }

#endif
