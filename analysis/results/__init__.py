"""The results directory: its contract (pydantic models, exported as JSON Schema), the loader into pandas tables,
and bounded reads of user-named files.
"""
