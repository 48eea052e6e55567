/*
** test_vtab.c — lsmvbt.so loaded into Debian's SQLite (this binary links
** only libsqlite3), driven by SQL: waldio bench's statements on a table of
** Mobibench's shape, run side by side with an ordinary table and compared
** after every batch; transactions, rollbacks, savepoints, conflict
** clauses; query plans use the key; the file next to the database survives
** reconnecting, follows RENAME and goes with DROP; a failure in the second
** table's xSync rolls both tables back (the first by a compensating commit).
**
** Usage: lsmvbt_test_vtab path/to/lsmvbt.so
*/
#include <sqlite3.h>

#include <errno.h>
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

static const char *g_ext;
static char g_dir[300], g_db[400];
static uint64_t g_rng = 88172645463325252ull;
static uint32_t rnd(uint32_t n){
  g_rng ^= g_rng<<13; g_rng ^= g_rng>>7; g_rng ^= g_rng<<17;
  return (uint32_t)(g_rng % n);
}

static int exec(sqlite3 *db, const char *sql){
  char *err = 0;
  int rc = sqlite3_exec(db, sql, 0, 0, &err);
  if( err && getenv("LSMVBT_TEST_VERBOSE") ) fprintf(stderr, "  [%s] -> %s\n", sql, err);
  sqlite3_free(err);
  return rc;
}
#define EXEC_OK(db, sql) do{ int rc_ = exec(db, sql); if( rc_ ){ g_failures++; \
  fprintf(stderr, "%s:%d: %s -> %d %s\n", __FILE__, __LINE__, sql, rc_, sqlite3_errmsg(db)); } }while(0)

static long long query_int(sqlite3 *db, const char *sql){
  sqlite3_stmt *st;
  long long v = -999999;
  if( sqlite3_prepare_v2(db, sql, -1, &st, 0)!=SQLITE_OK ){
    fprintf(stderr, "prepare %s: %s\n", sql, sqlite3_errmsg(db));
    g_failures++;
    return v;
  }
  if( sqlite3_step(st)==SQLITE_ROW ) v = sqlite3_column_int64(st, 0);
  sqlite3_finalize(st);
  return v;
}

/* All rows of a query as one string (for comparing two tables). */
static char *query_all(sqlite3 *db, const char *sql){
  sqlite3_stmt *st;
  sqlite3_str *s = sqlite3_str_new(0);
  if( sqlite3_prepare_v2(db, sql, -1, &st, 0)!=SQLITE_OK ){
    fprintf(stderr, "prepare %s: %s\n", sql, sqlite3_errmsg(db));
    g_failures++;
    return sqlite3_str_finish(s);
  }
  while( sqlite3_step(st)==SQLITE_ROW ){
    int i;
    for(i=0; i<sqlite3_column_count(st); i++){
      const char *z = (const char*)sqlite3_column_text(st, i);
      sqlite3_str_appendf(s, "%d:%s|", sqlite3_column_type(st, i), z ? z : "NULL");
    }
    sqlite3_str_appendchar(s, 1, '\n');
  }
  sqlite3_finalize(st);
  {
    char *z = sqlite3_str_finish(s);      /* NULL for an empty result */
    return z ? z : sqlite3_mprintf("%s", "");
  }
}

static int same_rows(sqlite3 *db, const char *sqlA, const char *sqlB){
  char *a = query_all(db, sqlA), *b = query_all(db, sqlB);
  int same = strcmp(a ? a : "", b ? b : "")==0;     /* an empty result is NULL */
  if( !same ){
    const char *x = a ? a : "", *y = b ? b : "";
    size_t i = 0;
    while( x[i] && x[i]==y[i] ) i++;
    while( i>0 && x[i-1]!='\n' ) i--;
    fprintf(stderr, "rows differ:\n  %s\n  ...%.200s\n  %s\n  ...%.200s\n", sqlA, x+i, sqlB, y+i);
  }
  sqlite3_free(a);
  sqlite3_free(b);
  return same;
}

