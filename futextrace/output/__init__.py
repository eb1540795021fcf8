"""Showing a recording: text, JSON, plots, HTML reports."""
