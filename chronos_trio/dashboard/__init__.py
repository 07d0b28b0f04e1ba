"""The web dashboard (extra ``dashboard``): an ASGI app built on the
:class:`~chronos_trio.Inspector`, served Trio-natively by
``python -m chronos_trio dashboard``."""
