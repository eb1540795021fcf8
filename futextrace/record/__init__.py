"""Recording: targets, the tracing session and its poll loop, the recording built from
the map reader's dump, the live view, snapshots."""
