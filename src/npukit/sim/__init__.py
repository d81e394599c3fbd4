"""Shared simulation cores: the event-driven timing engine and the trace writer, used by every target."""
