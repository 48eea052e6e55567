/*
** test_extension.c — waldio.so loaded as an extension into the system
** SQLite, as a C program or the sqlite3 shell would (this binary does not
** link libwaldio). argv[1]: path of waldio.so.
*/
#include "check.h"
#include "test_util.h"

int main(int argc, char **argv){
  char zDir[300], zDb[400], buf[1024];
  sqlite3 *db = 0;
  char *zErr = 0;
  if( argc<2 ){ fprintf(stderr, "usage: %s waldio.so\n", argv[0]); return 2; }
  test_dir(zDir, sizeof(zDir), "ext");
  snprintf(zDb, sizeof(zDb), "%s/ext.db", zDir);

  CHECK_EQ(sqlite3_open(":memory:", &db), SQLITE_OK);
  sqlite3_enable_load_extension(db, 1);
  CHECK_EQ(sqlite3_load_extension(db, argv[1], 0, &zErr), SQLITE_OK);
  if( zErr ){ fprintf(stderr, "%s\n", zErr); sqlite3_free(zErr); }
  query_text(db, "SELECT waldio_last_error()", buf, sizeof(buf));  /* exists */
  sqlite3_close(db);
  /* The VFS outlived the connection that loaded it, and is the default. */
  CHECK(sqlite3_vfs_find("waldio")!=0);
  CHECK(sqlite3_vfs_find(0)==sqlite3_vfs_find("waldio"));

  CHECK_EQ(sqlite3_open(zDb, &db), SQLITE_OK);
  CHECK_EQ(sqlite3_exec(db, "PRAGMA journal_mode=WAL; CREATE TABLE t(x);"
                        "INSERT INTO t VALUES(1),(2),(3);", 0, 0, 0), SQLITE_OK);
  query_text(db, "PRAGMA waldio", buf, sizeof(buf));
  CHECK(strstr(buf, "\"wal_open\":true")!=0);
  CHECK_EQ(query_int(db, "SELECT sum(x) FROM t"), 6);
  sqlite3_close(db);
  remove_db(zDb);
  rmdir(zDir);
  return CHECK_DONE();
}
