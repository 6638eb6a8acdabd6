"""The single-run report's pages, one module per family; analysis.report.run registers them in ``PAGES``."""
