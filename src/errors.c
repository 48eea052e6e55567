/*
** errors.c — the process-wide "last error" of libwaldio.
**
** This is the one piece of process state besides the registered VFS: like
** errno or sqlite3_log, a failure inside a VFS method has no other way to
** reach the application in words (SQLite only passes result codes up).
** Guarded by a mutex because background flushers report errors too.
*/
#include "errors.h"
#include "sqlite_api.h"
#include "waldio.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static pthread_mutex_t g_errMutex = PTHREAD_MUTEX_INITIALIZER;
static char g_errMsg[1024];
static int g_errCode;

int waldio_error(int rc, const char *zFormat, ...){
  char msg[sizeof(g_errMsg)];
  va_list ap;
  va_start(ap, zFormat);
  vsnprintf(msg, sizeof(msg), zFormat, ap);
  va_end(ap);
  pthread_mutex_lock(&g_errMutex);
  memcpy(g_errMsg, msg, sizeof(msg));
  g_errCode = rc;
  pthread_mutex_unlock(&g_errMutex);
  sqlite3_log(rc, "waldio: %s", msg);
  return rc;
}

int waldio_errno(int rc, int err, const char *zWhat, const char *zPath){
  return waldio_error(rc, "%s %s: %s", zWhat, zPath ? zPath : "", strerror(err));
}

int waldio_last_error(char *buf, size_t n){
  int rc;
  pthread_mutex_lock(&g_errMutex);
  rc = g_errCode;
  if( n>0 ){
    snprintf(buf, n, "%s", g_errMsg);
  }
  pthread_mutex_unlock(&g_errMutex);
  return rc;
}
