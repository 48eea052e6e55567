/*
** waldio_init.c — registers libwaldio as the default VFS inside SQLite's
** own test harness (testfixture), so that SQLite's TCL test suite runs every
** database through waldio.
**
** build.sh compiles it into testfixture with -DSQLITE_EXTRA_INIT=
** waldio_test_init: sqlite3_initialize() then calls waldio_test_init() each
** time it initializes (tester.tcl runs sqlite3_shutdown + sqlite3_initialize
** at start-up, so registration happens again after every re-initialization).
**
** Environment variables (read at every call):
**   WALDIO_TEST_VFS     waldio (default) | stock: stock does not register
**                       waldio at all, so the same binary is stock SQLite
**   WALDIO_TEST_LAYOUT  embed | pad4k | pad8k (unset: waldio's default)
**   WALDIO_TEST_IO      direct | auto | buffered (unset: waldio's default)
**   WALDIO_TEST_GROUP   off | async | durable (unset: waldio's default)
** A value that is not understood ends the process with status 2 and a
** message: a run must never silently fall back to other options.
*/
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sqlite3.h"
#include "waldio.h"

struct name_value { const char *zName; int value; };

static const struct name_value aLayout[] = {
  { "embed", WALDIO_LAYOUT_EMBED },
  { "pad4k", WALDIO_LAYOUT_PAD4K },
  { "pad8k", WALDIO_LAYOUT_PAD8K },
#ifdef WALDIO_LAYOUT_AUTO
  { "auto",  WALDIO_LAYOUT_AUTO },
#endif
  { 0, 0 }
};
static const struct name_value aIo[] = {
  { "direct", WALDIO_IO_DIRECT }, { "auto", WALDIO_IO_AUTO },
  { "buffered", WALDIO_IO_BUFFERED }, { 0, 0 }
};
static const struct name_value aGroup[] = {
  { "off", WALDIO_GROUP_OFF }, { "async", WALDIO_GROUP_ASYNC },
  { "durable", WALDIO_GROUP_DURABLE }, { 0, 0 }
};

/* Sets *pOut from the environment variable zVar if it is set; exits on a
** value not in aMap. */
static void option_from_env(const char *zVar, const struct name_value *aMap,
                            int *pOut){
  const char *z = getenv(zVar);
  int i;
  if( z==0 || z[0]==0 ) return;
  for(i=0; aMap[i].zName; i++){
    if( strcmp(z, aMap[i].zName)==0 ){ *pOut = aMap[i].value; return; }
  }
  fprintf(stderr, "waldio_test_init: %s=%s is not understood\n", zVar, z);
  exit(2);
}

int waldio_test_init(const char *zUnused){
  const char *zVfs = getenv("WALDIO_TEST_VFS");
  waldio_options o;
  int rc;
  (void)zUnused;
  if( zVfs && strcmp(zVfs, "stock")==0 ) return SQLITE_OK;
  if( zVfs && zVfs[0] && strcmp(zVfs, "waldio")!=0 ){
    fprintf(stderr, "waldio_test_init: WALDIO_TEST_VFS=%s is not understood\n",
            zVfs);
    exit(2);
  }
  waldio_options_default(&o);
  option_from_env("WALDIO_TEST_LAYOUT", aLayout, &o.layout);
  option_from_env("WALDIO_TEST_IO", aIo, &o.io);
  option_from_env("WALDIO_TEST_GROUP", aGroup, &o.group);
  rc = waldio_register(0, 1, &o);
  if( rc!=SQLITE_OK ){
    char zMsg[512];
    waldio_last_error(zMsg, sizeof(zMsg));
    fprintf(stderr, "waldio_test_init: waldio_register failed (%d): %s\n",
            rc, zMsg);
  }
  return rc;
}
