"""Measurements taken while a run is live: CPU headroom, queue depth, packet conservation,
and the checks that wrap every traffic phase."""
