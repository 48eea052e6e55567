/*
** preload.c — waldio for unmodified programs (libwaldio_preload.so).
**
**   LD_PRELOAD=libwaldio_preload.so sqlite3 app.db     (what `waldio run` does)
**   WALDIO_LAYOUT=pad4k WALDIO_SYNC=persistent LD_PRELOAD=... ./app
**
** Built from libwaldio's sources in extension mode (WALDIO_EXTENSION: SQLite
** is reached only through the routine table of the SQLite that is in the
** process) plus this file. The library interposes the three functions with
** which every program opens a database: sqlite3_open, sqlite3_open16 and
** sqlite3_open_v2. The first call registers the VFS "waldio" as the default
** VFS of the SQLite that the call was meant for, then forwards the call; every
** later call only forwards. So:
**
**   - a program that never calls SQLite runs exactly as without the library:
**     nothing here runs at load time except a check for an SQLite that the
**     program carries inside its own executable (below), and the library
**     does not link libsqlite3;
**   - registration waits for the first open, not for the library's load,
**     because a program may call sqlite3_config() (threading mode, logging,
**     URI filenames) only before SQLite initializes, and registering a VFS
**     initializes it;
**   - a program that loads libsqlite3 late (Python's sqlite3 module is
**     dlopen()ed with RTLD_LOCAL, out of reach of RTLD_NEXT) is found by the
**     shared object that holds the real function: RTLD_NEXT first, then
**     the already loaded libsqlite3.so.0.
**
** The routine table is handed over the way SQLite hands it to extensions: a
** one-shot auto-extension runs while a private ":memory:" connection opens,
** calls waldio_register() with the options below, and is cancelled again.
**
** Options, one environment variable per waldio_options field (waldio.h),
** parsed by the same functions as the URI parameters; URI parameters still
** override them per database:
**   WALDIO_LAYOUT, WALDIO_SYNC, WALDIO_IO, WALDIO_PREALLOC, WALDIO_CACHE,
**   WALDIO_FLUSH_MS, WALDIO_GROUP, WALDIO_GROUP_BYTES, WALDIO_GROUP_MS
** A bad value is reported on stderr and nothing is registered: the program
** then runs on stock SQLite, and says so.
** WALDIO_VERBOSE=1 reports the registration on stderr, and every refusal or
** failure of libwaldio with its reason (errors.c); WALDIO_PRELOAD_VERBOSE=1,
** the registration only.
**
** An SQLite linked statically into the executable cannot be reached: the
** executable's own symbols come before any preloaded library. When such an
** SQLite exports its symbols this file sees it at load time and says so;
** `waldio run` also looks into the executable before starting it.
*/
#include "sqlite_api.h"
SQLITE_EXTENSION_INIT1

#include "waldio.h"
#include "errors.h"
#include "options.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* sqlite3ext.h maps these names onto the routine table; here they are the
** functions this library defines. */
#undef sqlite3_open
#undef sqlite3_open16
#undef sqlite3_open_v2

#define EXPORT __attribute__((visibility("default")))

typedef int (*open_v2_fn)(const char*, sqlite3**, int, const char*);
typedef int (*open_fn)(const char*, sqlite3**);
typedef int (*open16_fn)(const void*, sqlite3**);
typedef int (*close_fn)(sqlite3*);
typedef int (*autoext_fn)(void(*)(void));
typedef const char *(*libversion_fn)(void);
typedef int (*libversion_number_fn)(void);

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static waldio_options g_opts;
static int g_rc = -1;                 /* result of waldio_register() */

/* WALDIO_VERBOSE (errors.c: every message on stderr too) or the older
** WALDIO_PRELOAD_VERBOSE: also report the registration. */
static int verbose(void){
  const char *z = getenv("WALDIO_PRELOAD_VERBOSE");
  return waldio_verbose() || (z && z[0] && strcmp(z, "0")!=0);
}

static const char *program(void){
  static char zName[256];
  FILE *f;
  if( zName[0] ) return zName;
  f = fopen("/proc/self/comm", "r");
  if( f ){
    if( fgets(zName, sizeof(zName), f) ) zName[strcspn(zName, "\n")] = 0;
    fclose(f);
  }
  if( !zName[0] ) snprintf(zName, sizeof(zName), "this program");
  return zName;
}

