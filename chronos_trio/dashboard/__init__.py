"""The web dashboard (extra ``dashboard``): an ASGI app built on the
:class:`~chronos_trio.Inspector`, served Trio-natively by
``python -m chronos_trio dashboard`` (Starlette on Hypercorn's Trio worker).

:func:`dashboard_app` makes the app (mount it in your own Trio ASGI server);
:func:`serve_dashboard` serves it. :class:`Extensions` adds an app's own
pages and panels."""

from ..records._public import fixup_module_metadata as _fixup
from ._app import ASGIApp as ASGIApp
from ._app import dashboard_app as dashboard_app
from ._extensions import ExtensionRequest as ExtensionRequest
from ._extensions import Extensions as Extensions
from ._extensions import Page as Page
from ._extensions import Panel as Panel
from ._serve import serve_dashboard as serve_dashboard

_fixup(__name__, globals())
__all__ = [
    "ASGIApp",
    "ExtensionRequest",
    "Extensions",
    "Page",
    "Panel",
    "dashboard_app",
    "serve_dashboard",
]
del _fixup
