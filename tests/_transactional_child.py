"""A producer process for tests/test_postgres_transactional.py:
``python -m tests._transactional_child MODE URL ORDER``.

Each mode inserts the business row ``orders(ORDER)`` and enqueues the job
``tx.record`` for it in ONE transaction, then:

* ``crash``: psycopg and SyncProducer; prints ``enqueued`` and waits to be
  killed (SIGKILL) before it commits;
* ``django-commit`` / ``django-rollback``: Django's connection inside
  ``transaction.atomic`` (a minimal settings module configured here), with
  SyncProducer; the block commits, or raises to roll back;
* ``django-trio``: Django's connection from Trio code (``task.enqueue``),
  committed by ``transaction.atomic``.

It prints ``done`` when it ends by itself.
"""

from __future__ import annotations

import sys
import time
from urllib.parse import urlsplit

from chronos_trio.producers import SyncProducer
from tests.transactional_app import Record, make_app


def _crash(url: str, order: int) -> None:
    import psycopg

    producer = SyncProducer(url)
    with psycopg.connect(url) as conn:
        conn.execute("INSERT INTO orders (id) VALUES (%s)", (order,))
        producer.enqueue("tx.record", Record(order), connection=conn)
        print("enqueued", flush=True)
        time.sleep(600)  # killed here, before the commit


def _configure_django(url: str) -> None:
    import django
    from django.conf import settings

    parts = urlsplit(url)
    settings.configure(
        DATABASES={
            "default": {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": parts.path.lstrip("/"),
                "USER": parts.username or "",
                "PASSWORD": parts.password or "",
                "HOST": parts.hostname or "",
                "PORT": str(parts.port or ""),
            }
        },
        INSTALLED_APPS=[],
        USE_TZ=True,
    )
    django.setup()


class Rollback(Exception):
    pass


def _django(url: str, order: int, *, commit: bool) -> None:
    from django.db import connection, transaction

    _configure_django(url)
    producer = SyncProducer(url)
    try:
        with transaction.atomic():
            with connection.cursor() as cur:
                cur.execute("INSERT INTO orders (id) VALUES (%s)", [order])
            producer.enqueue("tx.record", Record(order), connection=connection)
            if not commit:
                raise Rollback
    except Rollback:
        pass


def _django_trio(url: str, order: int) -> None:
    import trio
    from django.db import connection, transaction

    _configure_django(url)
    app = make_app(url)

    async def main() -> None:
        await app.tasks["tx.record"].enqueue(Record(order), connection=connection)
        await app.aclose()

    with transaction.atomic():
        with connection.cursor() as cur:
            cur.execute("INSERT INTO orders (id) VALUES (%s)", [order])
        trio.run(main)


def main() -> None:
    mode, url, order = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if mode == "crash":
        _crash(url, order)
    elif mode in ("django-commit", "django-rollback"):
        _django(url, order, commit=mode == "django-commit")
    elif mode == "django-trio":
        _django_trio(url, order)
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    print("done", flush=True)


if __name__ == "__main__":
    main()
