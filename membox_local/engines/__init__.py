"""Build engines beyond one process: `ray_engine` shards conversations over Ray actors, `merge` joins the
shards' stores into the target's one queryable store."""