static sqlite3 *open_db(const char *path){
  sqlite3 *db = 0;
  char *err = 0;
  CHECK_EQ(sqlite3_open(path, &db), SQLITE_OK);
  sqlite3_enable_load_extension(db, 1);
  if( sqlite3_load_extension(db, g_ext, 0, &err)!=SQLITE_OK ){
    fprintf(stderr, "load %s: %s\n", g_ext, err ? err : "?");
    g_failures++;
  }
  sqlite3_free(err);
  return db;
}

static int file_exists(const char *path){
  struct stat st;
  return stat(path, &st)==0;
}

/* waldio bench's statements (python/waldio/bench.py), on both tables. */
static void bench_ops(sqlite3 *db, const char *t, int nops, int *next_id, int seed){
  static const char *vals[] = { "short", "a somewhat longer value",
    "0123456789012345678901234567890123456789012345678901234567890123456789012345678901234567890123456789" };
  char sql[600];
  int i;
  g_rng = 88172645463325252ull + (uint64_t)seed;
  for(i=0; i<nops; i++){
    int op = (int)rnd(10), id = 1 + (int)rnd(*next_id + 5);
    const char *v = vals[rnd(3)];
    switch( op ){
      case 0: case 1: case 2:
        snprintf(sql, sizeof(sql), "INSERT INTO %s(Value) VALUES('%s')", t, v);
        break;
      case 3:
        snprintf(sql, sizeof(sql), "INSERT INTO %s(id, Value, creation_date) VALUES(%d, '%s', %d)", t, id, v, i);
        break;
      case 4: case 5:
        snprintf(sql, sizeof(sql), "UPDATE %s SET Value = '%s%d' WHERE id = %d", t, v, i, id);
        break;
      case 6:
        snprintf(sql, sizeof(sql), "DELETE FROM %s WHERE id = %d", t, id);
        break;
      case 7:
        snprintf(sql, sizeof(sql), "INSERT OR REPLACE INTO %s(id, Value) VALUES(%d, 'r%d')", t, id, i);
        break;
      case 8:
        snprintf(sql, sizeof(sql), "INSERT OR IGNORE INTO %s(id, Value) VALUES(%d, 'i%d')", t, id, i);
        break;
      default:
        snprintf(sql, sizeof(sql), "UPDATE %s SET creation_date = %d WHERE id BETWEEN %d AND %d", t, i, id, id+3);
    }
    exec(db, sql);     /* a duplicate id fails the same way in both tables */
  }
  *next_id += nops;
}

