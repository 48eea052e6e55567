/*
** waldio_txnloop.so: the timed transaction loop of `waldio bench`, in C.
**
** What it is.  `waldio bench` plans every statement and parameter in Python
** before timing (python/waldio/bench/plan.py).  Running that plan from Python
** costs 17-55 us per transaction of interpreter and ctypes work (issue 13),
** which is as much as SQLite itself spends on a commit that does not sync.
** This file runs the planned transactions in a C loop, as Mobibench does, and
** hands back two CLOCK_MONOTONIC timestamps per transaction (the clock of
** Python's time.perf_counter_ns on Linux).  Parameter read-back, checks,
** statistics and JSON stay in Python (python/waldio/bench/native.py).
**
** Which SQLite.  The loop never links against a SQLite: it calls SQLite only
** through the routine table (sqlite3_api_routines) of the build that owns
** the connection, passed in with every call.  The table is obtained by loading
** this file as a SQLite extension into a connection of that build: the entry
** point sqlite3_waldiotxnloop_init records the table it is given, returns
** SQLITE_OK_LOAD_PERMANENTLY (so SQLite never unloads the code), and
** waldio_txnloop_last_api() returns the table the most recent load recorded.
** One copy of the file therefore serves apsw's bundled SQLite and the system
** libsqlite3 in the same process: there is no global sqlite3_api pointer.
**
** Two statement styles (wbr_job.style):
**   WBR_PREPARED  every distinct SQL text is prepared once, before timing
**                 (wbr_prepare); a transaction is reset + bind + step of
**                 prepared statements (BEGIN and COMMIT included).
**   WBR_EXEC      one SQL text per transaction with literal values, run with
**                 sqlite3_exec(): SQLite parses it on every transaction,
**                 exactly what Mobibench's exec_sql() does.
**
** Two ways to run a job:
**   wbr_run        every planned transaction once, in order; two timestamps
**                  per transaction into t_start/t_end (or only around the
**                  whole loop: the bare loop of the calibration).
**   wbr_run_timed  the loop of one process of `waldio bench --processes`
**                  (python/waldio/bench/processes.py): sleep until start_at_ns
**                  (an absolute CLOCK_MONOTONIC instant shared by every
**                  process: the start barrier), then run the plan, repeating
**                  it cyclically, until a transaction ends at or after
**                  deadline_ns or max_txns are done; each transaction's
**                  latency goes into a histogram row chosen by its kind
**                  (WBR_HIST_BUCKETS log-linear buckets, < 0.8% wide: see
**                  hist_index), so memory does not grow with the run.
**
** Invariants.  No allocation and no system call in the loop except SQLite's
** own, clock_gettime() twice per transaction, nanosleep() for think time and
** clock_nanosleep() once before a timed run.
** On error the failing transaction is rolled back if SQLite left one open,
** the loop stops and the job records the transaction, result code and
** message.  Every prepared statement is reset (never left mid-step) when
** wbr_run returns, so it holds no lock; the caller finalizes them
** (wbr_finalize) before closing the connection.
*/
#include <sqlite3ext.h>   /* the routine table type only: no SQLITE_EXTENSION_INIT1 */
#include <stdint.h>
#include <string.h>
#include <time.h>

#define WBR_API __attribute__((visibility("default")))

enum { WBR_NULL = 0, WBR_INT = 1, WBR_TEXT = 2, WBR_BLOB = 3 };
enum { WBR_PREPARED = 0, WBR_EXEC = 1 };

/* One bound parameter (WBR_PREPARED). */
typedef struct wbr_value {
  int32_t kind;         /* WBR_NULL, WBR_INT, WBR_TEXT, WBR_BLOB */
  int32_t len;          /* bytes of p (TEXT, BLOB) */
  int64_t i;            /* WBR_INT */
  const char *p;        /* TEXT, BLOB: owned by the caller for the whole run */
} wbr_value;

/* One statement execution: statement index, its parameters, rows expected? */
typedef struct wbr_op {
  int32_t stmt;         /* index into stmts (PREPARED) or sql (EXEC) */
  int32_t first_param;  /* index into params */
  int32_t nparam;
  int32_t is_select;    /* count the rows it returns */
} wbr_op;

