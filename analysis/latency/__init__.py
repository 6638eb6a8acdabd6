"""The latency model: an engine step as the terms a real GPU pays, the corpus of published measurements it is
fitted on, and the fit.
"""