static void test_bench_shape(void){
  sqlite3 *db = open_db(g_db);
  char path[600];
  int next = 0, round;
  const char *cmpA = "SELECT id, Value, creation_date FROM tblMyList ORDER BY id";
  const char *cmpB = "SELECT id, Value, creation_date FROM ref ORDER BY id";

  EXEC_OK(db, "CREATE VIRTUAL TABLE tblMyList USING lsmvbt("
              "id INTEGER PRIMARY KEY autoincrement, Value TEXT not null, creation_date long)");
  EXEC_OK(db, "CREATE TABLE ref(id INTEGER PRIMARY KEY, Value TEXT not null, creation_date long)");
  snprintf(path, sizeof(path), "%s-tblMyList.lsmvbt", g_db);
  CHECK(file_exists(path));

  for(round=0; round<40 && g_failures<5; round++){
    int mode = round % 4, seed = round*1000;
    int n0 = next;
    if( mode==1 ){ EXEC_OK(db, "BEGIN"); }
    if( mode==2 ){ EXEC_OK(db, "BEGIN"); EXEC_OK(db, "SAVEPOINT s1"); }
    bench_ops(db, "tblMyList", 25, &next, seed);
    next = n0;
    bench_ops(db, "ref", 25, &next, seed);
    if( mode==1 ){
      if( round % 8==1 ) EXEC_OK(db, "ROLLBACK"); else EXEC_OK(db, "COMMIT");
    }
    if( mode==2 ){
      EXEC_OK(db, "ROLLBACK TO s1");
      EXEC_OK(db, "INSERT INTO tblMyList(Value) VALUES('after rollback to')");
      EXEC_OK(db, "INSERT INTO ref(Value) VALUES('after rollback to')");
      EXEC_OK(db, "RELEASE s1");
      EXEC_OK(db, "COMMIT");
    }
    CHECK(same_rows(db, cmpA, cmpB));
  }
  /* The benchmark's own verification queries. */
  CHECK(same_rows(db, "SELECT count(*), coalesce(sum(id), 0) FROM tblMyList",
                      "SELECT count(*), coalesce(sum(id), 0) FROM ref"));
  CHECK(same_rows(db, "SELECT count(*) FROM tblMyList WHERE Value = 'short'",
                      "SELECT count(*) FROM ref WHERE Value = 'short'"));
  CHECK(same_rows(db, "SELECT id, Value FROM tblMyList WHERE id = 7", "SELECT id, Value FROM ref WHERE id = 7"));
  /* Ranges and odd argument types, compared with SQLite's own answers. */
  {
    static const char *where[] = {
      "id BETWEEN 10 AND 20", "id > 5.5 AND id <= 30", "id < 4", "id >= 1e3", "id = '5'",
      "id = 5.0", "id = 5.5", "id > 'abc'", "id < 'abc' AND id > 40", "id > NULL",
      "id IN (3, 9, 27)", "rowid BETWEEN 3 AND 8", "id >= -9223372036854775808 AND id < 12",
      "id > 9223372036854775807", "id <= -1e300", "id > 1e300",
    };
    unsigned i;
    for(i=0; i<sizeof(where)/sizeof(where[0]); i++){
      char a[300], b[300];
      snprintf(a, sizeof(a), "SELECT id, Value FROM tblMyList WHERE %s ORDER BY id", where[i]);
      snprintf(b, sizeof(b), "SELECT id, Value FROM ref WHERE %s ORDER BY id", where[i]);
      CHECK(same_rows(db, a, b));
    }
  }
  /* The plan uses the key, and the scan order is the key order. */
  {
    char *p = query_all(db, "EXPLAIN QUERY PLAN SELECT id, Value FROM tblMyList WHERE id = 7");
    CHECK(strstr(p, "VIRTUAL TABLE INDEX 1:")!=0);
    sqlite3_free(p);
    p = query_all(db, "EXPLAIN QUERY PLAN SELECT * FROM tblMyList WHERE id > 3 AND id < 9 ORDER BY id");
    CHECK(strstr(p, "VIRTUAL TABLE INDEX 30:")!=0);     /* > and < */
    CHECK(strstr(p, "ORDER BY")==0);
    sqlite3_free(p);
  }
  CHECK_EQ(query_int(db, "SELECT rowid = id FROM tblMyList WHERE id = (SELECT max(id) FROM tblMyList)"), 1);
  /* Conflicts. */
  {
    long long n = query_int(db, "SELECT count(*) FROM tblMyList");
    long long mx = query_int(db, "SELECT max(id) FROM tblMyList");
    char sql[200];
    snprintf(sql, sizeof(sql), "INSERT INTO tblMyList(id, Value) VALUES(%lld, 'dup')", mx);
    CHECK_EQ(exec(db, sql), SQLITE_CONSTRAINT);
    CHECK(strstr(sqlite3_errmsg(db), "UNIQUE constraint failed")!=0);
    /* A multi-row statement failing half-way is undone as a whole. */
    snprintf(sql, sizeof(sql), "INSERT INTO tblMyList(id, Value) VALUES(%lld, 'a'), (%lld, 'b')", mx+1, mx);
    EXEC_OK(db, "BEGIN");
    CHECK_EQ(exec(db, sql), SQLITE_CONSTRAINT);
    EXEC_OK(db, "INSERT INTO tblMyList(Value) VALUES('kept')");
    EXEC_OK(db, "COMMIT");
    EXEC_OK(db, "INSERT INTO ref(Value) VALUES('kept')");
    CHECK_EQ(query_int(db, "SELECT count(*) FROM tblMyList"), n+1);
    snprintf(sql, sizeof(sql), "SELECT Value = 'kept' FROM tblMyList WHERE id = %lld", mx+1);
    CHECK_EQ(query_int(db, sql), 1);
    CHECK_EQ(sqlite3_last_insert_rowid(db), mx+1);
    CHECK_EQ(exec(db, "INSERT INTO tblMyList(id, Value) VALUES('x', 'y')"), SQLITE_MISMATCH);
    CHECK_EQ(exec(db, "UPDATE tblMyList SET id = 1000000 WHERE id = 1"), SQLITE_OK);
    CHECK_EQ(query_int(db, "SELECT count(*) FROM tblMyList WHERE id = 1000000"),
             query_int(db, "SELECT count(*) FROM ref WHERE id = 1"));
  }
  /* Introspection. */
  {
    char *p = query_all(db, "SELECT lsmvbt_check('tblMyList'), lsmvbt_options('tblMyList')");
    CHECK(strstr(p, "3:ok|")!=0);
    CHECK(strstr(p, "\"sync\":\"full\"")!=0);
    sqlite3_free(p);
  }
  /* One page per single-row commit, seen from SQL. */
  {
    long long p0 = query_int(db, "SELECT json_extract(lsmvbt_stats('tblMyList'), '$.pages_written')");
    long long c0 = query_int(db, "SELECT json_extract(lsmvbt_stats('tblMyList'), '$.commits')");
    EXEC_OK(db, "UPDATE tblMyList SET Value = 'one page' WHERE id = (SELECT max(id) FROM ref)");
    EXEC_OK(db, "UPDATE ref SET Value = 'one page' WHERE id = (SELECT max(id) FROM ref)");
    CHECK_EQ(query_int(db, "SELECT json_extract(lsmvbt_stats('tblMyList'), '$.pages_written')"), p0+1);
    CHECK_EQ(query_int(db, "SELECT json_extract(lsmvbt_stats('tblMyList'), '$.commits')"), c0+1);
  }
  sqlite3_close(db);

  /* Reconnect: the rows are there (xConnect, recovery of a clean file). */
  db = open_db(g_db);
  EXEC_OK(db, "UPDATE ref SET id = 1000000 WHERE id = 1");
  CHECK(same_rows(db, cmpA, cmpB));
  EXEC_OK(db, "ALTER TABLE tblMyList RENAME TO renamed");
  CHECK(!file_exists(path));
  snprintf(path, sizeof(path), "%s-renamed.lsmvbt", g_db);
  CHECK(file_exists(path));
  CHECK(same_rows(db, "SELECT * FROM renamed ORDER BY id", cmpB));
  sqlite3_close(db);
  db = open_db(g_db);
  CHECK(same_rows(db, "SELECT * FROM renamed ORDER BY id", cmpB));
  EXEC_OK(db, "DROP TABLE renamed");
  CHECK(!file_exists(path));
  sqlite3_close(db);
}