/* The real definition of zSym: the next one after this library, else the
** system SQLite already loaded in some private scope. */
static void *real_symbol(const char *zSym){
  void *p = dlsym(RTLD_NEXT, zSym);
  if( !p ){
    void *h = dlopen("libsqlite3.so.0", RTLD_LAZY|RTLD_NOLOAD);
    if( h ){
      p = dlsym(h, zSym);
      dlclose(h);
    }
  }
  return p;
}

/* A symbol of the shared object that defines pFn. */
static void *sibling(void *pFn, const char *zSym){
  Dl_info info;
  void *h, *p = 0;
  if( !dladdr(pFn, &info) || !info.dli_fname ) return 0;
  h = dlopen(info.dli_fname, RTLD_LAZY|RTLD_NOLOAD);
  if( !h ) h = dlopen(NULL, RTLD_LAZY);     /* the executable itself */
  if( h ){
    p = dlsym(h, zSym);
    dlclose(h);
  }
  return p;
}

static int parse_env(void){
  struct { const char *zVar; int (*xInt)(const char*, int*); int *pInt;
           int (*xBytes)(const char*, long long*); long long *pBytes;
           const char *zExpect; } a[] = {
    { "WALDIO_LAYOUT", waldio_parse_layout, &g_opts.layout, 0, 0,
      "auto, embed, pad4k, pad8k or standard" },
    { "WALDIO_SYNC", waldio_parse_sync, &g_opts.sync, 0, 0,
      "auto, persistent or ns" },
    { "WALDIO_IO", waldio_parse_io, &g_opts.io, 0, 0,
      "direct, auto or buffered" },
    { "WALDIO_PREALLOC", 0, 0, waldio_parse_bytes, &g_opts.prealloc_bytes,
      "a size >= 64K, e.g. 4M" },
    { "WALDIO_CACHE", 0, 0, waldio_parse_bytes, &g_opts.cache_bytes,
      "a size, e.g. 4M, or 0" },
    { "WALDIO_FLUSH_MS", waldio_parse_ms, &g_opts.flush_ms, 0, 0,
      "milliseconds between 1 and 60000" },
    { "WALDIO_GROUP", waldio_parse_group, &g_opts.group, 0, 0,
      "off, async, durable, strict or auto" },
    { "WALDIO_GROUP_BYTES", 0, 0, waldio_parse_bytes, &g_opts.group_bytes,
      "a size between 4K and 16M" },
    { "WALDIO_GROUP_MS", waldio_parse_ms, &g_opts.group_ms, 0, 0,
      "milliseconds between 1 and 60000" },
  };
  size_t i;
  waldio_options_default(&g_opts);
  for(i=0; i<sizeof(a)/sizeof(a[0]); i++){
    const char *z = getenv(a[i].zVar);
    int bad;
    if( !z || !z[0] ) continue;
    bad = a[i].xInt ? a[i].xInt(z, a[i].pInt) : a[i].xBytes(z, a[i].pBytes);
    if( bad ){
      fprintf(stderr, "waldio: %s=%s: expected %s; %s runs on stock SQLite\n",
              a[i].zVar, z, a[i].zExpect, program());
      return 0;
    }
  }
  return 1;
}

/* The one-shot auto-extension: SQLite hands it the routine table. */
static int register_init(sqlite3 *db, char **pzErr,
                         const sqlite3_api_routines *pApi){
  (void)db; (void)pzErr;
  if( g_rc>=0 ) return SQLITE_OK;
  SQLITE_EXTENSION_INIT2(pApi);
  g_rc = waldio_register(WALDIO_VFS_NAME, 1, &g_opts);
  return SQLITE_OK;
}

