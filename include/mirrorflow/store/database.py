"""The database under the offsets store, whatever its SQLAlchemy URL: the engine (SQLite: the file's
folder, a busy timeout, ``BEGIN IMMEDIATE`` for writes; PostgreSQL: connect, statement, lock-wait and
TCP timeouts), its clock (``DatabaseClock``), the tables' creation, outages and read-only databases
as ``TransientError``, and insert-if-absent.

``OffsetsStore`` (``mirrorflow.store.offsets_store``) is the only user of the engine; the URL helpers
(``redact_url``, ``absent_sqlite_file``) are public, for messages and for readers that must not
create a database (the status page).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    Table,
    and_,
    create_engine,
    event,
    exc,
    func,
    insert,
    inspect,
    select,
    text,
)
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.engine import URL, make_url
from sqlalchemy.schema import CreateColumn

from mirrorflow.errors import ConfigError, TransientError
from mirrorflow.store.tables import metadata

DEFAULT_BUSY_TIMEOUT_SECONDS = 30.0
DEFAULT_CONNECT_TIMEOUT_SECONDS = 10
# PostgreSQL: no statement may hang longer, nor wait longer for a row another transaction holds, nor
# a connection stay silent longer, than a DR window may go without renewing its lease (30 s, less
# the 5 s it stops before): a window whose database call hangs finds out and stops in time, instead
# of mirroring on past a lease another window may take. A URL's own ``options`` win.
_PG_STATEMENT_TIMEOUT_MS = 20_000
_PG_LOCK_TIMEOUT_MS = 10_000
_PG_TCP_USER_TIMEOUT_MS = 20_000
# A connection's execution option: does its transaction write (SQLite: BEGIN IMMEDIATE)?
WRITE_OPTION = "mirrorflow_write"
# Rows per INSERT statement of a bulk insert.
INSERT_CHUNK = 500
_TABLES_ADVISORY_LOCK = 0x6D6972726F72  # "mirror": serialises concurrent table creation on PostgreSQL
# Errors by which a database says it cannot be reached now: worth a retry.
_UNAVAILABLE = (exc.OperationalError, exc.InterfaceError, exc.DisconnectionError)
# SQLSTATE read_only_sql_transaction: a hot standby, or default_transaction_read_only.
_PG_READ_ONLY = "25006"
# How long a database clock reading is carried on by this host's monotonic clock before it is read
# again: monotonic clocks drift by parts per million, so this bounds the drift to milliseconds.
CLOCK_RESYNC_SECONDS = 300.0


# -------------------------------------------------------------------------------------------- URLs


def redact_url(url: str) -> str:
    """``url`` with its password replaced by ``***``."""
    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:
        return re.sub(r"(://[^:/@]*:)[^@/]*@", r"\1***@", url)


def sqlite_file(url: URL) -> Path | None:
    """The file a SQLite URL names; ``None`` for another database, an in-memory one or a URI
    filename (``file:...``, ``?uri=true``), whose file SQLite resolves itself."""
    database = url.database
    if url.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return None
    if database.startswith("file:") or url.query.get("uri"):
        return None
    return Path(database)


def absent_sqlite_file(url: str) -> bool:
    """Whether ``url`` names a SQLite file that does not exist (opening it would create it).

    Looks at the file system only; an invalid URL is ``False`` (the store reports it)."""
    try:
        path = sqlite_file(make_url(url))
    except Exception:
        return False
    return path is not None and not path.exists()


# ------------------------------------------------------------------------------------------ engine


def create_store_engine(url: str, redacted: str, busy_timeout_seconds: float) -> Engine:
    """The engine for the offsets database at ``url`` (``redacted``: the same, for messages).

    An invalid or unusable URL raises ``ConfigError``; a SQLite file's folder that cannot be created
    raises ``TransientError``. Connects to nothing yet."""
    try:
        parsed = make_url(url)
    except exc.ArgumentError as error:
        raise ConfigError(f"not a valid database URL: {redacted}", key="offsets_db_url") from error
    is_sqlite = parsed.get_backend_name() == "sqlite"
    connect_args: dict[str, Any] = {}
    if is_sqlite:
        try:
            _create_sqlite_folder(parsed)
        except OSError as error:
            raise TransientError(
                f"offsets database {redacted} is unavailable: cannot create its folder ({error}); "
                "create it, writable for this worker, or point mirrorflow.offsets.db.url elsewhere"
            ) from error
        connect_args["timeout"] = busy_timeout_seconds
    elif parsed.get_backend_name() == "postgresql" and parsed.get_driver_name() in ("psycopg2", "psycopg"):
        defaults = {
            "connect_timeout": DEFAULT_CONNECT_TIMEOUT_SECONDS,
            "tcp_user_timeout": _PG_TCP_USER_TIMEOUT_MS,
            "options": f"-c statement_timeout={_PG_STATEMENT_TIMEOUT_MS} "
            f"-c lock_timeout={_PG_LOCK_TIMEOUT_MS}",
        }
        connect_args.update({k: v for k, v in defaults.items() if k not in parsed.query})
    try:
        engine = create_engine(parsed, pool_pre_ping=True, connect_args=connect_args)
    except (exc.ArgumentError, exc.NoSuchModuleError, ImportError) as error:
        raise ConfigError(f"cannot use database URL {redacted}: {error}", key="offsets_db_url") from error
    if is_sqlite:
        _use_begin_immediate_for_writes(engine)
    return engine


def host_now() -> datetime:
    """This host's wall clock, in UTC."""
    return datetime.now(UTC)