static void test_options_and_errors(void){
  sqlite3 *db = open_db(":memory:");
  char sql[800], *p;
  /* A database without a file needs file=. */
  CHECK_EQ(exec(db, "CREATE VIRTUAL TABLE t USING lsmvbt()"), SQLITE_ERROR);
  CHECK(strstr(sqlite3_errmsg(db), "file=")!=0);
  snprintf(sql, sizeof(sql), "CREATE VIRTUAL TABLE t USING lsmvbt(file='%s/mem.lsmvbt', sync=normal, "
           "lazy_split=off, reserve=0, lazy_gc=off, gc_period=8, embed_metadata=off, redistribute=on, "
           "page_size=8192, cache_pages=100, prealloc='64K')", g_dir);
  EXEC_OK(db, sql);
  p = query_all(db, "SELECT lsmvbt_options('t')");
  CHECK(strstr(p, "\"sync\":\"normal\",\"lazy_split\":0,\"reserve\":0,\"lazy_gc\":0,\"gc_period\":8,"
                  "\"embed_metadata\":0,\"redistribute\":1,\"page_size\":8192,\"cache_pages\":100,"
                  "\"prealloc\":65536")!=0);
  sqlite3_free(p);
  /* The default columns: (key INTEGER PRIMARY KEY, value). */
  EXEC_OK(db, "INSERT INTO t(value) VALUES(1.5), (x'00ff'), (NULL), ('txt'), (42)");
  CHECK(same_rows(db, "SELECT key, value, typeof(value) FROM t",
                  "VALUES(1, 1.5, 'real'), (2, x'00ff', 'blob'), (3, NULL, 'null'), (4, 'txt', 'text'), (5, 42, 'integer')"));
  /* Too large a row; a bad option; an unknown argument is a column. */
  CHECK_EQ(exec(db, "INSERT INTO t(value) VALUES(zeroblob(100000))"), SQLITE_TOOBIG);
  CHECK_EQ(exec(db, "CREATE VIRTUAL TABLE u USING lsmvbt(file='/nonexistent-dir/x', sync=sometimes)"), SQLITE_ERROR);
  CHECK(strstr(sqlite3_errmsg(db), "sync=sometimes")!=0);
  snprintf(sql, sizeof(sql), "CREATE VIRTUAL TABLE w USING lsmvbt(file='%s/w.lsmvbt', a, b INTEGER PRIMARY KEY, c)", g_dir);
  EXEC_OK(db, sql);
  EXEC_OK(db, "INSERT INTO w(a, c) VALUES('x', 'z')");
  CHECK(same_rows(db, "SELECT a, b, c, rowid FROM w", "VALUES('x', 1, 'z', 1)"));
  /* Tables without a key column: the rowid is the key. */
  snprintf(sql, sizeof(sql), "CREATE VIRTUAL TABLE nk USING lsmvbt(file='%s/nk.lsmvbt', a, b)", g_dir);
  EXEC_OK(db, sql);
  EXEC_OK(db, "INSERT INTO nk VALUES(1, 2), (3, 4)");
  EXEC_OK(db, "INSERT INTO nk(rowid, a) VALUES(10, 5)");
  CHECK(same_rows(db, "SELECT rowid, a, b FROM nk WHERE rowid >= 2", "VALUES(2, 3, 4), (10, 5, NULL)"));
  /* The same file cannot be open twice. */
  snprintf(sql, sizeof(sql), "CREATE VIRTUAL TABLE t2 USING lsmvbt(file='%s/w.lsmvbt')", g_dir);
  CHECK(exec(db, sql)!=SQLITE_OK);
  EXEC_OK(db, "DROP TABLE t");
  EXEC_OK(db, "DROP TABLE w");
  EXEC_OK(db, "DROP TABLE nk");
  sqlite3_close(db);
}

