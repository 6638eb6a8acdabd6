"""What vLLM does with them: the paged allocator, the KV budget and scheduler defaults, the start-up memory
accounting, the settings vLLM refuses, and its start-up log.

Pure arithmetic that mirrors vLLM's source; never imports vLLM.
"""