class DatabaseClock:
    """The database server's clock: what leases are judged by, so that hosts whose wall clocks
    disagree (skew, a clock stepped back or forth) agree on when a lease ends.

    PostgreSQL's ``clock_timestamp()`` is read once, at the midpoint of the round trip, and carried on
    by this host's monotonic clock, read again every ``CLOCK_RESYNC_SECONDS`` (and kept when the
    database is away then). A SQLite file lives on this host: its clock is this host's (``host_now``),
    as is any other database's, whose server time SQLAlchemy cannot read in one way.

    Invariant: a step of this host's wall clock moves no lease."""

    def __init__(self, engine: Engine, redacted: str) -> None:
        self._engine, self._redacted = engine, redacted
        self._server = engine.dialect.name == "postgresql"
        self._reading: tuple[datetime, float] | None = None  # (server time, monotonic then)
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        if not self._server:
            return host_now()
        reading = self._reading
        if reading is None or time.monotonic() - reading[1] > CLOCK_RESYNC_SECONDS:
            reading = self._read(reading)
        server_time, at = reading
        return server_time + timedelta(seconds=time.monotonic() - at)

    def _read(self, last: tuple[datetime, float] | None) -> tuple[datetime, float]:
        with self._lock:
            try:
                with outages_transient(self._redacted), self._engine.connect() as conn:
                    before = time.monotonic()
                    server_time = conn.execute(select(func.clock_timestamp())).scalar_one()
                    at = (before + time.monotonic()) / 2
            except TransientError:
                if last is None:
                    raise
                return last  # carried on: the monotonic clock drifts little more in the meantime
            self._reading = (server_time.astimezone(UTC), at)
            return self._reading


def create_tables(engine: Engine) -> None:
    """Create the tables that are missing, and the columns added since a table was first created;
    concurrent creators (other processes) are harmless."""
    for attempt in range(2):
        try:
            with engine.connect() as conn:
                conn.execution_options(**{WRITE_OPTION: True})
                with conn.begin():
                    if engine.dialect.name == "postgresql":
                        conn.execute(
                            text("SELECT pg_advisory_xact_lock(:key)"), {"key": _TABLES_ADVISORY_LOCK}
                        )
                    metadata.create_all(conn, checkfirst=True)
                    _add_missing_columns(conn)
            return
        except (exc.ProgrammingError, exc.IntegrityError, exc.OperationalError):
            # Another process created the tables between our check and our CREATE (databases
            # without transactional DDL or advisory locks): the second look finds them.
            if attempt == 1:
                raise


def _add_missing_columns(conn: Connection) -> None:
    """Columns a newer release added to an existing table (each has a server default, so existing
    rows read as they were written)."""
    found = inspect(conn)
    for table in metadata.sorted_tables:
        present = {c["name"] for c in found.get_columns(table.name)}
        for column in table.columns:
            if column.name not in present:
                ddl = CreateColumn(column).compile(dialect=conn.dialect)
                conn.execute(text(f"ALTER TABLE {table.name} ADD COLUMN {ddl}"))


@contextmanager
def outages_transient(redacted: str) -> Iterator[None]:
    """A database that cannot be reached, or only read (a failover in progress, or a read-only
    file or account), raises ``TransientError`` saying so; other database errors pass unchanged."""
    try:
        yield
    except exc.SQLAlchemyError as error:
        detail = str(getattr(error, "orig", None) or error).strip()
        if _is_read_only(error):
            raise TransientError(
                f"offsets database {redacted} is read-only ({detail}); point "
                "mirrorflow.offsets.db.url at a writable database (a primary, not a replica) or "
                "give this worker write access to it"
            ) from error
        if isinstance(error, _UNAVAILABLE):
            raise TransientError(
                f"offsets database {redacted} is unavailable: {detail}; check that it is up "
                "and reachable from this worker"
            ) from error
        raise


def insert_missing(conn: Connection, table: Table, rows: list[dict[str, Any]]) -> None:
    """Insert rows of ``table`` whose primary key is absent; leave existing rows untouched."""
    if not rows:
        return
    dialect = conn.dialect.name
    if dialect in ("sqlite", "postgresql"):
        dialect_insert = sqlite_insert if dialect == "sqlite" else postgresql_insert
        for start in range(0, len(rows), INSERT_CHUNK):
            chunk = rows[start : start + INSERT_CHUNK]
            conn.execute(dialect_insert(table).values(chunk).on_conflict_do_nothing())
        return
    key = list(table.primary_key.columns)
    for row in rows:
        try:
            with conn.begin_nested():
                conn.execute(insert(table).values(**row))
        except exc.IntegrityError:
            present = conn.execute(select(*key).where(and_(*(c == row[c.name] for c in key)))).first()
            if present is None:
                raise


# ----------------------------------------------------------------------------------------- helpers


def _is_read_only(error: exc.SQLAlchemyError) -> bool:
    """SQLite's SQLITE_READONLY* (a read-only file, ``mode=ro``); PostgreSQL's read-only transaction."""
    orig = getattr(error, "orig", None)
    sqlite_error = str(getattr(orig, "sqlite_errorname", ""))
    pg_state = getattr(orig, "pgcode", None) or getattr(orig, "sqlstate", None)
    return sqlite_error.startswith("SQLITE_READONLY") or pg_state == _PG_READ_ONLY


def _create_sqlite_folder(url: URL) -> None:
    path = sqlite_file(url)
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)


def _use_begin_immediate_for_writes(engine: Engine) -> None:
    """SQLAlchemy emits BEGIN itself: ``BEGIN IMMEDIATE`` for writes (one writer at a time, waiting
    for the busy timeout instead of failing on a lock upgrade), plain ``BEGIN`` for reads."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.isolation_level = None  # the sqlite3 module must not emit BEGIN itself

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        write = bool(conn.get_execution_options().get(WRITE_OPTION, True))
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")
