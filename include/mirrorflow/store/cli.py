"""The offsets table's command line: inspect a flow's lock, progress and gaps; release the lock of a
dead run; forget a flow's state of one source topic. ``--db`` defaults to the configured
``offsets_db_url``::

    python -m mirrorflow.store show --flow 'primary->backup' [--db URL]
    python -m mirrorflow.store release-lock --flow 'primary->backup' [--db URL]
    python -m mirrorflow.store forget-topic --flow 'primary->backup' --topic orders [--db URL]

Errors of mirrorflow (``MirrorError``) are printed on stderr with exit status 1.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from mirrorflow.config.model import load_config
from mirrorflow.core.progress import format_time
from mirrorflow.errors import MirrorError
from mirrorflow.store.flow_lock import force_release_lock, lock_info
from mirrorflow.store.offsets_store import OffsetsStore

__all__ = ["main"]


def _default_db_url() -> str:
    return str(load_config().offsets_db_url)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mirrorflow.store", description="Inspect and repair the offsets table."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    show = commands.add_parser("show", help="print a flow's lock and committed progress")
    release = commands.add_parser(
        "release-lock", help="release a flow's lock whoever holds it (only when that run is dead)"
    )
    forget = commands.add_parser(
        "forget-topic",
        help="delete a flow's progress, batch log, gaps, topic id and checkpoints of one source topic "
        "(e.g. after the topic was recreated): the next run mirrors it as a new topic",
    )
    forget.add_argument("--topic", required=True, help="the source topic")
    for sub in (show, release, forget):
        sub.add_argument("--flow", required=True, help="the flow, e.g. 'primary->backup'")
        sub.add_argument("--db", help="database URL (default: offsets_db_url of the configuration)")
    args = parser.parse_args(argv)
    try:
        with OffsetsStore(args.db or _default_db_url()) as store:
            if args.command == "release-lock":
                released = force_release_lock(store, args.flow)
                if released is None:
                    print(f"flow {args.flow} is not locked")
                else:
                    print(
                        f"released the lock of flow {args.flow} held by run {released.run_id} since "
                        f"{format_time(released.acquired_at)} (expiring {format_time(released.expires_at)})"
                    )
                return 0
            if args.command == "forget-topic":
                deleted = store.forget_topic(args.flow, args.topic)
                print(f"flow {args.flow}: forgot topic {args.topic} ({deleted} rows deleted)")
                return 0
            _show(store, args.flow)
            return 0
    except MirrorError as error:
        print(f"error: {error}", file=sys.stderr)
        return 1


def _show(store: OffsetsStore, flow: str) -> None:
    lock = lock_info(store, flow)
    if lock is None:
        print(f"flow {flow}: not locked")
    else:
        print(
            f"flow {flow}: locked by run {lock.run_id} since {format_time(lock.acquired_at)}, "
            f"expires {format_time(lock.expires_at)}"
        )
    progress = store.progress_records(flow)
    if not progress:
        print("no progress")
        return
    _print_table(
        ("topic", "partition", "next_source_offset", "next_target_offset", "last_run", "updated_at"),
        [
            (
                p.topic,
                str(p.partition),
                str(p.next_source_offset),
                str(p.next_target_offset),
                p.run_id,
                format_time(p.updated_at),
            )
            for p in progress
        ],
    )
    gaps = store.gaps(flow)
    if gaps:
        print("source records lost before they were mirrored (skipped):")
        _print_table(
            ("partition", "source range", "target range", "run", "recorded_at"),
            [
                (
                    f"{g.topic}-{g.partition}",
                    f"[{g.source_start}, {g.source_end})",
                    f"[{g.target_start}, {g.target_end})",
                    g.run_id,
                    format_time(g.recorded_at),
                )
                for g in gaps
            ],
        )


def _print_table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]]) -> None:
    table = [header, *rows]
    widths = [max(len(line[i]) for line in table) for i in range(len(header))]
    for line in table:
        print("  ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)).rstrip())


if __name__ == "__main__":
    raise SystemExit(main())
