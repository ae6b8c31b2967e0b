"""Execution: how the requests that pipeline steps yield get answered.

- `driver`: runs steps, answering each round's pending requests with one batched call per kind;
- `batch`: builds many conversations together through one driver (`build_conversations`);
- `ray_engine`: shards conversations over Ray actors, each running `batch` on its own store;
- `merge`: joins the shards' stores into one queryable store.
"""
