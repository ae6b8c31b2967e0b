"""The event graph on the command line: `membox show DIR --graph` (readable text) and
`membox export-graph DIR --conversation ID -o graph.graphml` (GraphML through networkx; `--format json` writes
networkx's node-link JSON). Both read the store alone (no config, no model)."""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import TextIO

from .terminal import visible_lines
from .ingest import InputError
from .store import built_systems

FORMATS = ("graphml", "json")


def _require_graph(store) -> None:
    if "eventweave" not in built_systems(store.path):
        raise InputError(f"{store.path.parent}: no event graph here (build it with a config whose [memory] systems "
                         f"include \"eventweave\", e.g. --config eventweave)")


def format_graph(store, conversation_id: str | None = None) -> str:
    """Per conversation: its summary nodes, its event nodes with their events (date, time expression, source
    turns), the edges by kind, the update links, and pairs whose extraction failed."""
    from .systems.eventweave_graph import pagerank

    _require_graph(store)
    convs = [conversation_id] if conversation_id is not None else store.conversations()
    out = []
    for conv in convs:
        events = store.ew_events(conv, woven=True)
        nodes, edges = store.ew_nodes(conv), store.ew_edges(conv)
        summaries = store.ew_summaries(conv)
        kinds: dict[str, list] = {}
        for r in edges:
            kinds.setdefault(r["kind"], []).append(r)
        counts = ", ".join(f"{len(v)} {k}" for k, v in sorted(kinds.items())) or "none"
        out.append(f"conversation {conv}: {len(nodes)} event node(s), {len(events)} event(s), "
                   f"{sum(r['status'] == 'done' for r in summaries)} summary node(s); edges: {counts}")
        for r in summaries:
            state = r["text"] if r["status"] == "done" else f"({r['status']}: {r['error']})"
            out.append(f"  summary s{r['id']} [session {r['session']}, {r['session_date'] or 'no date'}]: {state}")
        ranks = pagerank(store, conv, 0.85)
        members: dict[int, list] = {}
        for e in events:
            members.setdefault(e.node_id, []).append(e)
        for n in nodes:
            out.append(f"  node n{n.id} ({n.size} event(s), pagerank {ranks.get(n.id, 0.0):.3f})")
            for e in members.get(n.id, []):
                when = f" (when: {e.when!r} = {e.date or 'unresolved'})" if e.when else ""
                out.append(f"    - [{e.session_date or 'session ' + e.session}] {e.text}{when} "
                           f"{{{', '.join(e.sources)}}}")
        for kind, rows in sorted(kinds.items()):
            arrow = "->" if kind == "sequential" else "--"
            shown = ", ".join(f"n{r['src']}{arrow}n{r['dst']}" + (f" ({r['weight']:.2f})" if kind == "reasoning"
                                                                  else "") for r in rows)
            out.append(f"  {kind}: {shown}")
        for r in store.ew_updates(conv):
            out.append(f"  update: n{r['node_id']} moved in session {r['session']} (cosine {r['cosine']:.3f} to its "
                       f"earlier vector) with event {r['event_id']}")
        for mid, r in store.ew_pairs(conv).items():
            if r["status"] == "failed":
                out.append(f"  failed pair at message {mid}: {r['error']}")
    return "\n".join(out) if out else "no conversations"


def print_graph(store, conversation_id: str | None = None, file: TextIO | None = None) -> None:
    print(visible_lines(format_graph(store, conversation_id)), file=file or sys.stdout)


def export_graph(store, conversation_id: str, path: str | Path, fmt: str = "graphml") -> tuple[int, int]:
    """Write the conversation's graph (eventweave_graph.networkx_graph) to `path`, owner-only (it holds the
    conversation's events), written beside and renamed into place; returns (nodes, edges)."""
    import networkx as nx

    from .private import private_open
    from .systems.eventweave_graph import networkx_graph

    _require_graph(store)
    if conversation_id not in store.conversations():
        raise InputError(f"{store.path.parent}: no conversation {conversation_id!r} in this memory")
    if fmt not in FORMATS:
        raise InputError(f"--format {fmt!r}: choose one of {', '.join(FORMATS)}")
    graph = networkx_graph(store, conversation_id)
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        if fmt == "graphml":
            with private_open(tmp, "wb") as fh:
                nx.write_graphml(graph, fh)
        else:
            with private_open(tmp, "w", encoding="utf-8") as fh:
                json.dump(nx.node_link_data(graph, edges="edges"), fh, ensure_ascii=False, indent=1)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return graph.number_of_nodes(), graph.number_of_edges()


def cmd_export_graph(args) -> int:
    from .memory import open_store

    if not (Path(args.store) / "memory.db").exists():
        raise InputError(f"{args.store}: no memory here; create one with `membox build DATA --store {args.store}`")
    store = open_store(args.store)
    try:
        conv = args.conversation
        if conv is None:
            convs = store.conversations()
            if len(convs) != 1:
                raise InputError(f"{args.store} holds {len(convs)} conversations; name one with --conversation")
            conv = convs[0]
        nodes, edges = export_graph(store, conv, args.output, args.format)
    finally:
        store.close()
    print(f"{args.store}: wrote the event graph of {conv} ({nodes} node(s), {edges} edge(s)) to {args.output}",
          file=sys.stderr)
    return 0


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("export-graph", help="write a conversation's event graph (GraphML or node-link JSON)",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("store", help="memory folder (built with the eventweave system)")
    p.add_argument("--conversation", help="conversation id (default: the memory's only one)")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="the file to write (owner-only)")
    p.add_argument("--format", choices=FORMATS, default="graphml", help="graphml (default) or json (node-link)")
    p.set_defaults(func=cmd_export_graph)
