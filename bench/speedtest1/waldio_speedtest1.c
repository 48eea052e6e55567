/*
** waldio_speedtest1.c — the only code waldio adds to SQLite's own benchmark,
** test/speedtest1.c of SQLite 3.40.1, which build.sh compiles unchanged with
** the amalgamation and -DSQLITE_EXTRA_INIT=waldio_speedtest1_init.
**
** sqlite3_initialize() calls waldio_speedtest1_init() once, before speedtest1
** opens its database. What it does is chosen at run time, so one binary is
** both the stock and the waldio side of a comparison (same code, same
** compiler, same layout in memory):
**
**   WALDIO_SPEEDTEST1_VFS          waldio: register libwaldio as the default
**                                  VFS (waldio_register(0, 1, &defaults));
**                                  stock: register nothing (SQLite's unix VFS).
**                                  Required: a run never guesses its side.
**   WALDIO_SPEEDTEST1_SYNCHRONOUS  unset: leave synchronous alone (speedtest1
**                                  without --nosync runs FULL, SQLite's
**                                  default; with --nosync, OFF).
**                                  off | normal | full: run PRAGMA
**                                  synchronous=<value> on every new connection
**                                  (an auto-extension), before speedtest1's own
**                                  PRAGMAs. speedtest1 has no option for
**                                  NORMAL; an explicit PRAGMA is what an
**                                  application does, and SQLite then keeps it
**                                  when the database enters WAL mode (it would
**                                  otherwise apply SQLITE_DEFAULT_WAL_SYNCHRONOUS).
**   WALDIO_SPEEDTEST1_REPORT       a file: when a connection closes, append one
**                                  JSON line read on it just before the close:
**                                  its VFS, journal_mode, synchronous,
**                                  page_size, page_count, reserved bytes,
**                                  PRAGMA waldio and PRAGMA waldio_stats
**                                  (waldio only) and /proc/self/io. The
**                                  harness checks from it that the run was
**                                  what it asked for.
** A value that is not understood ends the process with status 2 and a
** message on stderr.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sqlite3.h"
#include "waldio.h"

static const char *zSyncPragma = 0;   /* "PRAGMA synchronous=..." or 0 */
static const char *zReportPath = 0;   /* WALDIO_SPEEDTEST1_REPORT or 0 */

static void die(const char *zVar, const char *zValue, const char *zAccepted){
  fprintf(stderr, "waldio_speedtest1: %s=%s is not understood (accepted: %s)\n",
          zVar, zValue ? zValue : "(unset)", zAccepted);
  exit(2);
}

/* The first column of the first row of zSql as a new string, or 0. */
static char *one_text(sqlite3 *db, const char *zSql){
  sqlite3_stmt *p = 0;
  char *z = 0;
  if( sqlite3_prepare_v2(db, zSql, -1, &p, 0)==SQLITE_OK
   && sqlite3_step(p)==SQLITE_ROW
   && sqlite3_column_type(p, 0)!=SQLITE_NULL ){
    z = sqlite3_mprintf("%s", (const char*)sqlite3_column_text(p, 0));
  }
  sqlite3_finalize(p);
  return z;
}

static char *read_proc_io(void){
  char buf[2048];
  size_t n;
  FILE *f = fopen("/proc/self/io", "r");
  if( f==0 ) return 0;
  n = fread(buf, 1, sizeof(buf)-1, f);
  fclose(f);
  buf[n] = 0;
  return sqlite3_mprintf("%s", buf);
}

