"""Recording: the tracing session and its poll loop, the recording built from
the map reader's dump, the live view (-i), the state at attach, --comm as tgids."""
