"""A measured run analysed: theory against measurement, the decode fit, the seeds' claims, the serve phase, the
comparison of several runs, and the pipeline that assembles them.
"""