/* A failing fdatasync in the second table's xSync: SQLite rolls back both;
** the first, already durable, is restored by a compensating commit. */
static int g_nsync, g_fail_at = -1;
static int (*g_real_fdatasync)(int);
static int failing_fdatasync(int fd){
  if( g_nsync++==g_fail_at ){ errno = EIO; return -1; }
  return g_real_fdatasync(fd);
}

static void test_two_tables_failed_sync(void){
  sqlite3 *db = open_db(g_db);
  sqlite3_vfs *vfs = sqlite3_vfs_find("lsmvbt");
  CHECK(vfs!=0);
  if( vfs==0 ){ sqlite3_close(db); return; }
  g_real_fdatasync = (int(*)(int))vfs->xGetSystemCall(vfs, "lsmvbt_fdatasync");
  CHECK(g_real_fdatasync!=0);
  EXEC_OK(db, "CREATE VIRTUAL TABLE a USING lsmvbt(id INTEGER PRIMARY KEY, v, prealloc=0)");
  EXEC_OK(db, "CREATE VIRTUAL TABLE b USING lsmvbt(id INTEGER PRIMARY KEY, v, prealloc=0)");
  EXEC_OK(db, "INSERT INTO a VALUES(1, 'a1')");
  EXEC_OK(db, "INSERT INTO b VALUES(1, 'b1')");
  CHECK_EQ(vfs->xSetSystemCall(vfs, "lsmvbt_fdatasync", (sqlite3_syscall_ptr)failing_fdatasync), SQLITE_OK);
  g_nsync = 0;
  g_fail_at = 1;           /* a's xSync is call 0, b's is call 1 */
  EXEC_OK(db, "BEGIN");
  EXEC_OK(db, "INSERT INTO a VALUES(2, 'a2')");
  EXEC_OK(db, "INSERT INTO b VALUES(2, 'b2')");
  CHECK(exec(db, "COMMIT")!=SQLITE_OK);
  if( sqlite3_get_autocommit(db)==0 ) exec(db, "ROLLBACK");
  g_fail_at = -1;
  CHECK_EQ(query_int(db, "SELECT count(*) FROM a"), 1);
  CHECK_EQ(query_int(db, "SELECT count(*) FROM b"), 1);
  CHECK_EQ(query_int(db, "SELECT json_extract(lsmvbt_stats('a'), '$.compensations')"), 1);
  CHECK_EQ(vfs->xSetSystemCall(vfs, "lsmvbt_fdatasync", 0), SQLITE_OK);
  EXEC_OK(db, "INSERT INTO a VALUES(3, 'a3')");
  sqlite3_close(db);
  db = open_db(g_db);
  CHECK(same_rows(db, "SELECT * FROM a", "VALUES(1, 'a1'), (3, 'a3')"));
  CHECK(same_rows(db, "SELECT * FROM b", "VALUES(1, 'b1')"));
  EXEC_OK(db, "DROP TABLE a");
  EXEC_OK(db, "DROP TABLE b");
  sqlite3_close(db);
}

