"""The event graph's operations (EventWeave §3), on the store's rows and without a model: every vector they need
is kept on the events. `GraphWeaver.add` weaves one event, online, in conversation order:

- clustering: the event joins the node whose vector (the mean of its events' vectors) is nearest, when the
  cosine exceeds `cluster_threshold` (delta); otherwise it opens a node of its own;
- update links: a node keeps the vector it had before the latest session that changed it (its layer); when a
  join moves its mean so that the cosine to that vector falls below `update_threshold` (beta), an update is
  recorded (one per node and session), so that a changed or replaced event shows;
- sequential edges: from the node of the previous event (in conversation order) to this one's, weight 1;
- temporal edges: between nodes holding events of exactly the same resolved days, weight 1: each event's node
  to the node of the latest earlier event of those days (a chain per date, not a clique: "today" is common);
- reasoning edges: between nodes whose context vectors (the mean of their events' context-aware vectors: the
  event text with its two turns) have a cosine above `reasoning_threshold` (theta), weighted by that cosine;
- bounded memory (`max_nodes` > 0): while the conversation has more nodes, the one of lowest utility
  U = l1 uniqueness + l2 future reference - l3 cost (`utilities`) is evicted with its events, never the node
  just touched; its sequential neighbours are bridged (each node before it to each after it: the time order
  stays walkable, in place of the paper's learned path-finding) and a node whose removal would still split the
  graph is passed over (checked with networkx: articulation points, then the bridged graph's components).

Summary nodes (one per session, systems/eventweave.py) join the networkx views (`networkx_graph`) linked to
the nodes of their session and to each other in time order (the hierarchy's upper layer). The graph is a pure
function of the events in order, so `rebuild` (after a forget, or an extraction retried out of order) replays
them and gets the graph an online build would have.
"""
from __future__ import annotations

import json
from typing import Sequence

import numpy as np

from ..config import EventWeaveConfig
from ..records import Message
from ..retrieval.base import count_tokens
from .eventweave_tables import SYMMETRIC, GraphEvent, GraphNode


def unit(v: np.ndarray) -> np.ndarray:
    v = np.asarray(v, dtype=np.float64)
    n = np.linalg.norm(v)
    return v / n if n > 0 else v


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(unit(a) @ unit(b))


def context_text(text: str, turns: Sequence[Message]) -> str:
    """What an event's context-aware vector embeds: the event with the turns it came from."""
    return "\n".join([text] + [m.render() for m in turns])


def derived_texts(store, events: Sequence[GraphEvent]) -> list[str]:
    """The texts embedded for these events (each one's text and context text), for dropping their cached vectors.
    Their source messages must still be stored; one that is not is skipped."""
    out: list[str] = []
    for e in events:
        turns = [m for m in (_message(store, e.conversation_id, i) for i in e.sources) if m is not None]
        out += [e.text, context_text(e.text, turns)]
    return out


def _message(store, conversation_id: str, message_id: str) -> Message | None:
    from ..store import NotFound

    try:
        return store.message(conversation_id, message_id)
    except NotFound:
        return None


def _counter(store, conversation_id: str, **add: int) -> None:
    key = f"eventweave:{conversation_id}"
    totals = json.loads(store.get_meta(key, "{}"))
    for k, v in add.items():
        totals[k] = totals.get(k, 0) + v
    store.db.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", (key, json.dumps(totals)))


def counters(store, conversation_id: str) -> dict[str, int]:
    """Running totals of one conversation's graph upkeep (evicted_nodes, evicted_events)."""
    return json.loads(store.get_meta(f"eventweave:{conversation_id}", "{}"))