/* One transaction: a run of ops, optionally framed by BEGIN/COMMIT. */
typedef struct wbr_txn {
  int32_t first_op;
  int32_t nop;
  int32_t begin_stmt;   /* PREPARED: statement index of BEGIN [IMMEDIATE], or -1 */
  int32_t commit_stmt;  /* PREPARED: statement index of COMMIT, or -1 */
  int32_t kind;         /* wbr_run_timed: histogram row (0 <= kind < nkind) */
} wbr_txn;

/* Latency histogram: exact below 2*SUB ns, then SUB buckets per power of two
** up to 2^WBR_HIST_TOP_BIT ns (about 37 minutes); longer latencies land in the
** last bucket.  python/waldio/bench/histogram.py decodes it (same constants). */
#define WBR_HIST_SUB_BITS 7
#define WBR_HIST_SUB (1 << WBR_HIST_SUB_BITS)
#define WBR_HIST_TOP_BIT 41
#define WBR_HIST_BUCKETS (2 * WBR_HIST_SUB + (WBR_HIST_TOP_BIT - WBR_HIST_SUB_BITS - 1) * WBR_HIST_SUB)

typedef struct wbr_job {
  /* in */
  const sqlite3_api_routines *api;
  sqlite3 *db;
  int32_t style;               /* WBR_PREPARED or WBR_EXEC */
  int32_t ntxn;
  int32_t stamps;              /* 1: t_start/t_end per transaction; 0: only t_start[0]
                                  before the first and t_end[0] after the last
                                  (the bare loop that calibration compares against) */
  int32_t reserved;
  sqlite3_stmt *const *stmts;  /* PREPARED */
  const char *const *sql;      /* EXEC */
  const wbr_txn *txns;
  const wbr_op *ops;
  const wbr_value *params;
  int64_t think_ns;            /* sleep between transactions (not after the last) */
  int64_t *t_start;            /* ntxn CLOCK_MONOTONIC ns: before the transaction */
  int64_t *t_end;              /* ntxn: after it */
  /* out */
  int64_t rows;                /* rows returned by ops with is_select */
  int64_t slept_ns;
  int32_t done;                /* transactions completed */
  int32_t rc;                  /* SQLITE_OK, or the error of transaction `done` */
  char errmsg[512];
  /* in: wbr_run_timed only */
  int64_t start_at_ns;         /* CLOCK_MONOTONIC instant of the first transaction (0: now) */
  int64_t deadline_ns;         /* >0: stop after the first transaction ending at or after it */
  int64_t max_txns;            /* >0: stop after this many transactions */
  int64_t *hist;               /* nkind x WBR_HIST_BUCKETS latency counts, added to */
  int32_t nkind;
  int32_t reserved2;
  /* out: wbr_run_timed only */
  int64_t first_start_ns;      /* start of the first transaction */
  int64_t last_end_ns;         /* end of the last completed transaction */
} wbr_job;

static const sqlite3_api_routines *last_api;

static int64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void set_error(wbr_job *j, int rc, const char *msg) {
  j->rc = rc;
  if (!msg) msg = j->api->errmsg(j->db);
  strncpy(j->errmsg, msg ? msg : "", sizeof j->errmsg - 1);
  j->errmsg[sizeof j->errmsg - 1] = 0;
}

static int bind_one(const sqlite3_api_routines *api, sqlite3_stmt *s, int i, const wbr_value *v) {
  switch (v->kind) {
    case WBR_INT: return api->bind_int64(s, i, v->i);
    case WBR_TEXT: return api->bind_text(s, i, v->p, v->len, SQLITE_STATIC);
    case WBR_BLOB: return api->bind_blob(s, i, v->p, v->len, SQLITE_STATIC);
    default: return api->bind_null(s, i);
  }
}

/* Step one prepared statement to the end; count rows; leave it reset. */
static int step_all(wbr_job *j, sqlite3_stmt *s, int count_rows) {
  const sqlite3_api_routines *api = j->api;
  int rc;
  while ((rc = api->step(s)) == SQLITE_ROW)
    if (count_rows) j->rows++;
  if (rc == SQLITE_DONE) return api->reset(s);
  api->reset(s);
  return rc;
}

