/*
** test_layout.h — which layout a C test's waldio VFS gives new logs.
**
** The tests of the log's machinery (group commit, processes, faults, OOM,
** the wal-index) hold for every layout; ctest runs each of them once per
** layout it names (tests/c/CMakeLists.txt), choosing with
** WALDIO_TEST_LAYOUT=standard|embed|pad4k|pad8k. Unset: `dflt`, the
** layout the test was written against.
*/
#ifndef WALDIO_TEST_LAYOUT_H
#define WALDIO_TEST_LAYOUT_H

#include "options.h"
#include "waldio.h"

#include <stdlib.h>

static int test_layout(int dflt){
  const char *z = getenv("WALDIO_TEST_LAYOUT");
  int layout = dflt;
  if( z && *z && waldio_parse_layout(z, &layout) ) exit(2);
  return layout;
}

/* waldio_register() with the defaults but for the test's layout. */
static int test_register(const char *zName, int makeDefault, int dflt){
  waldio_options o;
  waldio_options_default(&o);
  o.layout = test_layout(dflt);
  return waldio_register(zName, makeDefault, &o);
}

#endif
