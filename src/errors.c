/*
** errors.c — the process-wide "last error" of libwaldio, and where its
** messages go.
**
** This is the one piece of process state besides the registered VFS: like
** errno or sqlite3_log, a failure inside a VFS method has no other way to
** reach the application in words (SQLite only passes result codes up).
** Guarded by a mutex because background flushers report errors too.
**
** Every message goes to sqlite3_log() (an application's SQLITE_CONFIG_LOG
** callback sees it) and, with WALDIO_VERBOSE=1 in the environment (read
** once), to stderr as well: a program that installs no log callback -- the
** sqlite3 shell, most scripts -- then shows why waldio refused or failed
** (`waldio run -v` sets it; docs/usage.md).
*/
#include "errors.h"
#include "sqlite_api.h"
#include "waldio.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static pthread_mutex_t g_errMsgMutex = PTHREAD_MUTEX_INITIALIZER;
static char g_errMsg[1024];
static int g_errCode;
static pthread_once_t g_verboseOnce = PTHREAD_ONCE_INIT;
static int g_verbose;

static void read_verbose(void){
  const char *z = getenv("WALDIO_VERBOSE");
  g_verbose = z && z[0] && strcmp(z, "0")!=0;
}

int waldio_verbose(void){
  pthread_once(&g_verboseOnce, read_verbose);
  return g_verbose;
}

/* To sqlite3_log, and to stderr when verbose. */
static void report(int rc, const char *zKind, const char *zMsg){
  sqlite3_log(rc, "waldio: %s", zMsg);
  if( waldio_verbose() ) fprintf(stderr, "waldio: %s%s\n", zKind, zMsg);
}

int waldio_error(int rc, const char *zFormat, ...){
  char msg[sizeof(g_errMsg)];
  va_list ap;
  va_start(ap, zFormat);
  vsnprintf(msg, sizeof(msg), zFormat, ap);
  va_end(ap);
  pthread_mutex_lock(&g_errMsgMutex);
  memcpy(g_errMsg, msg, sizeof(msg));
  g_errCode = rc;
  pthread_mutex_unlock(&g_errMsgMutex);
  report(rc, "", msg);
  return rc;
}

void waldio_warning(const char *zFormat, ...){
  char msg[sizeof(g_errMsg)];
  va_list ap;
  va_start(ap, zFormat);
  vsnprintf(msg, sizeof(msg), zFormat, ap);
  va_end(ap);
  report(SQLITE_WARNING, "warning: ", msg);
}

int waldio_errno(int rc, int err, const char *zWhat, const char *zPath){
  return waldio_error(rc, "%s %s: %s", zWhat, zPath ? zPath : "", strerror(err));
}

int waldio_last_error(char *buf, size_t n){
  int rc;
  pthread_mutex_lock(&g_errMsgMutex);
  rc = g_errCode;
  if( n>0 ){
    snprintf(buf, n, "%s", g_errMsg);
  }
  pthread_mutex_unlock(&g_errMsgMutex);
  return rc;
}
