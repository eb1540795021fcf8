"""`futextrace serve`: the recorder's maps as Prometheus metrics.

serve_recorder.py is the recorder it runs (bounded state; the futexes map
read in batches by mapread.py, summarised by summary.py), reading.py turns a
recording into plain per-process values, series.py keeps the exported
counters monotonic with a bounded number of label sets, families.py names
them for Prometheus, collector.py reads the maps when scraped (no more often
than a floor) and forgets exited processes, server.py serves the HTTP
endpoint."""
