"""A workflow's definition as its stored record holds it (the ``tree`` of
``_flow_control.WorkflowRecord``). A module of its own so that starting a
workflow, which every App may do, does not build the record and view
classes of ``_flow_control``, which only reading and controlling one needs
(a worker loads them on first use)."""

from __future__ import annotations

import json

from ._flow_build import Node, _encode_node


def encode_tree(node: Node, workflow_id: str) -> str:
    """The workflow ``node`` started as ``workflow_id``, as stored in its record."""
    return json.dumps(_encode_node(node, workflow_id), separators=(",", ":"))