static int run_op_prepared(wbr_job *j, const wbr_op *op) {
  const sqlite3_api_routines *api = j->api;
  sqlite3_stmt *s = j->stmts[op->stmt];
  for (int k = 0; k < op->nparam; k++) {
    int rc = bind_one(api, s, k + 1, &j->params[op->first_param + k]);
    if (rc != SQLITE_OK) return rc;
  }
  return step_all(j, s, op->is_select);
}

static int run_txn_prepared(wbr_job *j, const wbr_txn *t) {
  int rc = SQLITE_OK;
  if (t->begin_stmt >= 0) rc = step_all(j, j->stmts[t->begin_stmt], 0);
  for (int k = 0; rc == SQLITE_OK && k < t->nop; k++)
    rc = run_op_prepared(j, &j->ops[t->first_op + k]);
  if (rc == SQLITE_OK && t->commit_stmt >= 0) rc = step_all(j, j->stmts[t->commit_stmt], 0);
  return rc;
}

static int count_row(void *arg, int ncol, char **vals, char **names) {
  (void)ncol; (void)vals; (void)names;
  ((wbr_job *)arg)->rows++;
  return 0;
}

static int run_txn_exec(wbr_job *j, const wbr_txn *t) {
  int rc = SQLITE_OK;
  for (int k = 0; rc == SQLITE_OK && k < t->nop; k++) {
    const wbr_op *op = &j->ops[t->first_op + k];
    char *err = 0;
    rc = j->api->exec(j->db, j->sql[op->stmt], op->is_select ? count_row : 0, j, &err);
    if (rc != SQLITE_OK) set_error(j, rc, err);
    if (err) j->api->free(err);
  }
  return rc;
}

static void think(wbr_job *j) {
  struct timespec ts = { (time_t)(j->think_ns / 1000000000), (long)(j->think_ns % 1000000000) };
  int64_t a = now_ns();
  while (nanosleep(&ts, &ts) != 0) {}
  j->slept_ns += now_ns() - a;
}

/* Run every transaction of the job; SQLITE_OK or the first error (job->done says where). */
WBR_API int wbr_run(wbr_job *j) {
  j->rows = j->slept_ns = 0;
  j->done = 0;
  j->rc = SQLITE_OK;
  j->errmsg[0] = 0;
  int stamps = j->stamps;
  int64_t a = 0, b = 0;
  if (!stamps && j->ntxn > 0) j->t_start[0] = now_ns();
  for (int32_t n = 0; n < j->ntxn; n++) {
    const wbr_txn *t = &j->txns[n];
    if (stamps) a = now_ns();
    int rc = j->style == WBR_EXEC ? run_txn_exec(j, t) : run_txn_prepared(j, t);
    if (stamps) b = now_ns();
    if (rc != SQLITE_OK) {
      if (j->rc == SQLITE_OK) set_error(j, rc, 0);
      if (!j->api->get_autocommit(j->db)) j->api->exec(j->db, "ROLLBACK", 0, 0, 0);
      return j->rc;
    }
    if (stamps) {
      j->t_start[n] = a;
      j->t_end[n] = b;
    }
    j->done = n + 1;
    if (j->think_ns > 0 && n + 1 < j->ntxn) think(j);
  }
  if (!stamps && j->ntxn > 0) j->t_end[0] = now_ns();
  return SQLITE_OK;
}

/* The histogram bucket of a latency (see WBR_HIST_BUCKETS). */
static int hist_index(int64_t ns) {
  uint64_t u = ns < 0 ? 0 : (uint64_t)ns;
  if (u < 2 * WBR_HIST_SUB) return (int)u;
  if (u >> WBR_HIST_TOP_BIT) return WBR_HIST_BUCKETS - 1;
  int e = 63 - __builtin_clzll(u);              /* 2^e <= u < 2^(e+1), e >= SUB_BITS + 1 */
  int shift = e - WBR_HIST_SUB_BITS;
  return 2 * WBR_HIST_SUB + (shift - 1) * WBR_HIST_SUB + (int)((u >> shift) - WBR_HIST_SUB);
}