class GraphWeaver:
    def __init__(self, store, cfg: "EventWeaveConfig"):
        self.store = store
        self.cfg = cfg

    # ---- weaving --------------------------------------------------------------------------------
    def weave_pending(self, conversation_id: str) -> int:
        """Weave the conversation's events not in the graph yet; when one comes before an event already woven (a
        pair retried or extracted again after the later ones), the graph is rebuilt. Returns how many."""
        new = self.store.ew_events(conversation_id, woven=False)
        if not new:
            return 0
        last = self.store.ew_last_woven(conversation_id)
        if last is not None and min(e.order for e in new) < last.order:
            self.rebuild(conversation_id)
            return len(new)
        for e in new:
            self.add(e)
        return len(new)

    def rebuild(self, conversation_id: str) -> None:
        """Replay every event of the conversation into an empty graph, in one transaction."""
        with self.store.transaction():
            self.store.ew_clear_graph(conversation_id)
            for e in self.store.ew_events(conversation_id):
                e.node_id = None
                self.add(e)

    def add(self, e: GraphEvent) -> int:
        """Weave one event (the next in conversation order) in one transaction; returns its node's id."""
        s, cfg, conv = self.store, self.cfg, e.conversation_id
        with s.transaction():
            previous = s.ew_last_woven(conv)
            nodes = s.ew_nodes(conv)
            sims = [cosine(e.vector, n.vector) for n in nodes]
            best = int(np.argmax(sims)) if nodes else -1
            if best >= 0 and sims[best] > cfg.cluster_threshold:
                node = self._join(nodes[best], e)
            else:
                node = GraphNode(0, conv, 1, e.vector, e.context_vector, e.session, e.vector)
                node.id = s.ew_put_node(node)
                nodes.append(node)
            s.ew_set_node(e.id, node.id)
            e.node_id = node.id
            if previous is not None and previous.node_id != node.id:
                s.ew_add_edge(conv, "sequential", previous.node_id, node.id, 1.0)
            other = s.ew_latest_same_days(conv, e.first_day, e.last_day, node.id) if e.first_day else None
            if other is not None:
                s.ew_add_edge(conv, "temporal", other, node.id, 1.0)
            s.ew_delete_edges(node.id, "reasoning")
            for other in nodes:
                if other.id != node.id:
                    c = cosine(node.context_vector, other.context_vector)
                    if c > cfg.reasoning_threshold:
                        s.ew_add_edge(conv, "reasoning", node.id, other.id, c)
            if cfg.max_nodes and len(nodes) > cfg.max_nodes:
                self.evict(conv, protect=node.id)
        return node.id

    def _join(self, node: GraphNode, e: GraphEvent) -> GraphNode:
        before = np.asarray(node.vector, dtype=np.float64)
        if node.layer_session != e.session:  # the first change in a new session: the earlier layer's vector
            node.layer_session, node.layer_vector = e.session, before
        n = node.size
        node.vector = (before * n + e.vector) / (n + 1)
        node.context_vector = (np.asarray(node.context_vector, dtype=np.float64) * n + e.context_vector) / (n + 1)
        node.size = n + 1
        self.store.ew_put_node(node)
        moved = cosine(node.layer_vector, node.vector)
        if moved < self.cfg.update_threshold:
            self.store.ew_record_update(e.conversation_id, node.id, e.id, e.session, moved)
        return node

    # ---- bounded memory -------------------------------------------------------------------------
    def evict(self, conversation_id: str, protect: int) -> list[int]:
        """Evict nodes of lowest utility until the conversation has `max_nodes` (see the module docstring); returns
        their ids. A node whose removal would split the graph is never evicted (checked with networkx)."""
        import networkx as nx

        s, evicted = self.store, []
        while True:
            nodes = s.ew_nodes(conversation_id)
            if len(nodes) <= self.cfg.max_nodes:
                return evicted
            graph = networkx_graph(s, conversation_id)
            plain = nx.Graph(graph.to_undirected())
            parts, cut = nx.number_connected_components(plain), set(nx.articulation_points(plain))
            utility = utilities(s, conversation_id, self.cfg)
            victim = next((n for n in sorted(nodes, key=lambda n: (utility[n.id], n.id)) if n.id != protect and
                           (f"n{n.id}" not in cut or _stays_connected(graph, plain, f"n{n.id}", parts))), None)
            if victim is None:
                return evicted
            self._remove(conversation_id, victim.id)
            after = nx.Graph(networkx_graph(s, conversation_id).to_undirected())
            if nx.number_connected_components(after) > parts:
                raise RuntimeError(f"eventweave: evicting node {victim.id} of {conversation_id} split the graph")
            evicted.append(victim.id)

    def _remove(self, conversation_id: str, node_id: int) -> None:
        s = self.store
        for a, b in _bridges(networkx_graph(s, conversation_id), f"n{node_id}"):
            s.ew_add_edge(conversation_id, "sequential", int(a[1:]), int(b[1:]), 1.0)
        events = [e for e in s.ew_events(conversation_id, woven=True) if e.node_id == node_id]
        s.forget_vectors(derived_texts(s, events))
        s.ew_delete_events(e.id for e in events)
        s.ew_delete_node(node_id)
        _counter(s, conversation_id, evicted_nodes=1, evicted_events=len(events))


def _bridges(graph, node: str) -> list[tuple[str, str]]:
    """The sequential edges that replace a node's: each node before it to each node after it."""
    before = [a for a, _, d in graph.in_edges(node, data=True) if d["kind"] == "sequential"]
    after = [b for _, b, d in graph.out_edges(node, data=True) if d["kind"] == "sequential"]
    return [(a, b) for a in before for b in after if a != b]


def _stays_connected(graph, plain, node: str, parts: int) -> bool:
    """Whether removing the node and bridging its sequential neighbours keeps the number of components."""
    import networkx as nx

    trial = plain.copy()
    trial.remove_node(node)
    trial.add_edges_from(_bridges(graph, node))
    return nx.number_connected_components(trial) <= parts


