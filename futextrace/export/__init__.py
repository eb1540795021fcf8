"""`futextrace serve`: the recorder's maps as Prometheus metrics.

serve_recorder.py is the recorder it runs (bounded state; a tracing session
and loading/maparrays.py's ArrayReader, which reads the maps into numpy
arrays that summary.py summarises), reading.py turns a
recording into plain per-process values, series.py keeps the exported
counters monotonic with a bounded number of label sets, families.py names
them for Prometheus, collector.py reads the maps when scraped (no more often
than a floor) and forgets exited processes, server.py serves the HTTP
endpoint."""
