"""Workflow graphs: named steps, each after the steps whose results it takes
(a DAG, as Oban Workflow and Hatchet offer), built with :class:`Graph` and
run by the same continuations as chains and groups (``records._workflow``,
docs/workflows.md#graphs).

A graph is built step by step (``add`` may name steps added later) and
checked whole when it is frozen: when it is enqueued, or put in a chain or
a group. Names and their form are checked at once; unknown names, cycles
and types when frozen.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from ._flow_build import (
    Buildable,
    Chain,
    Dag,
    DagStep,
    FlowStep,
    Group,
    Node,
    _check_feeds,
    as_node,
    dag_sinks,
)
from ._workflow import MAX_GROUP_MEMBERS

#: Step names: letters, digits, ``_`` and ``-`` (no dots: a step's job ID is
#: ``<graph path>.<name>``), at most this long.
MAX_NAME_LENGTH = 64
_NAME = re.compile(r"[A-Za-z0-9_-]+")


class Graph:
    """A workflow graph being built: named steps, each after the steps whose
    results it takes::

        g = graph()
        g.add("fetch", fetch.s(7))
        g.add("resize", resize.s(), after="fetch")
        g.add("thumb", thumb.s(), after="fetch")
        g.add("publish", publish.s(), after=["resize", "thumb"])
        await app.enqueue_workflow(g, workflow_id="img-1")

    A step after one step gets its result; after several, their results as
    a list in its ``after`` order; after none (a root) it starts with the
    graph and takes the graph's input (its predecessor's result when the
    graph follows a step of a chain; at the start of a workflow there is
    none, so a root there needs a payload). Each step runs once, after all
    the steps it names succeeded, as job ``<workflow_id>.<name>`` (inside a
    chain or group, ``<path of the graph>.<name>``). A graph's result is its
    sink's (the step nothing comes after); with several sinks, their
    results as a list in the order they were added.

    A step is ``task.s(...)``, a chain, a group or another graph. The graph
    is checked when it is frozen (:meth:`freeze`, which ``enqueue_workflow``,
    ``chain`` and ``group`` call): later changes to this builder do not
    change a graph already frozen or started.
    """

    __slots__ = ("_freezing", "_steps")

    def __init__(self) -> None:
        self._steps: dict[str, tuple[Node | Buildable, tuple[str, ...]]] = {}
        self._freezing = False

    def add(self, name: str, step: Node | Buildable, *, after: str | Sequence[str] = ()) -> Graph:
        """Add step ``name`` (letters, digits, ``_``, ``-``), run after the
        steps named in ``after`` (one name or a sequence; they may be added
        later). Returns the graph, so calls can be chained.

        Raises ValueError for a bad or repeated name, a name repeated in
        ``after`` or a step after itself, more than ``MAX_GROUP_MEMBERS``
        names in ``after``; TypeError for a step that is not a workflow part
        or names that are not strings. Unknown names, cycles and payload
        types are checked by :meth:`freeze`."""
        _check_name(name)
        if name in self._steps:
            raise ValueError(f"the graph already has a step named {name!r}: name each step once")
        if step is self:
            raise ValueError("a graph cannot be a step of itself")
        if not isinstance(step, FlowStep | Chain | Group | Dag | Buildable):
            raise TypeError(
                f"step {name!r} must be a step (task.s(...)), a chain, a group or a graph, "
                f"got {type(step).__name__}"
            )
        names = (after,) if isinstance(after, str) else tuple(after)
        for dep in names:
            if not isinstance(dep, str):
                raise TypeError(f"step {name!r}: after= takes step names, got {dep!r}")
        if name in names:
            raise ValueError(f"step {name!r} cannot come after itself")
        if len(set(names)) < len(names):
            raise ValueError(f"step {name!r} names a step twice in after={list(names)!r}")
        if len(names) > MAX_GROUP_MEMBERS:
            raise ValueError(
                f"step {name!r} comes after {len(names)} steps; at most {MAX_GROUP_MEMBERS}"
            )
        self._steps[name] = (step, names)
        return self

    def freeze(self) -> Dag:
        """The graph as it is now, checked: its fixed form, which a workflow
        runs. Raises ValueError for an empty graph, a step after a name the
        graph does not have, a cycle (naming its steps) or more than
        ``MAX_GROUP_MEMBERS`` sinks; TypeError when a step cannot take what
        the steps it comes after hand on (as ``chain`` checks), or what a
        nested part's own check raises."""
        if not self._steps:
            raise ValueError("a graph needs at least one step")
        if self._freezing:
            raise ValueError("a graph cannot be a step of itself (through a graph it holds)")
        self._freezing = True
        try:
            return self._freeze()
        finally:
            self._freezing = False

    def _freeze(self) -> Dag:
        for name, (_, names) in self._steps.items():
            unknown = [n for n in names if n not in self._steps]
            if unknown:
                raise ValueError(
                    f"step {name!r} comes after {unknown[0]!r}, which the graph does not have "
                    f"(its steps: {', '.join(self._steps)})"
                )
        cycle = _find_cycle({name: names for name, (_, names) in self._steps.items()})
        if cycle:
            raise ValueError(
                "a graph has a cycle (each step after the one before it): " + " -> ".join(cycle)
            )
        dag = Dag(
            tuple(
                DagStep(name, as_node(step), names) for name, (step, names) in self._steps.items()
            )
        )
        sinks = dag_sinks(dag)
        if len(sinks) > MAX_GROUP_MEMBERS:
            raise ValueError(
                f"a graph has at most {MAX_GROUP_MEMBERS} sinks (steps nothing comes after), "
                f"got {len(sinks)}"
            )
        nodes = {s.name: s.node for s in dag.steps}
        for s in dag.steps:
            if not s.after:
                continue
            fed = (
                nodes[s.after[0]] if len(s.after) == 1 else Group(tuple(nodes[n] for n in s.after))
            )
            try:
                _check_feeds(fed, s.node)
            except TypeError as exc:
                raise TypeError(f"graph step {s.name!r}: {exc}") from None
        return dag

    def __len__(self) -> int:
        return len(self._steps)

    def __contains__(self, name: object) -> bool:
        return name in self._steps

    def __repr__(self) -> str:
        shown = ", ".join(
            f"{n} after {'+'.join(after)}" if after else n for n, (_, after) in self._steps.items()
        )
        return f"Graph({shown})"