/* A table created inside a transaction gets no xBegin (SQLite adds it to the
** transaction at CREATE): writing it in the same transaction must work,
** commit with the rest, and roll back with the rest. */
static void test_create_and_fill_in_one_transaction(void){
  sqlite3 *db = open_db(g_db);
  EXEC_OK(db, "BEGIN");
  EXEC_OK(db, "CREATE VIRTUAL TABLE c1 USING lsmvbt(id INTEGER PRIMARY KEY, v, prealloc=0)");
  EXEC_OK(db, "INSERT INTO c1 VALUES(1, 'x'), (2, 'y')");
  EXEC_OK(db, "CREATE VIRTUAL TABLE c2 USING lsmvbt(id INTEGER PRIMARY KEY, v, prealloc=0)");
  EXEC_OK(db, "INSERT INTO c2 VALUES(1, 'z')");
  EXEC_OK(db, "COMMIT");
  EXEC_OK(db, "BEGIN");
  EXEC_OK(db, "CREATE VIRTUAL TABLE c3 USING lsmvbt(id INTEGER PRIMARY KEY, v, prealloc=0)");
  EXEC_OK(db, "INSERT INTO c3 VALUES(1, 'gone')");
  EXEC_OK(db, "INSERT INTO c1 VALUES(3, 'gone')");
  EXEC_OK(db, "ROLLBACK");
  sqlite3_close(db);
  db = open_db(g_db);
  CHECK(same_rows(db, "SELECT * FROM c1", "VALUES(1, 'x'), (2, 'y')"));
  CHECK(same_rows(db, "SELECT * FROM c2", "VALUES(1, 'z')"));
  CHECK_EQ(query_int(db, "SELECT count(*) FROM sqlite_master WHERE name = 'c3'"), 0);
  EXEC_OK(db, "DROP TABLE c1");
  EXEC_OK(db, "DROP TABLE c2");
  sqlite3_close(db);
}

int main(int argc, char **argv){
  const char *base = getenv("TMPDIR");
  if( argc<2 ){ fprintf(stderr, "usage: %s lsmvbt.so\n", argv[0]); return 2; }
  g_ext = argv[1];
  if( !base || !*base ) base = access("/dev/shm", W_OK)==0 ? "/dev/shm" : "/tmp";
  snprintf(g_dir, sizeof(g_dir), "%s/lsmvbt-vtab-%d", base, (int)getpid());
  mkdir(g_dir, 0755);
  snprintf(g_db, sizeof(g_db), "%s/bench.db", g_dir);
  fprintf(stderr, "SQLite %s\n", sqlite3_libversion());
  test_bench_shape();
  test_options_and_errors();
  test_two_tables_failed_sync();
  test_create_and_fill_in_one_transaction();
  unlink(g_db);
  {
    char p[600];
    snprintf(p, sizeof(p), "%s/mem.lsmvbt", g_dir); unlink(p);
    snprintf(p, sizeof(p), "%s/w.lsmvbt", g_dir); unlink(p);
    snprintf(p, sizeof(p), "%s/nk.lsmvbt", g_dir); unlink(p);
  }
  rmdir(g_dir);
  fprintf(stderr, "%s: %d failure(s)\n", __FILE__, g_failures);
  return g_failures ? 1 : 0;
}
