"""The sweep's parent, in layers: `sweep` (run_sweep: resume, progress, the manifest), `dispatch` (one at a time,
a device pool, or Ray), `children` (engine and serve children, supervised, no orphans) and `dry_run`."""
