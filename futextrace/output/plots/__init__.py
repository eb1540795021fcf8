"""The pictures (matplotlib, Agg): one module per picture, and the helpers they share."""