/* One process's timed run (see the header): SQLITE_OK or the first error. */
WBR_API int wbr_run_timed(wbr_job *j) {
  j->rows = j->slept_ns = 0;
  j->done = 0;
  j->rc = SQLITE_OK;
  j->errmsg[0] = 0;
  j->first_start_ns = j->last_end_ns = 0;
  if (j->ntxn <= 0 || !j->hist || j->nkind <= 0 || (j->deadline_ns <= 0 && j->max_txns <= 0)) {
    set_error(j, SQLITE_MISUSE, "wbr_run_timed: empty plan, no histogram, or no end");
    return j->rc;
  }
  if (j->start_at_ns > 0) {
    struct timespec ts = { (time_t)(j->start_at_ns / 1000000000), (long)(j->start_at_ns % 1000000000) };
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, 0) != 0) {}
  }
  int64_t deadline = j->deadline_ns;
  int64_t count = j->max_txns > 0 && j->max_txns < INT32_MAX ? j->max_txns : INT32_MAX;
  for (int64_t n = 0; n < count; n++) {
    const wbr_txn *t = &j->txns[n % j->ntxn];
    int64_t a = now_ns();
    int rc = j->style == WBR_EXEC ? run_txn_exec(j, t) : run_txn_prepared(j, t);
    int64_t b = now_ns();
    if (n == 0) j->first_start_ns = a;
    if (rc != SQLITE_OK) {
      if (j->rc == SQLITE_OK) set_error(j, rc, 0);
      if (!j->api->get_autocommit(j->db)) j->api->exec(j->db, "ROLLBACK", 0, 0, 0);
      return j->rc;
    }
    int kind = t->kind >= 0 && t->kind < j->nkind ? t->kind : 0;
    j->hist[(int64_t)kind * WBR_HIST_BUCKETS + hist_index(b - a)]++;
    j->last_end_ns = b;
    j->done = (int32_t)(n + 1);
    if (deadline > 0 && b >= deadline) break;
  }
  return SQLITE_OK;
}

/* The number of histogram buckets per kind (Python checks it against its own). */
WBR_API int wbr_hist_buckets(void) { return WBR_HIST_BUCKETS; }

/* Prepare n SQL texts into out[] (NULL for text that is only whitespace/comments). */
WBR_API int wbr_prepare(const sqlite3_api_routines *api, sqlite3 *db, int n,
                        const char *const *sql, sqlite3_stmt **out, char *err, int errlen) {
  for (int k = 0; k < n; k++) out[k] = 0;
  for (int k = 0; k < n; k++) {
    const char *tail = 0;
    int rc = api->prepare_v2(db, sql[k], -1, &out[k], &tail);
    if (rc == SQLITE_OK && tail && *tail) {
      while (*tail == ' ' || *tail == ';' || *tail == '\n' || *tail == '\t') tail++;
      if (*tail) rc = SQLITE_MISUSE;
    }
    if (rc != SQLITE_OK) {
      const char *msg = rc == SQLITE_MISUSE ? "more than one statement in one plan text"
                                            : api->errmsg(db);
      if (err && errlen > 0) {
        strncpy(err, msg ? msg : "", (size_t)errlen - 1);
        err[errlen - 1] = 0;
      }
      for (int m = 0; m <= k; m++) if (out[m]) { api->finalize(out[m]); out[m] = 0; }
      return rc;
    }
  }
  return SQLITE_OK;
}

WBR_API void wbr_finalize(const sqlite3_api_routines *api, int n, sqlite3_stmt **stmts) {
  for (int k = 0; k < n; k++) if (stmts[k]) { api->finalize(stmts[k]); stmts[k] = 0; }
}

/* The routine table of the SQLite build that most recently loaded this file. */
WBR_API const sqlite3_api_routines *waldio_txnloop_last_api(void) { return last_api; }

/* The bench's clock, for the calibration of timestamps against Python's. */
WBR_API int64_t wbr_now_ns(void) { return now_ns(); }

WBR_API int sqlite3_waldiotxnloop_init(sqlite3 *db, char **err, const sqlite3_api_routines *api) {
  (void)db; (void)err;
  __atomic_store_n(&last_api, api, __ATOMIC_SEQ_CST);
  return SQLITE_OK_LOAD_PERMANENTLY;
}
