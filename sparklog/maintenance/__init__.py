"""Topic maintenance runs: retention, compaction, optimize, log checkpoints, vacuum."""