def utilities(store, conversation_id: str, cfg: "EventWeaveConfig") -> dict[int, float]:
    """Each node's utility U = l1 I + l2 F - l3 C, in place of the paper's learned predictor and weights:
    I, uniqueness: 1 - the highest cosine to another node (0..1); F, future reference: r = (events - 1) + its
    temporal and reasoning links, recency rho = 2^(-events woven since its latest / utility_half_life),
    F = rho + (1 - rho) r / (1 + r); C, cost: its events' tokens over the largest node's."""
    nodes = store.ew_nodes(conversation_id)
    if not nodes:
        return {}
    events = store.ew_events(conversation_id, woven=True)
    latest = {e.node_id: i for i, e in enumerate(events)}
    tokens: dict[int, int] = {}
    for e in events:
        tokens[e.node_id] = tokens.get(e.node_id, 0) + count_tokens(e.text)
    links: dict[int, int] = {}
    for r in store.ew_edges(conversation_id):
        if r["kind"] in SYMMETRIC:
            links[r["src"]] = links.get(r["src"], 0) + 1
            links[r["dst"]] = links.get(r["dst"], 0) + 1
    vecs = np.stack([unit(n.vector) for n in nodes])
    sims = vecs @ vecs.T
    np.fill_diagonal(sims, -np.inf)
    unique = np.clip(1.0 - sims.max(axis=1), 0.0, 1.0) if len(nodes) > 1 else np.ones(1)
    top = max(tokens.values(), default=0) or 1
    out = {}
    for n, i in zip(nodes, unique):
        r = n.size - 1 + links.get(n.id, 0)
        rho = 2.0 ** (-(len(events) - 1 - latest.get(n.id, len(events) - 1)) / cfg.utility_half_life)
        future = rho + (1.0 - rho) * r / (1.0 + r)
        out[n.id] = cfg.utility_uniqueness * float(i) + cfg.utility_reference * future - \
            cfg.utility_cost * tokens.get(n.id, 0) / top
    return out


# ---- networkx views -----------------------------------------------------------------------------
def networkx_graph(store, conversation_id: str, ranking: bool = False):
    """The conversation's graph for networkx: event nodes "n<id>" (kind "event"), summary nodes "s<id>" (kind
    "summary", linked to the nodes of their session), edges with `kind` and `weight`.

    ranking=False: a MultiDiGraph with every stored edge once (symmetric kinds from the lower id), summary edges
    from the summary, and each update as a self-loop (kind "update", weight = its cosine), attributes plain
    strings and numbers (GraphML). ranking=True: a DiGraph for PageRank: symmetric kinds and summary links both
    ways, parallel edges' weights summed, no updates."""
    import networkx as nx

    graph = nx.DiGraph() if ranking else nx.MultiDiGraph()
    members: dict[int, list[GraphEvent]] = {}
    for e in store.ew_events(conversation_id, woven=True):
        members.setdefault(e.node_id, []).append(e)
    for n in store.ew_nodes(conversation_id):
        evs = members.get(n.id, [])
        graph.add_node(f"n{n.id}", kind="event", size=n.size, label=evs[0].text if evs else "",
                       text=" | ".join(e.text for e in evs),
                       dates="; ".join(dict.fromkeys(e.date for e in evs if e.date)),
                       sessions=", ".join(dict.fromkeys(e.session for e in evs)),
                       sources=" ".join(i for e in evs for i in e.sources))

    def link(a: str, b: str, kind: str, weight: float, both: bool, **attrs) -> None:
        if not ranking:
            graph.add_edge(a, b, kind=kind, weight=float(weight), **attrs)
            return
        for x, y in ((a, b), (b, a)) if both else ((a, b),):
            if graph.has_edge(x, y):
                graph[x][y]["weight"] += float(weight)
            else:
                graph.add_edge(x, y, kind=kind, weight=float(weight))

    by_session: dict[str, list[int]] = {}
    for node_id, evs in members.items():
        for session in dict.fromkeys(e.session for e in evs):
            by_session.setdefault(session, []).append(node_id)
    place = {m.session: m.seq for m in reversed(store.messages(conversation_id))}  # session -> its first seq
    summaries = sorted((r for r in store.ew_summaries(conversation_id) if r["status"] == "done"),
                       key=lambda r: (place.get(r["session"], -1), r["id"]))
    for n, r in enumerate(summaries):
        graph.add_node(f"s{r['id']}", kind="summary", size=r["events"], label=r["text"], text=r["text"],
                       dates=r["session_date"], sessions=r["session"], sources="")
        for node_id in sorted(by_session.get(r["session"], ())):
            link(f"s{r['id']}", f"n{node_id}", "summary", 1.0, both=True)
        if n:
            link(f"s{summaries[n - 1]['id']}", f"s{r['id']}", "sequential", 1.0, both=False)
    for r in store.ew_edges(conversation_id):
        link(f"n{r['src']}", f"n{r['dst']}", r["kind"], r["weight"], both=r["kind"] in SYMMETRIC)
    if not ranking:
        for r in store.ew_updates(conversation_id):
            graph.add_edge(f"n{r['node_id']}", f"n{r['node_id']}", kind="update", weight=float(r["cosine"]),
                           session=r["session"], event=int(r["event_id"]))
    return graph


def pagerank(store, conversation_id: str, damping: float) -> dict[int, float]:
    """PageRank of the event nodes (transitions in proportion to edge weight: the edges' strength), by node id."""
    import networkx as nx

    graph = networkx_graph(store, conversation_id, ranking=True)
    if not graph.number_of_nodes():
        return {}
    ranks = nx.pagerank(graph, alpha=damping, weight="weight")
    return {int(k[1:]): v for k, v in ranks.items() if k.startswith("n")}