def graph() -> Graph:
    """A new, empty workflow graph (see :class:`Graph`)."""
    return Graph()


def _check_name(name: object) -> None:
    if not isinstance(name, str):
        raise TypeError(f"a graph step's name is a string, got {name!r}")
    if not name or len(name) > MAX_NAME_LENGTH or not _NAME.fullmatch(name):
        raise ValueError(
            f"bad graph step name {name!r}: use 1 to {MAX_NAME_LENGTH} letters, digits, "
            "'_' or '-' (no dots: the name is part of the step's job ID)"
        )


def _find_cycle(after: dict[str, tuple[str, ...]]) -> list[str]:
    """A cycle among the steps (every name known), in run order, its first
    step repeated at the end; empty when there is none."""
    # iterative depth first search along "comes after" edges: a name met
    # again while still on the path closes a cycle
    state: dict[str, int] = {}  # 1: on the path, 2: done
    for root in after:
        if root in state:
            continue
        path: list[str] = [root]
        todo: list[list[str]] = [list(after[root])]
        state[root] = 1
        while path:
            if not todo[-1]:
                state[path.pop()] = 2
                todo.pop()
                continue
            dep = todo[-1].pop()
            seen = state.get(dep)
            if seen == 1:
                # path holds each step then one it comes after: reverse for run order
                loop = path[path.index(dep) :]
                return [*reversed(loop), loop[-1]]
            if seen is None:
                state[dep] = 1
                path.append(dep)
                todo.append(list(after[dep]))
    return []
