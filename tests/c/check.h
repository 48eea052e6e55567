/*
** check.h — the assertion macros of waldio's C tests: a failed CHECK prints
** where and what, counts, and the test's main() returns non-zero.
*/
#ifndef WALDIO_CHECK_H
#define WALDIO_CHECK_H
#include <stdio.h>

static int g_failures;

#define CHECK(cond) do{ if(!(cond)){ g_failures++; \
  fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); } }while(0)
#define CHECK_EQ(a, b) do{ long long a_ = (long long)(a), b_ = (long long)(b); \
  if( a_!=b_ ){ g_failures++; fprintf(stderr, "%s:%d: %s == %lld, expected %s == %lld\n", \
  __FILE__, __LINE__, #a, a_, #b, b_); } }while(0)
#define CHECK_DONE() (fprintf(stderr, "%s: %d failure(s)\n", __FILE__, g_failures), \
  g_failures ? 1 : 0)

#endif
