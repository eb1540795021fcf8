"""Recording: targets, the recorder's poll loop, map aggregation, the live view, snapshots."""
