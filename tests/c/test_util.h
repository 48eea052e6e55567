/*
** test_util.h — small helpers shared by the C tests that drive SQLite
** (static inline: a test that uses only some of them compiles without
** unused-function warnings).
*/
#ifndef WALDIO_TEST_UTIL_H
#define WALDIO_TEST_UTIL_H

#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A fresh directory under $TMPDIR (default /var/tmp: tmpfs has no O_DIRECT). */
static inline void test_dir(char *zDir, size_t n, const char *zName){
  const char *zTmp = getenv("TMPDIR");
  snprintf(zDir, n, "%s/waldio-%s-XXXXXX", zTmp ? zTmp : "/var/tmp", zName);
  if( !mkdtemp(zDir) ){ perror("mkdtemp"); exit(2); }
}

static inline void remove_db(const char *zDb){
  const char *az[] = { "", "-wal", "-shm", "-wal-shm", "-waldio", "-journal" };
  char z[600];
  size_t i;
  for(i=0; i<sizeof(az)/sizeof(az[0]); i++){
    snprintf(z, sizeof(z), "%s%s", zDb, az[i]);
    unlink(z);
  }
}

/* The single integer (or -1) a query returns. */
static inline long long query_int(sqlite3 *db, const char *zSql){
  sqlite3_stmt *p = 0;
  long long v = -1;
  if( sqlite3_prepare_v2(db, zSql, -1, &p, 0)==SQLITE_OK && sqlite3_step(p)==SQLITE_ROW ){
    v = sqlite3_column_int64(p, 0);
  }
  sqlite3_finalize(p);
  return v;
}

/* The single text value a query returns, copied into buf ("" on error). */
static inline const char *query_text(sqlite3 *db, const char *zSql, char *buf, size_t n){
  sqlite3_stmt *p = 0;
  buf[0] = 0;
  if( sqlite3_prepare_v2(db, zSql, -1, &p, 0)==SQLITE_OK && sqlite3_step(p)==SQLITE_ROW ){
    const unsigned char *z = sqlite3_column_text(p, 0);
    snprintf(buf, n, "%s", z ? (const char*)z : "");
  }
  sqlite3_finalize(p);
  return buf;
}

#endif
