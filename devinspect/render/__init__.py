"""Renderers: pure functions from result objects to text, HTML or widgets."""
