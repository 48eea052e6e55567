"""gunicorn settings of the web-app example (``gunicorn -c gunicorn.conf.py``).

Sync workers (gunicorn's default: one request at a time per process) and no
``preload_app``: the app, and so its SQLite connection, is created in each worker
after the fork.  ``post_worker_init`` opens the worker's connection before it takes
its first request and, when ``WEBAPP_READY_DIR`` is set, writes the connection's
settings read back to ``<dir>/<pid>.json``: the benchmark starts timing once every
worker has written its file, and checks what each read back. ``worker_exit`` writes
the connection's ``PRAGMA waldio_stats`` (waldio only) to ``<dir>/<pid>.stats.json``.
"""
import json
import os

import flask  # noqa: F401 - imported once in the master: each forked worker starts faster

worker_class = "sync"
preload_app = False
accesslog = None
graceful_timeout = 30


def _write(name, doc):
    ready = os.environ.get("WEBAPP_READY_DIR")
    if ready:
        tmp = os.path.join(ready, f".{name}.tmp")
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.rename(tmp, os.path.join(ready, name))


def post_worker_init(worker):  # noqa: ANN001 - gunicorn's hook signature
    from app import settings
    _write(f"{os.getpid()}.json", settings())


def worker_exit(server, worker):  # noqa: ANN001
    from app import waldio_stats
    stats = waldio_stats()
    if stats is not None:
        _write(f"{os.getpid()}.stats.json", stats)
