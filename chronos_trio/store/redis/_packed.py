"""Commands whose RESP encoding is made while their arguments are, for a
bulk enqueue's one large ``EVALSHA`` (nine arguments a job).

:class:`PackedCommand` is the command's arguments as a tuple (what every
path that reads or re-sends a command sees: Cluster routing, ``ASKING``,
the ``NOSCRIPT`` retry, redis-py's own packer) that also carries the same
command as one RESP request (``resp``), which :func:`._resp.pack` sends as
it is instead of packing thousands of arguments again one by one.

:class:`ArgvPacker` writes the RESP of enqueue.lua's per-job arguments
with the parts a batch's jobs share (the kind, and the run of arguments
after the payload) encoded once per distinct value, so a job costs its ID,
its payload's length and three list appends. Its output is byte for byte
what ``hiredis.pack_command`` writes for the same arguments (str as UTF-8,
int in decimal, bytes as they are; ``tests/test_redis_packed.py`` compares
them); an argument of another type is refused with ``TypeError`` and a str
that is not valid UTF-8 with ``UnicodeEncodeError``: the caller then sends
the plain tuple and the usual packer decides, as before.
"""

from __future__ import annotations

from typing import Any


class PackedCommand(tuple[Any, ...]):
    """A command's arguments with their RESP request (``resp``) made already."""

    resp: bytes


def bulk(arg: str | bytes | int) -> bytes:
    """One argument as a RESP bulk string (str UTF-8, int decimal). TypeError
    for another type (bool included, as the packers refuse it)."""
    t = type(arg)
    if t is str:
        b = str.encode(arg)  # type: ignore[arg-type]
    elif t is bytes:
        b = bytes(arg)  # type: ignore[arg-type]
    elif t is int:
        b = b"%d" % int(arg)
    else:
        raise TypeError(f"not packed here: {t.__name__}")
    return b"$%d\r\n%b\r\n" % (len(b), b)


def packed(
    args: tuple[Any, ...], head: tuple[Any, ...], body: list[bytes], body_count: int
) -> PackedCommand:
    """``args`` (the whole command) as a :class:`PackedCommand`: its first
    ``len(head)`` arguments are ``head``, packed here, and the other
    ``body_count`` are already packed in ``body``."""
    command = PackedCommand(args)
    command.resp = b"".join(
        [b"*%d\r\n" % (len(head) + body_count), *[bulk(a) for a in head], *body]
    )
    return command


class ArgvPacker:
    """The RESP of enqueue.lua's ARGV (see the module docstring)."""

    __slots__ = ("count", "parts")

    def __init__(self, batch_now: str) -> None:
        self.parts: list[bytes] = [bulk(batch_now)]
        self.count = 1

    def add_all(self, argv: list[Any], width: int) -> None:
        """The jobs' arguments ``argv[1:]``, ``width`` a job: an ID (str), a
        kind (str), a payload (bytes), then the rest. TypeError for an
        argument of a type not packed here, UnicodeEncodeError for a str
        that is not valid UTF-8 (then nothing of them was added)."""
        kinds: dict[str, bytes] = {}
        tails: dict[tuple[Any, ...], bytes] = {}
        out: list[bytes] = []
        append = out.append
        for k in range(1, len(argv), width):
            job_id, kind, payload = argv[k : k + 3]
            rest = tuple(argv[k + 3 : k + width])
            kind_b = kinds.get(kind)
            if kind_b is None:
                if type(kind) is not str:
                    raise TypeError("not packed here: a kind that is not str")
                kind_b = kinds[kind] = bulk(kind)
            tail = tails.get(rest)
            if tail is None:
                tail = tails[rest] = b"".join([bulk(a) for a in rest])
            if type(job_id) is not str or type(payload) is not bytes:
                raise TypeError("not packed here: an ID that is not str or a payload not bytes")
            id_b = job_id.encode()
            append(
                b"$%d\r\n%b\r\n%b$%d\r\n%b\r\n%b"
                % (len(id_b), id_b, kind_b, len(payload), payload, tail)
            )
        self.parts += out
        self.count = len(argv)

    def add_packed(self, body: bytes, count: int) -> None:
        """The jobs' arguments packed already (``body``, as :meth:`add_all`
        writes them), the whole ARGV then being ``count`` arguments."""
        self.parts.append(body)
        self.count = count