/* SQLITE_TRACE_CLOSE: the connection is about to close and still usable. */
static int on_close(unsigned mask, void *pCtx, void *pDb, void *pUnused){
  sqlite3 *db = (sqlite3*)pDb;
  char *zVfs = 0, *zWaldio = 0, *zStats = 0, *zIo = 0, *zJson = 0;
  char *zJm, *zSy, *zPs, *zPc;
  int nReserve = -1;
  sqlite3_stmt *p = 0;
  FILE *f;
  (void)pCtx; (void)pUnused;
  if( mask!=SQLITE_TRACE_CLOSE || zReportPath==0 ) return 0;
  sqlite3_file_control(db, "main", SQLITE_FCNTL_VFSNAME, &zVfs);
  sqlite3_file_control(db, "main", SQLITE_FCNTL_RESERVE_BYTES, &nReserve);
  if( zVfs && strncmp(zVfs, "waldio", 6)==0 ){
    zWaldio = one_text(db, "PRAGMA waldio");
    zStats = one_text(db, "PRAGMA waldio_stats");
  }
  zIo = read_proc_io();
  zJm = one_text(db, "PRAGMA journal_mode");
  zSy = one_text(db, "PRAGMA synchronous");
  zPs = one_text(db, "PRAGMA page_size");
  zPc = one_text(db, "PRAGMA page_count");
  /* SQLite's JSON functions do the quoting. */
  if( sqlite3_prepare_v2(db,
        "SELECT json_object('vfs', ?1, 'journal_mode', ?2, 'synchronous', ?3,"
        " 'page_size', ?4, 'page_count', ?5, 'reserve_bytes', ?6,"
        " 'sqlite_version', sqlite_version(), 'waldio', json(?7),"
        " 'waldio_stats', json(?8), 'proc_io', ?9, 'sync_pragma', ?10)",
        -1, &p, 0)==SQLITE_OK ){
    sqlite3_bind_text(p, 1, zVfs, -1, SQLITE_STATIC);
    sqlite3_bind_text(p, 2, zJm, -1, SQLITE_STATIC);
    sqlite3_bind_text(p, 3, zSy, -1, SQLITE_STATIC);
    sqlite3_bind_text(p, 4, zPs, -1, SQLITE_STATIC);
    sqlite3_bind_text(p, 5, zPc, -1, SQLITE_STATIC);
    sqlite3_bind_int(p, 6, nReserve);
    sqlite3_bind_text(p, 7, zWaldio, -1, SQLITE_STATIC);
    sqlite3_bind_text(p, 8, zStats, -1, SQLITE_STATIC);
    sqlite3_bind_text(p, 9, zIo, -1, SQLITE_STATIC);
    sqlite3_bind_text(p, 10, zSyncPragma, -1, SQLITE_STATIC);
    if( sqlite3_step(p)==SQLITE_ROW ){
      zJson = sqlite3_mprintf("%s", (const char*)sqlite3_column_text(p, 0));
    }
  }
  sqlite3_finalize(p);
  f = fopen(zReportPath, "a");
  if( f ){
    fprintf(f, "%s\n", zJson ? zJson : "{\"error\":\"report query failed\"}");
    fclose(f);
  }
  sqlite3_free(zVfs);
  sqlite3_free(zWaldio);
  sqlite3_free(zStats);
  sqlite3_free(zIo);
  sqlite3_free(zJson);
  sqlite3_free(zJm);
  sqlite3_free(zSy);
  sqlite3_free(zPs);
  sqlite3_free(zPc);
  return 0;
}

/* Auto-extension: runs inside sqlite3_open*() on every new connection. */
static int on_open(sqlite3 *db, char **pzErr, const void *pApi){
  (void)pApi;
  if( zSyncPragma ){
    int rc = sqlite3_exec(db, zSyncPragma, 0, 0, pzErr);
    if( rc!=SQLITE_OK ) return rc;
  }
  if( zReportPath ){
    sqlite3_trace_v2(db, SQLITE_TRACE_CLOSE, on_close, 0);
  }
  return SQLITE_OK;
}

int waldio_speedtest1_init(const char *zUnused){
  const char *zVfs = getenv("WALDIO_SPEEDTEST1_VFS");
  const char *zSync = getenv("WALDIO_SPEEDTEST1_SYNCHRONOUS");
  int rc = SQLITE_OK;
  (void)zUnused;
  zReportPath = getenv("WALDIO_SPEEDTEST1_REPORT");
  if( zReportPath && zReportPath[0]==0 ) zReportPath = 0;
  if( zSync && zSync[0] ){
    if( strcmp(zSync, "off")==0 ) zSyncPragma = "PRAGMA synchronous=OFF";
    else if( strcmp(zSync, "normal")==0 ) zSyncPragma = "PRAGMA synchronous=NORMAL";
    else if( strcmp(zSync, "full")==0 ) zSyncPragma = "PRAGMA synchronous=FULL";
    else die("WALDIO_SPEEDTEST1_SYNCHRONOUS", zSync, "off, normal, full");
  }
  if( zVfs==0 || (strcmp(zVfs, "stock")!=0 && strcmp(zVfs, "waldio")!=0) ){
    die("WALDIO_SPEEDTEST1_VFS", zVfs, "stock, waldio");
  }
  if( strcmp(zVfs, "waldio")==0 ){
    waldio_options o;
    waldio_options_default(&o);
    rc = waldio_register(0, 1, &o);
    if( rc!=SQLITE_OK ){
      char zMsg[512];
      waldio_last_error(zMsg, sizeof(zMsg));
      fprintf(stderr, "waldio_speedtest1: waldio_register failed (%d): %s\n", rc, zMsg);
      exit(2);
    }
  }
  if( zSyncPragma || zReportPath ){
    rc = sqlite3_auto_extension((void(*)(void))on_open);
  }
  return rc;
}
