"""The model and the GPU: a model's architecture, its parameters and quantized weights, the ideal KV-cache
arithmetic and the rooflines.
"""