static void register_once(void){
  open_v2_fn xOpen = (open_v2_fn)real_symbol("sqlite3_open_v2");
  close_fn xClose;
  autoext_fn xAuto, xCancel;
  libversion_fn xVersion;
  libversion_number_fn xNumber;
  sqlite3 *db = 0;
  char zMsg[512];

  if( !xOpen ) return;
  xClose = (close_fn)sibling((void*)xOpen, "sqlite3_close");
  xAuto = (autoext_fn)sibling((void*)xOpen, "sqlite3_auto_extension");
  xCancel = (autoext_fn)sibling((void*)xOpen, "sqlite3_cancel_auto_extension");
  xVersion = (libversion_fn)sibling((void*)xOpen, "sqlite3_libversion");
  xNumber = (libversion_number_fn)sibling((void*)xOpen, "sqlite3_libversion_number");
  if( !xClose || !xAuto || !xCancel || !xVersion || !xNumber ){
    fprintf(stderr, "waldio: %s: its SQLite lacks sqlite3_auto_extension;"
            " waldio is not registered\n", program());
    return;
  }
  if( xNumber()<3032000 ){
    fprintf(stderr, "waldio: %s uses SQLite %s; waldio needs >= 3.32.0 and"
            " is not registered\n", program(), xVersion());
    return;
  }
  if( !parse_env() ) return;
  xAuto((void(*)(void))register_init);
  xOpen(":memory:", &db, SQLITE_OPEN_READWRITE|SQLITE_OPEN_CREATE, 0);
  xCancel((void(*)(void))register_init);
  if( db ) xClose(db);
  if( g_rc!=SQLITE_OK ){
    waldio_last_error(zMsg, sizeof(zMsg));
    fprintf(stderr, "waldio: %s: cannot register the waldio VFS: %s\n",
            program(), g_rc<0 ? "SQLite did not run the registration" : zMsg);
    return;
  }
  if( verbose() ){
    fprintf(stderr, "waldio: default VFS of SQLite %s in %s (pid %d)\n",
            xVersion(), program(), (int)getpid());
  }
}

static void ensure_registered(void){
  pthread_once(&g_once, register_once);
}

EXPORT int sqlite3_open_v2(const char *zFile, sqlite3 **ppDb, int flags,
                           const char *zVfs){
  static open_v2_fn xReal;
  ensure_registered();
  if( !xReal ) xReal = (open_v2_fn)real_symbol("sqlite3_open_v2");
  if( !xReal ){ if( ppDb ) *ppDb = 0; return SQLITE_ERROR; }
  return xReal(zFile, ppDb, flags, zVfs);
}

EXPORT int sqlite3_open(const char *zFile, sqlite3 **ppDb){
  static open_fn xReal;
  ensure_registered();
  if( !xReal ) xReal = (open_fn)real_symbol("sqlite3_open");
  if( !xReal ){ if( ppDb ) *ppDb = 0; return SQLITE_ERROR; }
  return xReal(zFile, ppDb);
}

EXPORT int sqlite3_open16(const void *zFile, sqlite3 **ppDb){
  static open16_fn xReal;
  ensure_registered();
  if( !xReal ) xReal = (open16_fn)real_symbol("sqlite3_open16");
  if( !xReal ){ if( ppDb ) *ppDb = 0; return SQLITE_ERROR; }
  return xReal(zFile, ppDb);
}

/* At load: an SQLite that the executable exports itself shadows the
** functions above, so this library could never register. Say so. */
struct find_object { const void *p; int index; int found; };

static int object_holding(struct dl_phdr_info *info, size_t size, void *pArg){
  struct find_object *f = pArg;
  int i;
  (void)size;
  for(i=0; i<info->dlpi_phnum; i++){
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    ElfW(Addr) lo = info->dlpi_addr + ph->p_vaddr;
    if( ph->p_type==PT_LOAD && (ElfW(Addr))f->p>=lo
     && (ElfW(Addr))f->p<lo+ph->p_memsz ){
      f->found = 1;
      return 1;
    }
  }
  f->index++;
  return 0;
}

__attribute__((constructor))
static void preload_check(void){
  struct find_object f = { 0, 0, 0 };
  f.p = dlsym(RTLD_DEFAULT, "sqlite3_libversion");
  if( !f.p ) return;                  /* no SQLite (yet): nothing to say */
  dl_iterate_phdr(object_holding, &f);
  if( f.found && f.index==0 ){        /* object 0 is the executable */
    fprintf(stderr, "waldio: %s carries its own statically linked SQLite %s;"
            " waldio cannot become its default VFS this way (load waldio.so"
            " into it, or link it with libwaldio)\n", program(),
            ((libversion_fn)f.p)());
  }
}
