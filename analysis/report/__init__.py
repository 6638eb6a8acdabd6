"""Rendering: the single-run report (its pages registered in ``PAGES``), the multi-run comparison, PDF primitives
and the report's style.
"""
