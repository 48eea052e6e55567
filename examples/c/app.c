/*
** app.c — the smallest C program that uses waldio: register it once as the
** default VFS, then use SQLite as usual. Build it against an installed
** waldio (README, "Use it from C"):
**
**   cc app.c $(pkg-config --cflags --libs waldio) -o app
**   cmake -S . -B build -DCMAKE_PREFIX_PATH=<prefix> && cmake --build build
**
** Prints the VFS the database was opened with and waldio's status of it.
*/
#include <sqlite3.h>
#include <stdio.h>
#include <waldio.h>

static int fail(sqlite3 *db, const char *what){
  char msg[512];
  waldio_last_error(msg, sizeof(msg));
  fprintf(stderr, "%s: %s%s%s\n", what, db ? sqlite3_errmsg(db) : "error",
          msg[0] ? "; waldio: " : "", msg);
  sqlite3_close(db);
  return 1;
}

int main(int argc, char **argv){
  const char *path = argc > 1 ? argv[1] : "app.db";
  sqlite3 *db = 0;
  sqlite3_stmt *stmt;
  const char *vfs = 0;

  if( waldio_register(NULL, 1, NULL) != SQLITE_OK ) return fail(0, "waldio_register");
  if( sqlite3_open(path, &db) != SQLITE_OK ) return fail(db, "open");
  if( sqlite3_exec(db, "PRAGMA journal_mode=WAL;"
                       "CREATE TABLE IF NOT EXISTS kv(k INTEGER PRIMARY KEY, v TEXT);"
                       "INSERT INTO kv(v) VALUES ('hello');", 0, 0, 0) != SQLITE_OK ){
    return fail(db, "write");
  }
  sqlite3_file_control(db, "main", SQLITE_FCNTL_VFSNAME, &vfs);
  printf("vfs: %s\n", vfs ? vfs : "?");
  sqlite3_free((void*)vfs);
  if( sqlite3_prepare_v2(db, "PRAGMA waldio", -1, &stmt, 0) != SQLITE_OK ) return fail(db, "status");
  if( sqlite3_step(stmt) == SQLITE_ROW ) printf("%s\n", sqlite3_column_text(stmt, 0));
  sqlite3_finalize(stmt);
  return sqlite3_close(db) == SQLITE_OK ? 0 : 1;
}
