"""``headwater produce`` and ``headwater consume``: the console producer and consumer.

    headwater produce --bootstrap-server H:P --topic T [--key-separator SEP] [--acks 1] [--enable-idempotence]
                      [--compression none]
                      [--header k=v ...]                  (one record per line of stdin)
    headwater consume --bootstrap-server H:P --topic T [--partition P] [--from-beginning | --offset N]
                      [--max-messages N] [--timeout-ms MS] [--print-key] [--print-headers] [--print-offset]

Like kafka-console-producer with ``parse.key`` (given ``--key-separator`` or ``--parse-key``) and
kafka-console-consumer's default formatter. Failures are one line on stderr and exit code 1.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, BinaryIO

from headwater.cli.command_config import security_of
from headwater.cli.topics import (
    CliError,
    add_bootstrap_argument,
    bootstrap_of,
    describe_error,
    run_command,
)

if TYPE_CHECKING:
    from headwater.client.record_future import SyncRecordFuture

_CLI_UNKNOWN_TOPIC_TIMEOUT_MS = 3000
_POLL_MS = 500


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    produce = sub.add_parser("produce", help="send lines of stdin as records")
    add_bootstrap_argument(produce, suppress=False)
    produce.add_argument("--topic", required=True)
    produce.add_argument("--key-separator", help="split each line into key SEP value (implies --parse-key)")
    produce.add_argument("--parse-key", action="store_true", help="lines are KEY<separator>VALUE (default tab)")
    produce.add_argument("--acks", choices=["0", "1", "-1", "all"], help="default 1, all with --enable-idempotence")
    produce.add_argument(
        "--enable-idempotence", action="store_true", help="a producer id and sequences: retries never duplicate"
    )
    produce.add_argument("--compression", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    produce.add_argument("--header", action="append", default=[], metavar="KEY=VALUE", help="on every record")
    produce.add_argument("--partition", type=int, help="send every record to this partition")
    produce.add_argument("--linger-ms", type=int, default=5)
    produce.add_argument(
        "--batch-size",
        type=int,
        default=524288,
        help="bytes per partition batch (default 512 KiB; librdkafka's is 1 MB)",
    )
    produce.add_argument("--request-timeout-ms", type=int, default=30000)
    produce.add_argument("--delivery-timeout-ms", type=int, default=120000)
    produce.set_defaults(func=lambda args: run_command("headwater produce", _produce, args))

    consume = sub.add_parser("consume", help="print records of a topic")
    add_bootstrap_argument(consume, suppress=False)
    consume.add_argument("--topic", required=True)
    consume.add_argument("--partition", type=int, help="one partition (default: all)")
    start = consume.add_mutually_exclusive_group()
    start.add_argument("--from-beginning", action="store_true", help="start at the earliest offset")
    start.add_argument("--offset", help="start offset: a number, 'earliest' or 'latest' (the default)")
    consume.add_argument("--max-messages", type=int, help="exit after this many records")
    consume.add_argument("--timeout-ms", type=int, help="exit when nothing arrives for this long")
    consume.add_argument("--print-key", action="store_true")
    consume.add_argument("--print-headers", action="store_true")
    consume.add_argument("--print-offset", action="store_true")
    consume.add_argument("--print-partition", action="store_true")
    consume.add_argument("--print-timestamp", action="store_true")
    consume.add_argument("--key-separator", default="\t", help="between printed fields (default tab)")
    consume.add_argument("--max-bytes", type=int, default=1048576, help="per partition and fetch")
    consume.set_defaults(func=lambda args: run_command("headwater consume", _consume, args))


# -- produce ---------------------------------------------------------------------------------------


def _parse_headers(items: list[str]) -> list[tuple[str, bytes]]:
    out: list[tuple[str, bytes]] = []
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"--header expects KEY=VALUE, got {item!r}")
        out.append((key, value.encode("utf-8")))
    return out


_CHUNK = 1 << 20  # stdin is read this much at a time (or what is there: read1 does not wait for more)
_CHECK_EVERY = 64  # batches between looks at the futures of the records sent


def _lines(stream: BinaryIO) -> Iterator[list[bytes]]:
    """The lines of ``stream`` as lists, one per chunk read: without their ``\n`` (and one ``\r``
    before it); an empty line is an empty record; a last line without ``\n`` is a line."""
    read = getattr(stream, "read1", stream.read)
    carry = b""
    while True:
        chunk = read(_CHUNK)
        if not chunk:
            break
        lines = (carry + chunk if carry else chunk).split(b"\n")
        carry = lines.pop()
        if b"\r" in chunk:
            lines = [line[:-1] if line.endswith(b"\r") else line for line in lines]
        if lines:
            yield lines
    if carry:
        yield [carry[:-1] if carry.endswith(b"\r") else carry]


def _produce(args: argparse.Namespace) -> int:
    from headwater.client.admin import validate_topic_name
    from headwater.client.sync import SyncProducer

    validate_topic_name(args.topic)
    headers = _parse_headers(args.header)
    separator: bytes | None = None
    if args.key_separator is not None:
        if not args.key_separator:
            raise CliError("--key-separator must not be empty")
        separator = args.key_separator.encode("utf-8")
    elif args.parse_key:
        separator = b"\t"
    if args.enable_idempotence and args.acks not in (None, "-1", "all"):
        raise CliError("--enable-idempotence needs --acks all")
    security = security_of(args, "headwater produce")
    producer = SyncProducer(
        bootstrap_of(args),
        security=security,
        acks=args.acks,
        enable_idempotence=args.enable_idempotence,
        compression=args.compression,
        linger_ms=args.linger_ms,
        batch_size=args.batch_size,
        request_timeout_ms=args.request_timeout_ms,
        delivery_timeout_ms=args.delivery_timeout_ms,
        unknown_topic_timeout_ms=_CLI_UNKNOWN_TOPIC_TIMEOUT_MS,
        client_id="headwater-console-producer",
    )
    # One future per batch is enough to see every failure (a batch fails all its records together):
    # keep the first future of each batch, not one per line.
    watched: list[SyncRecordFuture] = []
    failures: list[BaseException] = []
    clean = False
    topic, partition, send = args.topic, args.partition, producer.send
    try:
        producer.start()
        number = 0
        for lines in _lines(sys.stdin.buffer):
            keys: list[bytes] | None = None
            if separator is not None:
                keys, values = [], []
                for line in lines:
                    number += 1
                    key, sep, value = line.partition(separator)
                    if not sep:
                        raise CliError(f"line {number} has no key separator {separator.decode()!r}")
                    keys.append(key)
                    values.append(value)
                number -= len(lines)
            else:
                values = lines
            if number == 0:  # the first record checks the topic and the cluster before we pipeline
                first = send(topic, values[0], keys[0] if keys else None, headers, partition)
                first.result()
                watched.append(first)
                values, keys, number = values[1:], keys[1:] if keys else None, 1
            watched += producer.send_many(topic, values, keys, headers, partition, per_record=False)
            number += len(values)
            if len(watched) >= _CHECK_EVERY:
                watched = _collect(watched, failures, wait=False)
                if failures:
                    break
        if not failures:
            producer.flush()
            _collect(watched, failures, wait=True)
        clean = not failures
    finally:  # after a failure or an interrupt, give the records in flight a few seconds only
        producer.close(timeout=None if clean else 5.0)
    if failures:
        print(f"headwater produce: error: {describe_error(failures[0])}", file=sys.stderr)
        return 1
    return 0


def _collect(futures: list[SyncRecordFuture], failures: list[BaseException], *, wait: bool) -> list[SyncRecordFuture]:
    """Record the failures among ``futures`` (one per batch); return those still pending."""
    still: list[SyncRecordFuture] = []
    for fut in futures:
        if wait or fut.done():
            if (error := fut.exception()) is not None:
                failures.append(error)
        else:
            still.append(fut)
    return still


# -- consume ---------------------------------------------------------------------------------------


def _start_of(args: argparse.Namespace) -> str | int:
    if args.from_beginning:
        return "earliest"
    if args.offset is None:
        return "latest"
    text = str(args.offset).strip().lower()
    if text in ("earliest", "latest"):
        return text
    try:
        offset = int(text)
    except ValueError:
        raise CliError(f"--offset must be a number, 'earliest' or 'latest', not {args.offset!r}") from None
    if offset < 0:
        raise CliError(f"--offset must not be negative, got {offset}")
    return offset


def _format(record: Any, args: argparse.Namespace, sep: bytes) -> bytes:
    parts: list[bytes] = []
    if args.print_timestamp:
        parts.append(b"CreateTime:%d" % record.timestamp)
    if args.print_partition:
        parts.append(b"Partition:%d" % record.partition)
    if args.print_offset:
        parts.append(b"Offset:%d" % record.offset)
    if args.print_headers:
        if record.headers:
            parts.append(b",".join(k.encode() + b":" + (v if v is not None else b"null") for k, v in record.headers))
        else:
            parts.append(b"NO_HEADERS")
    if args.print_key:
        parts.append(b"null" if record.key is None else record.key)
    parts.append(b"null" if record.value is None else record.value)
    return sep.join(parts) + b"\n"


def _consume(args: argparse.Namespace) -> int:
    from headwater.client.admin import validate_topic_name
    from headwater.client.sync import SyncConsumer

    validate_topic_name(args.topic)
    start = _start_of(args)
    if args.max_messages is not None and args.max_messages < 0:
        raise CliError("--max-messages must not be negative")
    if args.timeout_ms is not None and args.timeout_ms < 0:
        raise CliError("--timeout-ms must not be negative")
    sep = args.key_separator.encode("utf-8")
    out = sys.stdout.buffer
    security = security_of(args, "headwater consume")
    consumer = SyncConsumer(
        bootstrap_of(args),
        security=security,
        client_id="headwater-console-consumer",
        unknown_topic_timeout_ms=_CLI_UNKNOWN_TOPIC_TIMEOUT_MS,
    )
    count = 0
    try:
        sub = consumer.follow(args.topic, args.partition, start, max_bytes=args.max_bytes)
        limit = args.max_messages
        last_activity = time.monotonic()
        while limit is None or count < limit:
            wait = _POLL_MS
            if args.timeout_ms is not None:
                remaining = args.timeout_ms - (time.monotonic() - last_activity) * 1000
                if remaining <= 0:
                    break
                wait = max(1, min(wait, int(remaining)))
            records = sub.poll(max_wait_ms=wait)
            if not records:
                continue
            last_activity = time.monotonic()
            for record in records:
                out.write(_format(record, args, sep))
                count += 1
                if limit is not None and count >= limit:
                    break
            out.flush()
    except KeyboardInterrupt:
        print(f"Processed a total of {count} messages", file=sys.stderr)
        raise
    finally:
        try:
            out.flush()
        finally:
            consumer.close()
    print(f"Processed a total of {count} messages", file=sys.stderr)
    return 0
